package config

import (
	"math"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/spec"
)

// field is one key a config mapping accepts: its name, a one-line
// description, the value it takes (as a JSON Schema) and its default (nil:
// none, or one that depends on the model). The decoder reads every mapping
// through its table (known rejects other keys, listing the table), and
// `coreaiq config schema` is generated from the same tables, so the
// validator and the schema cannot disagree on which keys exist.
type field struct {
	name  string
	doc   string
	value *jsonSchema
	def   any
}

// fields is the key table of one kind of mapping, in documentation order.
type fields []field

func (fs fields) names() []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

func (fs fields) has(name string) bool {
	for _, f := range fs {
		if f.name == name {
			return true
		}
	}
	return false
}

// known reports whether e's key is in fs; an unknown key is an error at it
// naming the mapping (where) and listing the valid keys.
func (d *decoder) known(e entry, where string, fs fields) bool {
	if fs.has(e.key.Value) {
		return true
	}
	d.unknownKey(e.key, where, fs.names())
	return false
}

// unread reports a key that its table lists but the decoder has no case
// for: a programming error, kept visible rather than silently ignored.
func (d *decoder) unread(e entry) {
	d.errorf(e.key, "", "internal error: key %q is in the key table but is not decoded", e.key.Value)
}

// Enumerated values the decoder accepts.
var (
	engineNames          = []string{"go", "ort"}
	executionModes       = []string{"graph", "eager"}
	paletteGranularities = []string{"per_tensor", "per_grouped_channel"}
	imageLayouts         = []string{"NCHW", "NHWC"}
	imageColors          = []string{"RGB", "BGR", "L"}
	imageDTypes          = []string{"float32", "float16", "uint8"}
	// lutDTypes are the lut_dtype spellings (each also with "torch.").
	lutDTypes = map[string]LUTDType{"float32": LUTFloat, "float": LUTFloat, "fp32": LUTFloat, "int8": LUTInt8, "uint8": LUTUInt8}
)

// The key tables, one per kind of mapping.
var (
	topFields = fields{
		{"model", "ONNX model to quantize (relative to this file; --model wins)", str(), nil},
		{"output", "where the quantized model is written (relative to this file; -o wins)", str(), nil},
		{"report", "where the JSON report is written (relative to this file)", str(), nil},
		{"engine", "inference engine for calibration: go (built in) or ort (ONNX Runtime)", enum(engineNames...), DefaultEngine},
		{"threads", "worker threads, 0 for all cores", intIn(0, math.MaxInt), 0},
		{"target", "deployment runtime whose integer kernels decide placement and default specs", enum(TargetNames()...), DefaultTarget},
		{"calibration", "calibration data: .npy/.npz files or an images block", orNull(ref("calibration")), nil},
		{"quantization_spec", "named quantization specs, anchored (&name) and used through aliases (*name)", orNull(mapOf(anyKey, ref("quantizationSpec"))), nil},
		{"quantization_config", "coreai-opt's QuantizerConfig: what is quantized and how (absent or empty: the w8a8 preset)", orEmpty(ref("quantizationConfig")), nil},
		{algorithmsKey, "post-training algorithms that change the weights before quantization", orNull(ref("algorithms")), nil},
		{"kmeans_palettization_config", "Core ML Tools' k-means palettization of weights into lookup tables", orEmpty(ref("kmeansPalettizationConfig")), nil},
	}
	calibrationFields = fields{
		{"data", "[NAME=]FILE[:axis=K] entries (.npy or .npz), one or a list", anyOf(str(), listOf(str())), nil},
		{"images", "image files turned into input tensors (resize, crop, normalize)", orNull(ref("images")), nil},
		{"samples", "calibration samples read", intIn(1, math.MaxInt), DefaultSamples},
		{"batch_size", "samples per inference (default: the model's fixed batch size, else 8)", intIn(1, math.MaxInt), nil},
	}
	imageFields = fields{
		{"dir", "folder of image files (this or glob)", str(), nil},
		{"glob", "glob of image files (this or dir)", str(), nil},
		{"input", "model input fed (default: the only one)", str(), nil},
		{"resize", "N resizes the shorter side to N; [h, w] resizes exactly", imageSize(), nil},
		{"crop", "centre crop: N for a square, [h, w] for a rectangle", imageSize(), nil},
		{"scale", "pixel divisor: value = (pixel/scale - mean[c]) / std[c]", numberIn(0, math.Inf(1)), 255},
		{"mean", "per-channel mean subtracted (one value for all channels, or one per channel)", numberList(typed("number")), nil},
		{"std", "per-channel divisor (one value or one per channel; no zeros)", numberList(&jsonSchema{Type: "number", Not: &jsonSchema{Enum: []any{0}}}), nil},
		{"layout", "tensor layout", enum(imageLayouts...), "NCHW"},
		{"color", "channel order, or L for grey (ITU-R 601-2 luma)", enum(imageColors...), "RGB"},
		{"dtype", "input element type (uint8 feeds raw pixels)", enum(imageDTypes...), "float32"},
	}
	// treeFields are quantization_config's keys; kmeans_palettization_config
	// takes those of the same names (paletteTreeFields) with module configs
	// of its own.
	treeFields = fields{
		{"global_config", "module config for every module without a more specific entry; null disables", orNull(ref("moduleConfig")), nil},
		{"module_type_configs", "module configs by module class (torch.nn.modules.linear.Linear); null disables one", orNull(mapOf(anyKey, orNull(ref("moduleConfig")))), nil},
		{"module_name_configs", "module configs by module name, or by regex matched at the start of a name; null disables one", orNull(mapOf(anyKey, orNull(ref("moduleConfig")))), nil},
		{"module_name_object_type_order_configs", "op configs for the index-th call of an op type directly in a module", orNull(listOf(ref("orderedEntry"))), nil},
		{"preset", "start from an embedded preset (coreaiq presets)", ref("preset"), nil},
		{"only_for", "move the global config onto these modules only", ref("targets"), nil},
		{"without", "leave these modules in float", ref("targets"), nil},
		{"execution_mode", "which op names op_name_config keys use besides ONNX node names", enum(executionModes...), "graph"},
	}
	paletteTreeFields = fields{
		{"global_config", "palettization for every module without a more specific entry; null disables", orNull(ref("paletteModuleConfig")), nil},
		{"module_type_configs", "palettization by module class; null leaves a class in float", orNull(mapOf(anyKey, orNull(ref("paletteModuleConfig")))), nil},
		{"module_name_configs", "palettization by module name or regex; null leaves a module in float", orNull(mapOf(anyKey, orNull(ref("paletteModuleConfig")))), nil},
		{"only_for", "move the global palettization onto these modules only", ref("targets"), nil},
		{"without", "leave these modules in float", ref("targets"), nil},
	}
	targetFields = fields{
		{"module_types", "module classes: a name or a list", targetList(), nil},
		{"module_names", "module names or regexes: a name or a list", targetList(), nil},
	}
	orderedFields = fields{
		{"module_name", "the module the op is called in (default: the root, \"\")", str(), ""},
		{"object_type", "op type of the call", ref("opType"), nil},
		{"index", "which call of the op type in the module, from 0", intIn(0, math.MaxInt), nil},
		{"config", "op config for that call; null or empty disables it", orNull(ref("opConfig")), nil},
	}
	// opFields are an op config's keys; a module config has them too
	// (moduleFields).
	opFields = fields{
		{"op_input_spec", "specs of op inputs by \"*\", index or name; null disables", ref("activationSpecs"), nil},
		{"op_output_spec", "specs of op outputs by \"*\", index or name; null disables", ref("activationSpecs"), nil},
		{"op_state_spec", "specs of op weights by \"*\" or name (weight, bias); null disables", ref("stateSpecs"), nil},
	}
	moduleFields = append(append(fields{}, opFields...), fields{
		{"op_type_config", "op configs by op type (ONNX, torch functional or aten name); null disables one", opMap(orNull(ref("opConfig"))), nil},
		{"op_name_config", "op configs by op name, or by regex matched at the start of a name; null disables one", nameMap(orNull(ref("opConfig"))), nil},
		{"module_input_spec", "specs of the module's inputs at its boundary", ref("boundaryActivationSpecs"), nil},
		{"module_output_spec", "specs of the module's outputs at its boundary", ref("boundaryActivationSpecs"), nil},
		{"module_state_spec", "specs of the module's states at its boundary", ref("boundaryStateSpecs"), nil},
		{"qat_schedule", "training schedule: accepted and ignored by post-training quantization", anything(), nil},
		{"preset", "start from an embedded preset's global config", ref("preset"), nil},
	}...)
	specFields = fields{
		{"dtype", "quantized element type", ref("dataDType"), spec.Int8.String()},
		{"qscheme", "where the grid sits around zero", ref("qscheme"), spec.Symmetric.String()},
		{"granularity", "per tensor, per channel or per block", ref("granularity"), spec.PerTensor.String()},
		{"qparam_calculator", "how observed ranges become scales (default: static for states, moving_average for activations)", ref("calculator"), nil},
		{"qparam_calculator_cls", "coreai-opt's name for qparam_calculator", ref("calculator"), nil},
		{"scale_dtype", "element type of the scales (default float32)", ref("scaleDType"), nil},
	}
	granularityFields = fields{
		{"type", "granularity type", enum(spec.GranularityTypes()...), nil},
		{"axis", "channel or block axis (default: the op weight's own; negative counts from the end)", orNull(intIn(-8, 7)), nil},
		{"block_size", "elements per block (per_block)", intIn(1, math.MaxInt), nil},
	}
	calculatorFields = fields{
		{"type", "calculator", ref("calculatorType"), nil},
		{"averaging_constant", "moving_average: weight of each new batch", numberIn(0, 1), spec.DefaultAveragingConstant},
		{"percentile", "percentile: the kept percentile", numberIn(0, 100), spec.DefaultPercentile},
		{"num_bins", "percentile, entropy, mse: histogram bins", intIn(1, math.MaxInt), spec.DefaultNumBins},
	}
	// paletteFields are one palettization's settings (Core ML Tools'
	// ModuleKMeansPalettizerConfig); a palettization module config also
	// takes op_type_config and op_name_config (paletteModuleFields).
	paletteFields = paletteDefaults(fields{
		{"n_bits", "index width: the lookup table has 2^n_bits entries", intIn(1, 8), nil},
		{"granularity", "one lookup table per tensor, or per group of channels", enum(paletteGranularities...), nil},
		{"group_size", "channels sharing a lookup table (per_grouped_channel)", orNull(intIn(1, maxGroupSize)), nil},
		{"channel_axis", "0 (output channels) or 1 (input channels), in the PyTorch layout", intIn(0, 1), nil},
		{"cluster_dim", "length of the vectors clustered together along the channel axis", orNull(intIn(1, maxClusterDim)), nil},
		{"enable_per_channel_scale", "scale each output channel to unit magnitude before clustering", boolean(), nil},
		{"lut_dtype", "lookup table element type: float32 (or null), int8 or uint8 codes with a scale", orNull(enum(withTorchPrefix(sortedKeys(lutDTypes))...)), nil},
		{"weight_threshold", "weights with at most this many elements stay in float", intIn(0, maxWeightThreshold), nil},
	})
	paletteModuleFields = append(append(fields{}, paletteFields...), fields{
		{"op_type_config", "palettization by op type; null leaves the op in float", opMap(orEmpty(ref("paletteOpConfig"))), nil},
		{"op_name_config", "palettization by op name or regex; null leaves the op in float", nameMap(orEmpty(ref("paletteOpConfig"))), nil},
	}...)
	algorithmCommonFields = fields{
		{algorithmExcludeKey, "op-name regexes (each matching a whole node name) of nodes left alone", listOf(str()), nil},
	}
)

// paletteDefaults fills the defaults of the palettization fields from
// defaultPalettization, the decoder's own.
func paletteDefaults(fs fields) fields {
	p := defaultPalettization(Rule{})
	defs := map[string]any{"n_bits": p.NBits, "granularity": p.Granularity.String(), "channel_axis": p.ChannelAxis,
		"cluster_dim": p.ClusterDim, "enable_per_channel_scale": p.PerChannelScale, "weight_threshold": p.WeightThreshold}
	for i := range fs {
		if v, ok := defs[fs[i].name]; ok {
			fs[i].def = v
		}
	}
	return fs
}

// imageSize is N or [height, width], positive.
func imageSize() *jsonSchema {
	two := 2
	pair := listOf(intIn(1, math.MaxInt))
	pair.MinItems, pair.MaxItems = &two, &two
	return anyOf(intIn(1, math.MaxInt), pair)
}

func numberList(n *jsonSchema) *jsonSchema { return anyOf(n, listOf(n)) }

// targetList is a name or a list of names (null: none).
func targetList() *jsonSchema { return anyOf(null(), str(), listOf(str())) }

// opMap is op_type_config (op type keys) and nameMap op_name_config
// (names or regexes), both null or a mapping.
func opMap(value *jsonSchema) *jsonSchema { return orNull(mapOf(ref("opType"), value)) }

func nameMap(value *jsonSchema) *jsonSchema { return orNull(mapOf(anyKey, value)) }

// orEmpty also takes null and an empty list, which the guide reads as
// "none" (isNullOrEmpty).
func orEmpty(s *jsonSchema) *jsonSchema {
	zero := 0
	empty := listOf(nil)
	empty.MaxItems = &zero
	return anyOf(s, null(), empty)
}

func withTorchPrefix(names []string) []string {
	out := append([]string(nil), names...)
	for _, n := range names {
		out = append(out, "torch."+n)
	}
	return out
}

// algorithmFields is an algorithm's settings mapping: exclude and its own
// settings.
func algorithmFields(a algorithmDecoder) fields {
	return append(append(fields{}, algorithmCommonFields...), a.settings...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

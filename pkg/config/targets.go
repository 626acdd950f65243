package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// Target is a runtime a quantized model is written for: the specs the
// config leaves open, and the ops the runtime runs as integer kernels,
// which decide where Q/DQ pairs go (passes.Prepare) and what the
// deployability lint reports (passes.Lint). Everything coreaiq knows about
// a runtime's integer kernels is in this table.
type Target struct {
	Name string
	// Runtime names the runtime and provider, for messages.
	Runtime string
	// ORT: the runtime is ONNX Runtime's CPU provider, whose optimized
	// graph can confirm the lint.
	ORT bool
	// Activation and Weight are the defaults of a config that states no
	// quantization_config. Activation dtypes other than Activation.DType
	// defeat the fast path when FastActivation says so.
	Activation, Weight spec.QuantizationSpec
	// FastActivations are the activation dtypes the integer kernels take;
	// empty: any 8-bit integer.
	FastActivations []spec.DType
	// Int8OneConsumer: int8 activations are converted to uint8 only on a
	// QuantizeLinear with a single consumer (ONNX Runtime's
	// QDQS8ToU8Transformer on x86, research/onnx-format.md §4); elsewhere
	// the consumers of an int8 activation run in float.
	Int8OneConsumer bool
	// Ops are the ops the runtime runs as integer kernels; nil means every
	// op coreaiq quantizes (the generic target).
	Ops map[string]IntegerOp
}

// IntegerOp is how a target runs one op type as an integer kernel.
type IntegerOp struct {
	// Kernel is what the runtime runs ("QLinearConv").
	Kernel string
	// Inputs are the data inputs that need a DequantizeLinear; nil: every
	// input. Constant inputs among them block the kernel: coreaiq quantizes
	// computed values and weights, not other constants.
	Inputs []int
	// Anchor ops run in integer wherever they appear: they carry the work
	// (Conv, MatMul, Gemm). The others run in integer only when every data
	// input comes from an integer op: elsewhere the QuantizeLinear in front
	// of them costs more than their integer kernel saves.
	Anchor bool
	// OptionalOutput: the kernel also runs with a float output, so no
	// QuantizeLinear is written after it unless a consumer runs in integer
	// (MatMul becomes MatMulIntegerToFloat, Gemm a QGemm with float
	// output).
	OptionalOutput bool
	// NeedsOutput, for an OptionalOutput kernel, reports the nodes that
	// need the QuantizeLinear after them all the same.
	NeedsOutput func(n *onnxgraph.Node) bool
	// SameParams: the runtime drops the Q/DQ around the op only when the
	// DequantizeLinear before it and the QuantizeLinear after it have the
	// same scale and zero point (data movement).
	SameParams bool
	// Check says why a node cannot run as this kernel, "" when it can.
	Check func(n *onnxgraph.Node) string
}

// NeedsInput reports whether input i of the op needs a DequantizeLinear.
func (o IntegerOp) NeedsInput(i int) bool {
	if o.Inputs == nil {
		return true
	}
	for _, j := range o.Inputs {
		if j == i {
			return true
		}
	}
	return false
}

// DefaultTarget is the target when neither --target nor `target:` names
// one: coreai-opt's placement and specs (docs/RATIONALE.md says why), with
// the lint reporting what ONNX Runtime on x86 runs in float.
const DefaultTarget = "generic"

// LintTarget is the target whose kernels the lint checks when the target
// names no runtime (generic): the written model is an ONNX Runtime model.
const LintTarget = "ort-x86"

// weights8 is an int8 per-channel weight spec with min/max ranges.
func weights8(q spec.QScheme) spec.QuantizationSpec {
	return spec.QuantizationSpec{DType: spec.Int8, QScheme: q, Granularity: spec.Granularity{Type: spec.PerChannel},
		Calculator: spec.Calculator{Type: spec.Static}}
}

// activations8 is a per-tensor activation spec for a runtime target. Its
// range is the 99.999th percentile of the calibration histogram, not the
// min/max: the range only sets scales and zero points, so it costs the
// runtime nothing, and on the shared models it measured better than
// min/max under every runtime target but on a few (README "Deployment
// targets" has the figures and the exceptions).
func activations8(d spec.DType, q spec.QScheme) spec.QuantizationSpec {
	return spec.QuantizationSpec{DType: d, QScheme: q, Granularity: spec.Granularity{Type: spec.PerTensor},
		Calculator: spec.Calculator{Type: spec.Percentile, Percentile: spec.DefaultPercentile}}
}

// resizeNearest: ONNX Runtime drops the Q/DQ around Resize only in
// nearest mode, and not for tf_crop_and_resize.
func resizeNearest(n *onnxgraph.Node) string {
	if a := n.Attr("mode"); a != nil && string(a.GetS()) != "nearest" {
		return fmt.Sprintf("Resize mode %q (only nearest runs on integers)", a.GetS())
	}
	if a := n.Attr("coordinate_transformation_mode"); a != nil && string(a.GetS()) == "tf_crop_and_resize" {
		return "Resize with tf_crop_and_resize"
	}
	return ""
}

// matMulAddFused: ONNX Runtime's MatMulAddFusion (level 1, before the
// QDQ fusions) turns a 2-D MatMul whose output only an Add of a constant
// reads into a Gemm with a float bias, which no QDQ rule takes; a
// QuantizeLinear after the MatMul keeps the two apart.
func matMulAddFused(n *onnxgraph.Node) bool {
	if len(n.Outputs) == 0 || n.Outputs[0] == nil || len(n.Outputs[0].Consumers) != 1 || len(n.Inputs) == 0 || n.Inputs[0] == nil {
		return false
	}
	if dims, ok := n.Inputs[0].Shape(); ok && len(dims) != 2 {
		return false // the fusion takes 2-D MatMuls (an unknown rank may be one)
	}
	add := n.Outputs[0].Consumers[0]
	if add.OpType != "Add" || add.Domain != "" || len(add.Inputs) != 2 {
		return false
	}
	for _, v := range add.Inputs {
		if v != nil && v.IsConst() {
			return true
		}
	}
	return false
}

// gatherOfTable: ONNX Runtime drops the Q/DQ around a Gather only when
// its output has the data's qparams, which a table quantized as a weight
// (per channel) does not have; it then dequantizes the whole table on
// every run to gather a few rows of it (bert_encoder's token embedding
// took 8% of the quantized model's time so), where the float model reads
// the rows directly.
func gatherOfTable(n *onnxgraph.Node) string {
	if len(n.Inputs) > 0 && n.Inputs[0] != nil && n.Inputs[0].IsConst() {
		return fmt.Sprintf("Gather of the constant table %q (ONNX Runtime would dequantize the whole table on every run)", n.Inputs[0].Name)
	}
	return ""
}

// ortCPUOps are ONNX Runtime's CPU QDQ fusions (its qdq_transformer
// selectors; research/onnx-format.md §4). ARM and x86 share them; they
// differ in the int8 rule.
func ortCPUOps() map[string]IntegerOp {
	drop := func(op string) IntegerOp {
		return IntegerOp{Kernel: op + " on integers (Q/DQ dropped)", Inputs: []int{0}, SameParams: true}
	}
	ops := map[string]IntegerOp{
		"Conv": {Kernel: "QLinearConv", Inputs: []int{0, 1}, Anchor: true},
		"MatMul": {Kernel: "QLinearMatMul or MatMulIntegerToFloat", Inputs: []int{0, 1}, Anchor: true, OptionalOutput: true,
			NeedsOutput: matMulAddFused},
		"Gemm":              {Kernel: "QGemm", Inputs: []int{0, 1}, Anchor: true, OptionalOutput: true},
		"Add":               {Kernel: "QLinearAdd", Inputs: []int{0, 1}},
		"Mul":               {Kernel: "QLinearMul", Inputs: []int{0, 1}},
		"Concat":            {Kernel: "QLinearConcat"},
		"AveragePool":       {Kernel: "QLinearAveragePool", Inputs: []int{0}},
		"GlobalAveragePool": {Kernel: "QLinearGlobalAveragePool", Inputs: []int{0}},
		"Sigmoid":           {Kernel: "QLinearSigmoid", Inputs: []int{0}},
		"LeakyRelu":         {Kernel: "QLinearLeakyRelu", Inputs: []int{0}},
		"Softmax":           {Kernel: "QLinearSoftmax", Inputs: []int{0}},
		"Where":             {Kernel: "QLinearWhere", Inputs: []int{1, 2}},
		// A Relu or Clip before a QuantizeLinear whose range it does not cut
		// is removed (ReluQuantFusion, ClipQuantFusion).
		"Relu": {Kernel: "the QuantizeLinear's clamp", Inputs: []int{0}},
		"Clip": {Kernel: "the QuantizeLinear's clamp", Inputs: []int{0}},
	}
	for _, op := range []string{"Expand", "Flatten", "Gather", "Reshape", "Slice", "Squeeze", "Tile",
		"Transpose", "Unsqueeze", "DepthToSpace", "MaxPool", "Split", "Identity", "Dropout"} {
		ops[op] = drop(op)
	}
	r := drop("Resize")
	r.Check = resizeNearest
	ops["Resize"] = r
	g := drop("Gather")
	g.Check = gatherOfTable
	ops["Gather"] = g
	return ops
}

// tensorRTOps: TensorRT runs the weighted layers on int8 when their inputs
// carry Q/DQ, and fuses the Q/DQ of residual adds and pools into them; it
// propagates scales through data movement.
func tensorRTOps() map[string]IntegerOp {
	ops := map[string]IntegerOp{
		"Conv":              {Kernel: "int8 convolution", Inputs: []int{0, 1}, Anchor: true},
		"ConvTranspose":     {Kernel: "int8 deconvolution", Inputs: []int{0, 1}, Anchor: true},
		"MatMul":            {Kernel: "int8 matrix multiply", Inputs: []int{0, 1}, Anchor: true, OptionalOutput: true},
		"Gemm":              {Kernel: "int8 matrix multiply", Inputs: []int{0, 1}, Anchor: true, OptionalOutput: true},
		"Add":               {Kernel: "int8 residual add fused into the convolution", Inputs: []int{0, 1}},
		"AveragePool":       {Kernel: "int8 pooling", Inputs: []int{0}},
		"GlobalAveragePool": {Kernel: "int8 pooling", Inputs: []int{0}},
		"MaxPool":           {Kernel: "int8 pooling", Inputs: []int{0}},
		"Concat":            {Kernel: "int8 concatenation"},
		"Relu":              {Kernel: "fused into the convolution", Inputs: []int{0}},
		"Clip":              {Kernel: "fused into the convolution", Inputs: []int{0}},
	}
	for _, op := range []string{"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Resize", "Split"} {
		ops[op] = IntegerOp{Kernel: "int8 data movement", Inputs: []int{0}}
	}
	return ops
}

// Targets is the target table.
var Targets = map[string]*Target{
	// generic's Config is the default preset; these specs only describe it.
	"generic": {Name: "generic", Runtime: "no runtime in particular (coreai-opt placement: every op coreaiq quantizes)",
		Activation: spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric, Granularity: spec.Granularity{Type: spec.PerTensor},
			Calculator: spec.Calculator{Type: spec.MovingAverage, AveragingConstant: spec.DefaultAveragingConstant}},
		Weight: weights8(spec.Symmetric)},
	"ort-x86": {Name: "ort-x86", Runtime: "ONNX Runtime CPU on x86-64", ORT: true,
		Activation: activations8(spec.UInt8, spec.Asymmetric), Weight: weights8(spec.SymmetricWithClipping),
		FastActivations: []spec.DType{spec.UInt8}, Int8OneConsumer: true, Ops: ortCPUOps()},
	"ort-arm": {Name: "ort-arm", Runtime: "ONNX Runtime CPU on ARM64", ORT: true,
		Activation: activations8(spec.Int8, spec.Asymmetric), Weight: weights8(spec.SymmetricWithClipping),
		FastActivations: []spec.DType{spec.Int8, spec.UInt8}, Ops: ortCPUOps()},
	// TensorRT takes symmetric int8 activations only (zero point 0).
	"tensorrt": {Name: "tensorrt", Runtime: "TensorRT",
		Activation: activations8(spec.Int8, spec.Symmetric), Weight: weights8(spec.Symmetric),
		FastActivations: []spec.DType{spec.Int8}, Ops: tensorRTOps()},
	"qnn": {Name: "qnn", Runtime: "Qualcomm QNN (HTP)",
		Activation: activations8(spec.UInt8, spec.Asymmetric), Weight: weights8(spec.Symmetric),
		FastActivations: []spec.DType{spec.UInt8, spec.UInt16}},
}

// TargetNames lists the targets, sorted.
func TargetNames() []string {
	var out []string
	for n := range Targets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LookupTarget returns the named target ("" is DefaultTarget).
func LookupTarget(name string) (*Target, error) {
	if name == "" {
		name = DefaultTarget
	}
	t, ok := Targets[name]
	if !ok {
		hint := ""
		if m := didYouMean(name, TargetNames()); m != "" {
			hint = fmt.Sprintf("; did you mean %q?", m)
		}
		return nil, fmt.Errorf("unknown target %q (targets: %s)%s", name, strings.Join(TargetNames(), ", "), hint)
	}
	return t, nil
}

// Fast reports whether the target's integer kernels take activations of
// dtype d.
func (t *Target) Fast(d spec.DType) bool {
	if len(t.FastActivations) == 0 {
		return d.Bits() == 8
	}
	for _, f := range t.FastActivations {
		if f == d {
			return true
		}
	}
	return false
}

// Config is the quantization config of a config file that states none:
// the target's activation and weight specs everywhere, as a preset file
// would give them. Its rules name the file "target:NAME".
func (t *Target) Config() (*QuantizerConfig, error) {
	if t.Name == DefaultTarget {
		return Preset(DefaultPreset)
	}
	cfg, err := Parse(t.ConfigYAML(), "target:"+t.Name)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", t.Name, err)
	}
	return cfg.Quant, nil
}

// ConfigYAML is the text of Config: the default preset's for the generic
// target.
func (t *Target) ConfigYAML() []byte {
	if t.Name == DefaultTarget {
		b, err := PresetYAML(DefaultPreset)
		if err != nil {
			panic(err) // embedded
		}
		return b
	}
	return []byte(fmt.Sprintf(`# defaults of target %s
quantization_spec:
  activation: &activation
%s  weight: &weight
%squantization_config:
  global_config:
    op_input_spec:
      "*": *activation
    op_output_spec:
      "*": *activation
    op_state_spec:
      weight: *weight
`, t.Name, specYAML(t.Activation), specYAML(t.Weight)))
}

func specYAML(s spec.QuantizationSpec) string {
	g := "{ type: per_tensor }"
	if s.Granularity.Type == spec.PerChannel {
		g = "{ type: per_channel }"
	}
	calc := s.Calculator.Type.String()
	switch s.Calculator.Type {
	case spec.Percentile:
		calc = fmt.Sprintf("{ type: percentile, percentile: %g }", s.Calculator.Percentile)
	case spec.MovingAverage:
		calc = fmt.Sprintf("{ type: moving_average, averaging_constant: %g }", s.Calculator.AveragingConstant)
	}
	return fmt.Sprintf("    dtype: %s\n    qscheme: %s\n    granularity: %s\n    qparam_calculator: %s\n", s.DType, s.QScheme, g, calc)
}

// target reads the `target:` key.
func (d *decoder) target(cfg *Config, e entry) {
	s, ok := d.str(e.val, "target")
	if !ok {
		return
	}
	if _, known := Targets[s]; !known {
		d.errorf(e.val, didYouMean(s, TargetNames()), "target %q: want one of %s", s, strings.Join(TargetNames(), ", "))
		return
	}
	cfg.FileSettings.Target = s
	cfg.FileSettings.TargetRule = d.rule(e.val, "target")
	cfg.FileSettings.set["target"] = s
}

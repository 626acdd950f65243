package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// tree describes one top-level config of the guide's shape: its key, the
// keys it accepts (preset among them or not), the global config it has when
// global_config is omitted, and how it decodes a module config.
type tree struct {
	path     string
	keys     fields
	defaults func(Rule) *ModuleConfig
	module   func(d *decoder, n *yaml.Node, r Rule) *ModuleConfig
}

// quantizerTree is quantization_config; a function, not a variable,
// because presets are parsed through it.
func quantizerTree() tree {
	return tree{path: "quantization_config", keys: treeFields,
		defaults: defaultModuleConfig, module: (*decoder).moduleConfig}
}

// paletteTree is kmeans_palettization_config.
func paletteTree() tree {
	return tree{path: "kmeans_palettization_config", keys: paletteTreeFields,
		defaults: defaultPaletteModule, module: (*decoder).paletteModule}
}

// PaletteGranularity is how many lookup tables a weight gets.
type PaletteGranularity uint8

// The granularities: one LUT for the whole tensor, or one per group of
// group_size channels along channel_axis.
const (
	PalettePerTensor PaletteGranularity = iota
	PalettePerGroupedChannel
)

func (g PaletteGranularity) String() string {
	if g == PalettePerGroupedChannel {
		return "per_grouped_channel"
	}
	return "per_tensor"
}

// LUTDType is the element type a lookup table is stored in.
type LUTDType uint8

// The LUT types: float (the weight's own type), or int8/uint8 codes with
// one scale (and for uint8 a zero point) per LUT.
const (
	LUTFloat LUTDType = iota
	LUTInt8
	LUTUInt8
)

func (t LUTDType) String() string {
	switch t {
	case LUTInt8:
		return "int8"
	case LUTUInt8:
		return "uint8"
	}
	return "float"
}

// Palettization is one module's or op's k-means palettization: Core ML
// Tools' ModuleKMeansPalettizerConfig fields, defaults filled in.
type Palettization struct {
	// NBits is the index width: the LUT has 2^NBits entries (1–8).
	NBits       int
	Granularity PaletteGranularity
	// GroupSize is the channels sharing a LUT (per_grouped_channel).
	GroupSize int
	// ChannelAxis is 0 (output channels) or 1 (input channels), in the
	// PyTorch layout; resolution turns it into the ONNX weight's axis.
	ChannelAxis int
	// ClusterDim is the length of the vectors clustered together along
	// the channel axis (1: scalar palettization).
	ClusterDim int
	// PerChannelScale divides each output channel by its largest magnitude
	// before clustering and multiplies it back after the lookup.
	PerChannelScale bool
	LUTDType        LUTDType
	// WeightThreshold leaves weights with at most this many elements in
	// float.
	WeightThreshold int
	Rule            Rule
}

// String is the one-line description inspect and reports print.
func (p *Palettization) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d-bit LUT %s", p.NBits, p.Granularity)
	if p.Granularity == PalettePerGroupedChannel {
		fmt.Fprintf(&b, " group_size=%d", p.GroupSize)
	}
	fmt.Fprintf(&b, " channel_axis=%d", p.ChannelAxis)
	if p.ClusterDim > 1 {
		fmt.Fprintf(&b, " cluster_dim=%d", p.ClusterDim)
	}
	if p.PerChannelScale {
		b.WriteString(" per_channel_scale")
	}
	if p.LUTDType != LUTFloat {
		fmt.Fprintf(&b, " lut_dtype=%s", p.LUTDType)
	}
	return b.String()
}

// defaultPalettization is ModuleKMeansPalettizerConfig(): 4 bits, one LUT
// per tensor, weights above 2048 elements.
func defaultPalettization(r Rule) *Palettization {
	return &Palettization{NBits: 4, ClusterDim: 1, WeightThreshold: 2048, Rule: r}
}

// defaultPaletteModule is a palettization module config with the defaults.
// Its op_*_spec groups are disabled: a palettization config quantizes
// nothing.
func defaultPaletteModule(r Rule) *ModuleConfig {
	off := func(field string) *SpecMap {
		m := emptySpecMap(r, field)
		m.Disabled = true
		return m
	}
	return &ModuleConfig{
		OpInput: off("op_input_spec"), OpOutput: off("op_output_spec"), OpState: off("op_state_spec"),
		ModuleInput: emptySpecMap(r, "module_input_spec"), ModuleOutput: emptySpecMap(r, "module_output_spec"),
		ModuleState: emptySpecMap(r, "module_state_spec"),
		Palette:     defaultPalettization(r), Rule: r,
	}
}

// paletteModule decodes a module config of kmeans_palettization_config:
// the palettization fields and op_type_config/op_name_config, whose entries
// take the same fields.
func (d *decoder) paletteModule(n *yaml.Node, r Rule) *ModuleConfig {
	mc := defaultPaletteModule(r)
	p := mc.Palette
	for _, e := range d.mapping(n) {
		if !d.known(e, "a palettization module config", paletteModuleFields) {
			continue
		}
		path := joinPath(r.Path, e.key.Value)
		switch e.key.Value {
		case "op_type_config":
			mc.OpTypes = d.opTypeEntries(e.val, path, d.paletteOp)
		case "op_name_config":
			mc.OpNames = d.opNameEntries(e.val, path, d.paletteOp)
		default:
			d.paletteField(p, e)
		}
	}
	d.checkPalettization(p, n)
	return mc
}

// paletteOp decodes an op_type_config/op_name_config entry of a
// palettization config; null or empty leaves the op's weights in float.
func (d *decoder) paletteOp(n *yaml.Node, r Rule) *OpConfig {
	if isNullOrEmpty(n) || !d.wantMapping(n, r.Path) {
		return nil
	}
	oc := defaultPaletteModule(r).opConfig()
	for _, e := range d.mapping(n) {
		if d.known(e, "a palettization op config", paletteFields) {
			d.paletteField(oc.Palette, e)
		}
	}
	d.checkPalettization(oc.Palette, n)
	return oc
}

// Upper bounds of the palettization sizes: far past any weight, and
// exact in a float64, which is how JSON tools read numbers.
const (
	maxGroupSize       = 1 << 30
	maxClusterDim      = 1 << 16
	maxWeightThreshold = 1 << 53
)

// paletteField decodes one palettization field (a key of paletteFields)
// into p.
func (d *decoder) paletteField(p *Palettization, e entry) {
	k := e.key.Value
	within := func(lo, hi int, what string) (int, bool) {
		v, ok := d.integer(e.val, k)
		if ok && (v < lo || v > hi) {
			d.errorf(e.val, "", "%s must be %s, got %d", k, what, v)
			return 0, false
		}
		return v, ok
	}
	switch k {
	case "n_bits":
		if v, ok := within(1, 8, "1 to 8"); ok {
			p.NBits = v
		}
	case "granularity":
		if s, ok := d.str(e.val, k); ok {
			switch s {
			case paletteGranularities[PalettePerTensor]:
				p.Granularity = PalettePerTensor
			case paletteGranularities[PalettePerGroupedChannel]:
				p.Granularity = PalettePerGroupedChannel
			default:
				d.errorf(e.val, didYouMean(s, paletteGranularities), "granularity %q: want %s", s, strings.Join(paletteGranularities, " or "))
			}
		}
	case "group_size":
		if isNull(e.val) {
			p.GroupSize = 0
		} else if v, ok := within(1, maxGroupSize, "positive"); ok {
			p.GroupSize = v
		}
	case "channel_axis":
		if v, ok := within(0, 1, "0 (output channels) or 1 (input channels)"); ok {
			p.ChannelAxis = v
		}
	case "cluster_dim":
		if isNull(e.val) {
			p.ClusterDim = 1
		} else if v, ok := within(1, maxClusterDim, "positive"); ok {
			p.ClusterDim = v
		}
	case "enable_per_channel_scale":
		v := deref(e.val)
		if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&p.PerChannelScale) != nil {
			d.errorf(e.val, "", "%s: want true or false, got %s", k, kindName(e.val))
		}
	case "lut_dtype":
		if isNull(e.val) {
			p.LUTDType = LUTFloat
			break
		}
		if s, ok := d.str(e.val, k); ok {
			if t, known := lutDTypes[strings.TrimPrefix(s, "torch.")]; known {
				p.LUTDType = t
			} else {
				valid := []string{"float32", "int8", "uint8"}
				d.errorf(e.val, didYouMean(s, valid), "lut_dtype %q: want float32 (or null), int8 or uint8", s)
			}
		}
	case "weight_threshold":
		if v, ok := within(0, maxWeightThreshold, "0 or more (at most 2^53)"); ok {
			p.WeightThreshold = v
		}
	default:
		d.unread(e)
	}
}

// checkPalettization refuses combinations of fields that contradict each
// other; n locates the config.
func (d *decoder) checkPalettization(p *Palettization, n *yaml.Node) {
	switch {
	case p.Granularity == PalettePerGroupedChannel && p.GroupSize == 0:
		d.errorf(n, "", "%s: per_grouped_channel needs group_size (the channels that share a LUT)", p.Rule.Path)
	case p.Granularity == PalettePerTensor && p.GroupSize != 0:
		d.errorf(n, "", "%s: group_size %d applies to per_grouped_channel granularity, not per_tensor", p.Rule.Path, p.GroupSize)
	case p.Granularity == PalettePerGroupedChannel && p.ClusterDim > 1 && p.GroupSize%p.ClusterDim != 0:
		d.errorf(n, "", "%s: group_size %d is not a multiple of cluster_dim %d: a vector would straddle two LUTs", p.Rule.Path, p.GroupSize, p.ClusterDim)
	case p.ChannelAxis == 1 && p.Granularity == PalettePerTensor && p.ClusterDim == 1:
		d.notices = append(d.notices, d.diag(n, "", "%s: channel_axis 1 changes nothing here: it picks the axis that per_grouped_channel groups and cluster_dim vectors run along, and with per_tensor granularity and cluster_dim 1 each weight is one LUT of single values", p.Rule.Path))
	}
}

// paletteOnly is the quantization config of a file that has a
// kmeans_palettization_config and no quantization_config: nothing is
// quantized, weights are only palettized.
func paletteOnly(r Rule) *QuantizerConfig {
	r.Path = "quantization_config (absent: the file only palettizes)"
	return &QuantizerConfig{GlobalRule: r}
}

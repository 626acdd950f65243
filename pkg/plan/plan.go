// Package plan holds the Plan: every quantization point of a model with
// its spec and qparams, the nodes left in float and the notes on decisions.
// The passes fill it in, one stage after another; finalize writes what it
// says. It sits below both so that neither owns the other's data.
package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// Role is what a quantized tensor is to the node it serves.
type Role uint8

// The roles.
const (
	// Activation is a tensor computed at run time (or a graph input): it gets
	// QuantizeLinear → DequantizeLinear.
	Activation Role = iota
	// Weight is a constant stored as integers followed by DequantizeLinear.
	Weight
	// Bias is the int32 bias of Conv/ConvTranspose/Gemm, with scale =
	// input scale × weight scale.
	Bias
)

var roleNames = [...]string{"activation", "weight", "bias"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// MarshalText writes the role's name.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Stage is how far the pipeline has filled in a Plan.
type Stage uint8

// The stages, in pipeline order.
const (
	StageNone Stage = iota
	Inspected
	Prepared
	Calibrated
	// QParamsDecided: every tensor has its scales and zero points (its
	// group root's when shared), biases included.
	QParamsDecided
	Finalized
)

var stageNames = [...]string{"none", "inspected", "prepared", "calibrated", "qparams", "finalized"}

func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// MarshalText writes the stage's name.
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Range is a closed interval of real values.
type Range struct {
	Min float32 `json:"min"`
	Max float32 `json:"max"`
}

// Params are the qparams of one tensor: one scale and zero point per
// tensor, channel or block, in the layout of the granularity (per block:
// row-major over the scale tensor's shape).
type Params struct {
	Scales     []float32 `json:"scales"`
	ZeroPoints []int32   `json:"zero_points"`
	// Observed is the range the params were computed from (calibration or
	// weight data), for the report; nil when not known.
	Observed *Range `json:"observed,omitempty"`
	// NaN and Inf count the calibration values of an activation that
	// were NaN or ±Inf: the observers leave them out of the range.
	NaN int64 `json:"nan,omitempty"`
	Inf int64 `json:"inf,omitempty"`
}

// Clone returns a deep copy.
func (p *Params) Clone() *Params {
	if p == nil {
		return nil
	}
	c := &Params{Scales: append([]float32(nil), p.Scales...), ZeroPoints: append([]int32(nil), p.ZeroPoints...), NaN: p.NaN, Inf: p.Inf}
	if p.Observed != nil {
		o := *p.Observed
		c.Observed = &o
	}
	return c
}

// TensorPlan is one quantization point: a value of the graph, how it is
// quantized and why.
type TensorPlan struct {
	// Value is the ONNX value name.
	Value string `json:"value"`
	Role  Role   `json:"role"`
	// Spec is the resolved spec (no "auto" fields); Axis and BlockSize
	// below are the granularity as applied to this tensor.
	Spec *spec.QuantizationSpec `json:"-"`
	// Rule is the config entry that chose the spec.
	Rule config.Rule `json:"rule"`
	// Nodes are the nodes the tensor is quantized for, the one whose spec
	// chose it first.
	Nodes []string `json:"nodes"`
	// FloatType is the ONNX element type of the float tensor (1 float32,
	// 10 float16, 16 bfloat16); scales of activations use it.
	FloatType int32 `json:"float_type"`
	// Shape is the shape of a weight or bias (nil for activations).
	Shape []int `json:"shape,omitempty"`
	// Axis is the quantization axis (non-negative) for per-channel and
	// per-block granularity, -1 per tensor.
	Axis int `json:"axis"`
	// BlockSize is the per-block block size, 0 otherwise.
	BlockSize int `json:"block_size,omitempty"`
	// SharedWith names the value whose qparams this tensor reuses (its
	// group's root), "" when the tensor has its own.
	SharedWith string `json:"shared_with,omitempty"`
	// Fixed is the known output range of Softmax, Sigmoid, Tanh, Clip: the
	// qparams need no calibration.
	Fixed *Range `json:"fixed,omitempty"`
	// Headroom widens the calibrated range upward by its own width (one bit
	// of the grid above the calibrated maximum): the value's largest
	// entries decide a Softmax's or an ArgMax's output
	// (ops.Op.DecidedByMax), where one above the maximum seen in
	// calibration would be clipped and tie with the others clipped.
	Headroom bool `json:"headroom,omitempty"`
	// KeepMax keeps the calibrated maximum where the spec's calculator
	// searches a histogram for a range that clips (percentile, mse,
	// entropy): the value is the input of
	// the layer that computes the values a Softmax or an ArgMax is decided
	// by (a classifier's last layer). Its largest entries, rare over the
	// calibration data, are the evidence for the winning class.
	KeepMax bool `json:"keep_max,omitempty"`
	// Rescaled says how an algorithm that keeps the model's function
	// changed this value (cross-layer equalization, SmoothQuant, AWQ
	// divide a channel and shift it, and the next layer undoes it): the
	// value is the original one divided by Scale and minus Shift, channel
	// by channel along Axis. The writer records it on the value's
	// QuantizeLinear and DequantizeLinear (finalize.RescaledMetadataKey),
	// so that compare --per-layer can set it against the float model. Nil:
	// the value is the original one.
	Rescaled *Rescale `json:"rescaled,omitempty"`
	// MixedConcat marks the output of a Concat that only graph outputs read
	// (directly or through data movement and further Concats): a
	// detector's boxes in pixels beside its class probabilities. When an
	// input with qparams of its own spans so little of the range of this
	// tensor's qparams group that one scale would keep it fewer than 16
	// levels, DecideQParams leaves the whole group in float.
	MixedConcat bool `json:"mixed_concat,omitempty"`
	// SiLUFloor marks the input of a SiLU (quantized as a pattern, read by
	// nothing else): DecideQParams starts its range where the SiLU's
	// quantized output leaves 0, every input below giving that output the
	// code of 0.
	SiLUFloor bool `json:"silu_floor,omitempty"`
	// Floored is set once DecideQParams has started a SiLUFloor value's
	// range at that floor: the inputs clipped there do not reach the
	// SiLU's output, and compare --per-layer does not count them.
	Floored bool `json:"floored,omitempty"`
	// WideHeadroom widens the calibrated range away from zero by half
	// (passes.WideHeadroomFactor: the maximum and, when the range reaches
	// below zero, the minimum times 1.5, 0.58 bit of the grid): the value
	// is a calibrated activation on a grid of 16 bits or more, whose step
	// leaves resolution to spare, while values beyond the calibration
	// samples' extremes would be clipped.
	WideHeadroom bool `json:"wide_headroom,omitempty"`
	// Intrinsic describes the op-intrinsic rule that set this tensor's
	// qscheme or range over the config's spec (an asymmetric Relu output, a
	// fixed Sigmoid range), "" when the spec is the config's as written.
	Intrinsic string `json:"intrinsic,omitempty"`
	// Input and Weight are the activation and weight a Bias's scale is the
	// product of.
	Input  string `json:"input,omitempty"`
	Weight string `json:"weight,omitempty"`
	// BiasBeta is Gemm's beta, folded into the quantized bias (0 or 1: none).
	BiasBeta float32 `json:"bias_beta,omitempty"`
	// Params are the qparams: set in prepare for weights and fixed ranges,
	// by the qparams pass for calibrated activations and biases (which may
	// enlarge a weight's scales); nil on a tensor sharing its root's.
	Params *Params `json:"params,omitempty"`
}

// SpecString is the spec's one-line description.
func (t *TensorPlan) SpecString() string {
	if t.Role == Bias {
		return "int32 (scale = input scale × weight scale)"
	}
	return t.Spec.String()
}

// MarshalJSON adds the spec's fields in their config spelling.
func (t *TensorPlan) MarshalJSON() ([]byte, error) {
	type plain TensorPlan
	out := struct {
		*plain
		DType       string `json:"dtype"`
		QScheme     string `json:"qscheme,omitempty"`
		Granularity string `json:"granularity,omitempty"`
		Calculator  string `json:"calculator,omitempty"`
		ScaleDType  string `json:"scale_dtype,omitempty"`
	}{plain: (*plain)(t), DType: "int32"}
	if t.Spec != nil {
		out.DType = t.Spec.DType.String()
		out.QScheme = t.Spec.QScheme.String()
		out.Granularity = t.Spec.Granularity.Type.String()
		out.Calculator = t.Spec.Calculator.String()
		out.ScaleDType = t.Spec.ScaleDType.String()
	}
	return json.Marshal(out)
}

// Skip is a node left unquantized, with the reason.
type Skip struct {
	Node   string `json:"node"`
	OpType string `json:"op_type"`
	Reason string `json:"reason"`
}

// Plan is the pipeline's shared state: every quantization point of a model,
// the nodes left in float with reasons, and notes on decisions.
type Plan struct {
	Stage   Stage         `json:"stage"`
	Tensors []*TensorPlan `json:"tensors"`
	Skipped []Skip        `json:"skipped"`
	// Palettes are the weights kmeans_palettization_config replaces by
	// LUT indices (none of them is also in Tensors).
	Palettes []*PalettePlan `json:"palettes,omitempty"`
	// Notes record decisions a user may want to know about (conflicting
	// specs on one tensor, fused patterns, ignored settings).
	Notes []string `json:"notes"`

	index map[string]*TensorPlan
}

// Add records a tensor plan. A value is planned at most once.
func (p *Plan) Add(t *TensorPlan) error {
	if p.index == nil {
		p.reindex()
	}
	if _, ok := p.index[t.Value]; ok {
		return fmt.Errorf("tensor %q planned twice", t.Value)
	}
	p.index[t.Value] = t
	p.Tensors = append(p.Tensors, t)
	return nil
}

// Remove takes the named values out of the plan (their nodes then read
// the float values).
func (p *Plan) Remove(values map[string]bool) {
	kept := p.Tensors[:0]
	for _, t := range p.Tensors {
		if !values[t.Value] {
			kept = append(kept, t)
		}
	}
	clear(p.Tensors[len(kept):])
	p.Tensors = kept
	p.reindex()
}

// Tensor returns the plan of a value, or nil.
func (p *Plan) Tensor(value string) *TensorPlan {
	if p.index == nil {
		p.reindex()
	}
	return p.index[value]
}

func (p *Plan) reindex() {
	p.index = make(map[string]*TensorPlan, len(p.Tensors))
	for _, t := range p.Tensors {
		p.index[t.Value] = t
	}
}

// Root returns the tensor whose qparams t uses (t itself when not shared).
func (p *Plan) Root(t *TensorPlan) *TensorPlan {
	for i := 0; t != nil && t.SharedWith != "" && i <= len(p.Tensors); i++ {
		t = p.Tensor(t.SharedWith)
	}
	return t
}

// Observed lists the activations calibration must observe: group roots
// without a fixed range, sorted by name.
func (p *Plan) Observed() []*TensorPlan {
	var out []*TensorPlan
	for _, t := range p.Tensors {
		if t.Role == Activation && t.SharedWith == "" && t.Fixed == nil {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// Sort orders tensors by value name and skipped nodes by node name, the
// canonical order of dumps and reports.
func (p *Plan) Sort() {
	sort.SliceStable(p.Tensors, func(i, j int) bool { return p.Tensors[i].Value < p.Tensors[j].Value })
	sort.SliceStable(p.Skipped, func(i, j int) bool { return p.Skipped[i].Node < p.Skipped[j].Node })
}

// Dump writes the plan as deterministic text, tensors sorted by name.
func (p *Plan) Dump(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "plan stage=%s tensors=%d skipped=%d\n", p.Stage, len(p.Tensors), len(p.Skipped))
	ts := append([]*TensorPlan(nil), p.Tensors...)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Value < ts[j].Value })
	for _, t := range ts {
		fmt.Fprintf(&b, "tensor %q %s %s\n", t.Value, t.Role, t.SpecString())
		if t.Axis >= 0 {
			fmt.Fprintf(&b, "  axis=%d", t.Axis)
			if t.BlockSize > 0 {
				fmt.Fprintf(&b, " block_size=%d", t.BlockSize)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "  rule %s\n", t.Rule)
		if t.Intrinsic != "" {
			fmt.Fprintf(&b, "  intrinsic %s\n", t.Intrinsic)
		}
		fmt.Fprintf(&b, "  nodes %s\n", strings.Join(quote(t.Nodes), " "))
		if t.Shape != nil {
			fmt.Fprintf(&b, "  shape %v\n", t.Shape)
		}
		if t.SharedWith != "" {
			fmt.Fprintf(&b, "  shared_with %q\n", t.SharedWith)
		}
		if t.Fixed != nil {
			fmt.Fprintf(&b, "  fixed [%g, %g]\n", t.Fixed.Min, t.Fixed.Max)
		}
		if t.Role == Bias {
			fmt.Fprintf(&b, "  input %q weight %q", t.Input, t.Weight)
			if t.BiasBeta != 0 && t.BiasBeta != 1 {
				fmt.Fprintf(&b, " beta %g", t.BiasBeta)
			}
			b.WriteString("\n")
		}
		if t.Params != nil {
			fmt.Fprintf(&b, "  params %s\n", t.Params.summary())
		}
	}
	sk := append([]Skip(nil), p.Skipped...)
	sort.SliceStable(sk, func(i, j int) bool { return sk[i].Node < sk[j].Node })
	for _, s := range sk {
		fmt.Fprintf(&b, "skip %q (%s): %s\n", s.Node, s.OpType, s.Reason)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summary is a compact, deterministic description of params: the count
// and range of scales and zero points, and the values when there are few.
func (p *Params) summary() string {
	var b strings.Builder
	if len(p.Scales) <= 4 {
		fmt.Fprintf(&b, "scale=%v zero_point=%v", p.Scales, p.ZeroPoints)
	} else {
		smin, smax := float32(math.Inf(1)), float32(math.Inf(-1))
		for _, s := range p.Scales {
			smin, smax = min(smin, s), max(smax, s)
		}
		zmin, zmax := int32(math.MaxInt32), int32(math.MinInt32)
		for _, z := range p.ZeroPoints {
			zmin, zmax = min(zmin, z), max(zmax, z)
		}
		fmt.Fprintf(&b, "scales[%d] in [%g, %g] zero_points in [%d, %d]", len(p.Scales), smin, smax, zmin, zmax)
	}
	if p.Observed != nil {
		fmt.Fprintf(&b, " observed [%g, %g]", p.Observed.Min, p.Observed.Max)
	}
	return b.String()
}

func quote(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// WriteJSON writes the plan as an indented JSON document, tensors sorted by
// name.
func (p *Plan) WriteJSON(w io.Writer) error {
	c := *p
	c.Tensors = append([]*TensorPlan(nil), p.Tensors...)
	c.Skipped = append([]Skip(nil), p.Skipped...)
	c.Sort()
	if c.Skipped == nil {
		c.Skipped = []Skip{}
	}
	if c.Notes == nil {
		c.Notes = []string{}
	}
	if c.Tensors == nil {
		c.Tensors = []*TensorPlan{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&c)
}

// Rescale is a per-channel change of a value that the layers after it
// undo: the value is original/Scale[c] − Shift[c] for channel c along
// Axis (−1: the last axis). Shift may be nil (all zero).
type Rescale struct {
	Axis  int       `json:"axis"`
	Scale []float32 `json:"scale"`
	Shift []float32 `json:"shift,omitempty"`
}

// Then is r followed by a further rescale along the same axis by scale
// and shift (nil shift: zero); nil when the axes differ.
func (r *Rescale) Then(axis int, scale, shift []float32) *Rescale {
	if r == nil {
		return &Rescale{Axis: axis, Scale: slices.Clone(scale), Shift: slices.Clone(shift)}
	}
	if r.Axis != axis || len(r.Scale) != len(scale) {
		return nil
	}
	out := &Rescale{Axis: axis, Scale: make([]float32, len(scale))}
	if r.Shift != nil || shift != nil {
		out.Shift = make([]float32, len(scale))
	}
	for c := range scale {
		out.Scale[c] = r.Scale[c] * scale[c]
		if out.Shift != nil {
			var s1, s2 float32
			if r.Shift != nil {
				s1 = r.Shift[c]
			}
			if shift != nil {
				s2 = shift[c]
			}
			// (x/S1 − C1)/S2 − C2 = x/(S1·S2) − (C1/S2 + C2)
			out.Shift[c] = s1/scale[c] + s2
		}
	}
	return out
}

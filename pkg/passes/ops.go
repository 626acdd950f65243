package passes

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// What prepare knows about each op type (its quantization rule, weight
// axes, value-range facts) is the op table's (pkg/ops); this file reads
// it.

// opKind is how an op's tensors are quantized (ops.Kind).
type opKind = ops.Kind

const (
	opCompute = ops.Compute
	opGeneric = ops.Generic
	opShared  = ops.Shared
)

// opRule is prepare's view of an op's quantization rule.
type opRule struct {
	*ops.Quant
	kind opKind
	// fixed is the known output range (Softmax, Sigmoid, Tanh).
	fixed *Range
	// bias is the input index of an int32 bias, -1 for none.
	bias int
	// fusesRelu: an activation that alone consumes the output is fused
	// into the op, so no Q/DQ goes between them.
	fusesRelu bool
}

// ruleOf returns n's quantization rule; ok is false for ops prepare
// leaves in float.
func ruleOf(n *onnxgraph.Node) (opRule, bool) {
	op, ok := ops.Of(n)
	if !ok || op.Quant == nil {
		return opRule{}, false
	}
	q := op.Quant
	r := opRule{Quant: q, kind: q.Kind, bias: -1, fusesRelu: q.FusesActivation, fixed: finalizeRange(op.Range)}
	if q.Bias > 0 {
		r.bias = q.Bias
	}
	return r, true
}

func finalizeRange(r *ops.Range) *Range {
	if r == nil {
		return nil
	}
	return &Range{Min: r.Min, Max: r.Max}
}

func (r opRule) quantizesInput(i int) bool  { return r.QuantizesInput(i) }
func (r opRule) quantizesOutput(i int) bool { return r.QuantizesOutput(i) }

// isActivation reports whether n is an activation that an op with
// fusesRelu absorbs (Relu, Clip).
func isActivation(n *onnxgraph.Node) bool {
	q := ops.QuantOf(n)
	return q != nil && q.Activation
}

// OpSupport is what prepare quantizes on one ONNX op type.
type OpSupport struct {
	OpType string
	// Kind is "compute" (weight, int32 bias), "generic" (own qparams per
	// tensor) or "shared" (the output shares the input's qparams).
	Kind string
	// Inputs are the activation input positions quantized; nil means all.
	Inputs []int
	// AllOutputs is set when every output is quantized, not output 0 only.
	AllOutputs bool
	// Bias is the input position of the int32 bias, -1 for none.
	Bias int
	// FixedRange is the known output range, "" when calibrated.
	FixedRange string
}

// SupportedOps lists the op types prepare quantizes, sorted.
func SupportedOps() []OpSupport {
	var out []OpSupport
	for _, op := range ops.All() {
		if op.Quant == nil {
			continue
		}
		q := op.Quant
		s := OpSupport{OpType: op.Type, Kind: q.Kind.String(), Inputs: q.Inputs, AllOutputs: q.AllOutputs, Bias: -1}
		if q.Bias > 0 {
			s.Bias = q.Bias
		}
		if op.Range != nil {
			s.FixedRange = fmt.Sprintf("[%g, %g]", op.Range.Min, op.Range.Max)
		}
		out = append(out, s)
	}
	return out
}

// Resolve applies cfg to g knowing the op rules: op-level specs on slots
// prepare does not quantize are listed as not quantized, with the reason,
// so that inspect and prepare agree.
func Resolve(cfg *config.QuantizerConfig, g *onnxgraph.Graph) (*config.Resolution, error) {
	return resolveFor(cfg, g, PrepareOptions{})
}

// resolveFor is Resolve for prepare with opts: with patterns turned off,
// the tensors inside a decomposed op are resolved like any other.
func resolveFor(cfg *config.QuantizerConfig, g *onnxgraph.Graph, opts PrepareOptions) (*config.Resolution, error) {
	return config.ResolveWith(cfg, g, config.ResolveOptions{Quantizable: quantizable, QuantizeInside: opts.Patterns == PatternsNone})
}

// quantizable reports whether prepare quantizes slot (role, index) of n
// for an op-level spec.
func quantizable(n *onnxgraph.Node, role config.Role, index int) bool {
	r, ok := ruleOf(n)
	if !ok {
		return false
	}
	switch role {
	case config.RoleInput:
		return r.quantizesInput(index)
	case config.RoleOutput:
		return r.quantizesOutput(index)
	}
	return true
}

// channelAxis is the output-channel axis of a compute op's weight of rank
// rank, the axis a bias's scales follow: the table's per-channel axis.
func channelAxis(n *onnxgraph.Node, rank int) int {
	if op, ok := ops.Of(n); ok && op.Weight != nil {
		channel, _ := op.Weight.Of(n, rank)
		return channel
	}
	return 0
}

// opIntrinsic is the op-intrinsic rule of a node's output (ops.Intrinsic)
// with its range resolved.
type opIntrinsic struct {
	// scheme is the qscheme the op's output takes (QSchemeAuto: the spec's).
	scheme spec.QScheme
	// fixed is the known output range; nil leaves it to calibration.
	fixed *Range
	// what states the op's output range, for the plan and the per-layer
	// report ("Relu output is non-negative").
	what string
}

// intrinsicOf returns the op-intrinsic rule of n's output 0: the table's
// Intrinsic (Relu, Sigmoid, Tanh, Softmax; Concat and the average pools
// when their data inputs are all non-negative), or for a clamping op
// (Clip) one from its constant bounds: asymmetric on [min, max],
// symmetric when min = −max, and a lower bound of 0 alone is a Relu.
func intrinsicOf(m *onnxgraph.Model, n *onnxgraph.Node, nonNeg func(*onnxgraph.Value) bool) (opIntrinsic, bool) {
	op, ok := ops.Of(n)
	if !ok {
		return opIntrinsic{}, false
	}
	if in := op.Intrinsic; in != nil {
		if in.IfInputsNonNegative && !allNonNeg(n, nonNeg) {
			return opIntrinsic{}, false
		}
		return opIntrinsic{scheme: in.Scheme, fixed: finalizeRange(in.Range), what: in.What}, true
	}
	if op.Bounds == nil {
		return opIntrinsic{}, false
	}
	lo, hi := op.Bounds(m, n)
	switch {
	case lo != nil && hi != nil && *lo <= *hi:
		sch := spec.Asymmetric
		if *lo == -*hi {
			sch = spec.Symmetric
		}
		return opIntrinsic{scheme: sch, fixed: &Range{Min: *lo, Max: *hi},
			what: fmt.Sprintf("%s output is in [%g, %g]", n.OpType, *lo, *hi)}, true
	case lo != nil && hi == nil && *lo == 0:
		return opIntrinsic{scheme: spec.Asymmetric, what: n.OpType + " output is non-negative"}, true
	}
	return opIntrinsic{}, false
}

// allNonNeg reports whether every non-constant input of n is non-negative
// (constant inputs of these ops are shapes and attributes, not data).
func allNonNeg(n *onnxgraph.Node, nonNeg func(*onnxgraph.Value) bool) bool {
	seen := false
	for _, v := range n.Inputs {
		if v == nil || v.IsConst() {
			continue
		}
		if !nonNeg(v) {
			return false
		}
		seen = true
	}
	return seen
}

// nonNegative marks the values of g known to be ≥ 0 from the ops that make
// them, by the table's facts: outputs of NonNegative ops (Relu, Sigmoid),
// of a clamping op with a lower bound ≥ 0, of KeepsNonNegative ops
// (Concat, the pools) whose data inputs are all non-negative, and of ops
// sharing input 0's qparams when input 0 is.
func nonNegative(m *onnxgraph.Model) map[string]bool {
	out := map[string]bool{}
	is := func(v *onnxgraph.Value) bool { return v != nil && out[v.Name] }
	for _, n := range m.Graph.Nodes {
		op, ok := ops.Of(n)
		if !ok || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			continue
		}
		yes := false
		switch {
		case op.NonNegative:
			yes = true
		case op.Bounds != nil:
			lo, _ := op.Bounds(m, n)
			yes = lo != nil && *lo >= 0
		case op.KeepsNonNegative:
			yes = allNonNeg(n, is)
		case op.Quant != nil && op.Quant.Kind == ops.Shared && len(n.Inputs) > 0:
			yes = is(n.Inputs[0])
		}
		if yes {
			out[n.Outputs[0].Name] = true
		}
	}
	return out
}

// clipBounds reads the constant bounds of a clamping op (the table's
// Bounds); nil, nil for other ops.
func clipBounds(m *onnxgraph.Model, n *onnxgraph.Node) (lo, hi *float32) {
	if op, ok := ops.Of(n); ok && op.Bounds != nil {
		return op.Bounds(m, n)
	}
	return nil, nil
}

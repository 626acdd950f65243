package passes

import (
	"fmt"
	"math"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// opKind is how an op's tensors are quantized.
type opKind uint8

const (
	// opCompute ops (Conv, Gemm, MatMul) have a weight, an optional int32
	// bias and quantized activations in and out.
	opCompute opKind = iota
	// opGeneric ops quantize each float input and output with its own
	// qparams.
	opGeneric
	// opShared ops move data without changing values: the output reuses
	// the qparams of input 0, so ONNX Runtime can drop the Q/DQ around them.
	opShared
)

// opRule is the quantization rule of one ONNX op type.
type opRule struct {
	kind opKind
	// inputs are the activation inputs that may be quantized; nil means all.
	inputs []int
	// allOutputs quantizes every output (Split); otherwise output 0 only.
	allOutputs bool
	// fixed is the known output range (Softmax, Sigmoid, Tanh).
	fixed *finalize.Range
	// bias is the input index of an int32 bias, -1 for none.
	bias int
	// fusesRelu: a Relu or Clip that alone consumes the output is fused
	// into the op (torch and ONNX Runtime), so no Q/DQ goes between them.
	fusesRelu bool
}

var (
	unitRange   = &finalize.Range{Min: 0, Max: 1}
	signedRange = &finalize.Range{Min: -1, Max: 1}
)

// opRules is the registry: one line per supported op type. Ops not listed
// run in float and are reported as skipped.
var opRules = map[string]opRule{
	"Conv":          {kind: opCompute, inputs: []int{0}, bias: 2, fusesRelu: true},
	"ConvTranspose": {kind: opCompute, inputs: []int{0}, bias: 2, fusesRelu: true},
	"Gemm":          {kind: opCompute, inputs: []int{0, 1}, bias: 2, fusesRelu: true},
	"MatMul":        {kind: opCompute, inputs: []int{0, 1}, bias: -1, fusesRelu: true},

	"Add":                   {kind: opGeneric, bias: -1, fusesRelu: true},
	"Sub":                   {kind: opGeneric, bias: -1},
	"Mul":                   {kind: opGeneric, bias: -1},
	"Div":                   {kind: opGeneric, bias: -1},
	"Concat":                {kind: opGeneric, bias: -1},
	"AveragePool":           {kind: opGeneric, inputs: []int{0}, bias: -1},
	"GlobalAveragePool":     {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Relu":                  {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Clip":                  {kind: opGeneric, inputs: []int{0}, bias: -1},
	"LeakyRelu":             {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Gelu":                  {kind: opGeneric, inputs: []int{0}, bias: -1},
	"HardSigmoid":           {kind: opGeneric, inputs: []int{0}, bias: -1},
	"HardSwish":             {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Pad":                   {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Where":                 {kind: opGeneric, inputs: []int{1, 2}, bias: -1},
	"ReduceMean":            {kind: opGeneric, inputs: []int{0}, bias: -1},
	"LayerNormalization":    {kind: opGeneric, inputs: []int{0}, bias: -1},
	"BatchNormalization":    {kind: opGeneric, inputs: []int{0}, bias: -1, fusesRelu: true},
	"InstanceNormalization": {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Softmax":               {kind: opGeneric, inputs: []int{0}, bias: -1, fixed: unitRange},
	"Sigmoid":               {kind: opGeneric, inputs: []int{0}, bias: -1, fixed: unitRange},
	"Tanh":                  {kind: opGeneric, inputs: []int{0}, bias: -1, fixed: signedRange},

	"Reshape":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Transpose":    {kind: opShared, inputs: []int{0}, bias: -1},
	"Squeeze":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Unsqueeze":    {kind: opShared, inputs: []int{0}, bias: -1},
	"Flatten":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Slice":        {kind: opShared, inputs: []int{0}, bias: -1},
	"MaxPool":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Resize":       {kind: opShared, inputs: []int{0}, bias: -1},
	"Split":        {kind: opShared, inputs: []int{0}, bias: -1, allOutputs: true},
	"Gather":       {kind: opShared, inputs: []int{0}, bias: -1},
	"Expand":       {kind: opShared, inputs: []int{0}, bias: -1},
	"Tile":         {kind: opShared, inputs: []int{0}, bias: -1},
	"DepthToSpace": {kind: opShared, inputs: []int{0}, bias: -1},
	"Identity":     {kind: opShared, inputs: []int{0}, bias: -1},
	"Dropout":      {kind: opShared, inputs: []int{0}, bias: -1},
	"SpaceToDepth": {kind: opShared, inputs: []int{0}, bias: -1},
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
	for op, r := range opRules {
		s := OpSupport{OpType: op, Kind: [...]string{"compute", "generic", "shared"}[r.kind], Inputs: r.inputs, AllOutputs: r.allOutputs, Bias: r.bias}
		if r.fixed != nil {
			s.FixedRange = fmt.Sprintf("[%g, %g]", r.fixed.Min, r.fixed.Max)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].OpType < out[j].OpType })
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

func (r opRule) quantizesInput(i int) bool {
	if r.inputs == nil {
		return true
	}
	for _, j := range r.inputs {
		if j == i {
			return true
		}
	}
	return false
}

func (r opRule) quantizesOutput(i int) bool { return i == 0 || r.allOutputs }

// channelAxis is the output-channel axis of a compute op's weight, the
// axis a bias's scales follow: Conv 0, ConvTranspose 1, Gemm 0 with
// transB else 1.
func channelAxis(op string, transB bool) int {
	switch op {
	case "ConvTranspose":
		return 1
	case "Gemm":
		if transB {
			return 0
		}
		return 1
	}
	return 0
}

// opIntrinsic is what an op's output range says about its quantization,
// whatever the config asks for: coreai-opt's graph-mode "op-intrinsic
// override" (its _fixed_q_params_ops table), which proposes a qscheme and
// a float range at a priority above the user's config. The qscheme applies
// to integer specs only (float8/float4 grids are symmetric by definition);
// the range applies to every spec.
type opIntrinsic struct {
	// scheme is the qscheme the op's output takes (QSchemeAuto: the spec's).
	scheme spec.QScheme
	// fixed is the known output range; nil leaves it to calibration.
	fixed *finalize.Range
	// what states the op's output range, for the plan and the per-layer
	// report ("Relu output is non-negative").
	what string
}

// intrinsicOf returns the op-intrinsic rule of n's output 0: Relu
// (asymmetric, observed range), Clip (asymmetric on [min, max], symmetric
// when min = −max; a Clip with only a lower bound of 0 is a Relu), Sigmoid
// and HardSigmoid (asymmetric on [0, 1]), Tanh (symmetric on [−1, 1]) and
// Softmax (asymmetric on [0, 1]; coreai-opt's table has no softmax and
// observes it, torch.ao gives it the fixed [0, 1] qparams of sigmoid).
//
// Concat, AveragePool and GlobalAveragePool whose data inputs are all
// non-negative (nonNeg) are asymmetric too: coreai-opt ties their observer
// to their inputs', so the inputs' asymmetric qscheme reaches them; their
// range stays their own. (MaxPool and the other opShared ops share their
// input's qparams, spec included.)
func intrinsicOf(m *onnxgraph.Model, n *onnxgraph.Node, nonNeg func(*onnxgraph.Value) bool) (opIntrinsic, bool) {
	if n.Domain != "" {
		return opIntrinsic{}, false
	}
	switch n.OpType {
	case "Concat", "AveragePool", "GlobalAveragePool":
		if allNonNeg(n, nonNeg) {
			return opIntrinsic{scheme: spec.Asymmetric, what: n.OpType + " of non-negative inputs"}, true
		}
	case "Relu":
		return opIntrinsic{scheme: spec.Asymmetric, what: "Relu output is non-negative"}, true
	case "Sigmoid", "HardSigmoid", "Softmax":
		return opIntrinsic{scheme: spec.Asymmetric, fixed: unitRange,
			what: n.OpType + " output is in [0, 1]"}, true
	case "Tanh":
		return opIntrinsic{scheme: spec.Symmetric, fixed: signedRange,
			what: "Tanh output is in [-1, 1]"}, true
	case "Clip":
		lo, hi := clipBounds(m, n)
		switch {
		case lo != nil && hi != nil && *lo <= *hi:
			sch := spec.Asymmetric
			if *lo == -*hi {
				sch = spec.Symmetric
			}
			return opIntrinsic{scheme: sch, fixed: &finalize.Range{Min: *lo, Max: *hi},
				what: fmt.Sprintf("Clip output is in [%g, %g]", *lo, *hi)}, true
		case lo != nil && hi == nil && *lo == 0:
			return opIntrinsic{scheme: spec.Asymmetric, what: "Clip output is non-negative"}, true
		}
	}
	return opIntrinsic{}, false
}

// clipLimit is the magnitude from which a Clip bound is read as "no
// bound" (exporters write ±FLT_MAX for a missing side).
const clipLimit = 1e30

// clipBounds reads a Clip's constant bounds: attributes before opset 11,
// inputs 1 and 2 from then on. A missing, non-constant or unbounded side is
// nil.
func clipBounds(m *onnxgraph.Model, n *onnxgraph.Node) (lo, hi *float32) {
	bound := func(attr string, input int) *float32 {
		var v float32
		if m.Opset("") < 11 {
			a := n.Attr(attr)
			if a == nil {
				return nil
			}
			v = a.GetF()
		} else {
			if input >= len(n.Inputs) || n.Inputs[input] == nil || !n.Inputs[input].IsConst() {
				return nil
			}
			t, err := tensor.FromProto(n.Inputs[input].Const, m)
			if err != nil {
				return nil
			}
			f, err := t.AsFloat32()
			if err != nil || len(f) != 1 {
				return nil
			}
			v = f[0]
		}
		if math.IsNaN(float64(v)) || math.Abs(float64(v)) >= clipLimit {
			return nil
		}
		return &v
	}
	return bound("min", 1), bound("max", 2)
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
// them: outputs of Relu, of a Clip with a lower bound ≥ 0, of Sigmoid,
// HardSigmoid and Softmax, and of value-preserving or averaging ops
// (the opShared ops, Concat, the pools) whose data inputs are all
// non-negative.
func nonNegative(m *onnxgraph.Model) map[string]bool {
	out := map[string]bool{}
	is := func(v *onnxgraph.Value) bool { return v != nil && out[v.Name] }
	for _, n := range m.Graph.Nodes {
		if n.Domain != "" || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			continue
		}
		yes := false
		switch n.OpType {
		case "Relu", "Sigmoid", "HardSigmoid", "Softmax":
			yes = true
		case "Clip":
			lo, _ := clipBounds(m, n)
			yes = lo != nil && *lo >= 0
		case "Concat", "MaxPool", "AveragePool", "GlobalAveragePool":
			yes = allNonNeg(n, is)
		default:
			if r, ok := opRules[n.OpType]; ok && r.kind == opShared && len(n.Inputs) > 0 {
				yes = is(n.Inputs[0])
			}
		}
		if yes {
			out[n.Outputs[0].Name] = true
		}
	}
	return out
}

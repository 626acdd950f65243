// Package ops is the op table: everything coreaiq knows about each ONNX op
// type of the default domain, in one entry per type (table.go). The config
// language reads its names, aliases and default axes; prepare its
// quantization rule and value-range facts; the built-in engine its fusion
// roles; the writer the opsets where its meaning changed. Multi-node
// patterns are data here too (patterns.go).
//
// A new op's quantization rule is one entry in table.go.
package ops

import (
	"slices"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Op is what coreaiq knows about one op type.
type Op struct {
	// Type is the ONNX op type.
	Type string
	// Inputs and Outputs are the ONNX schema's names by position, so that
	// op_input_spec keys such as "X" work; a variadic last name covers the
	// positions past it. Empty when the config language does not name them.
	Inputs, Outputs []string
	// Args are the torch argument names of each input position of a node
	// that is a whole torch op (a position may have synonyms: aten's self);
	// the last covers the positions past it. Nil: input 0 is "input" or
	// "self" and the others have no name.
	Args [][]string
	// States name constant inputs by position for op_state_spec
	// ("weight", "bias", "running_mean"); other constants have no name.
	States map[int]string
	// Torch are the torch ops exporters write as this op (the guide's op
	// type keys).
	Torch []Torch

	// Quant is how prepare quantizes the op; nil runs it in float (and
	// reports it as skipped).
	Quant *Quant
	// Weight gives the default per-channel and per-block axes of the
	// "weight" state; nil when the op has none.
	Weight *WeightAxes

	// Range is the output's known range (Softmax: [0, 1]) whatever the
	// config asks for; nil leaves it to calibration.
	Range *Range
	// NonNegative: output 0 is ≥ 0 whatever the inputs (Relu, Sigmoid).
	NonNegative bool
	// KeepsNonNegative: output 0 is ≥ 0 when every data input is (Concat,
	// the pools). Ops that share qparams with input 0 follow input 0.
	KeepsNonNegative bool
	// Bounds reads a clamping op's constant bounds from the node (Clip):
	// a missing, non-constant or unbounded side is nil.
	Bounds func(m *onnxgraph.Model, n *onnxgraph.Node) (lo, hi *float32)
	// DecidedByMax: input 0's largest values decide the output (Softmax,
	// ArgMax: the top classes). A value above the calibrated maximum there is
	// clipped to it and ties with the other clipped ones, so prepare gives
	// such an input headroom above its range (plan.TensorPlan.Headroom).
	DecidedByMax bool
	// MaxFromInput: output 0's largest values are input 0's, averaged
	// or taken whole (the pools), so a value whose maximum decides a
	// DecidedByMax op passes that on to input 0. Ops of kind Shared do so
	// too (their output values are input values).
	MaxFromInput bool
	// Intrinsic is the op-intrinsic rule of output 0 (coreai-opt's
	// graph-mode override of the config's qscheme and range); nil for none.
	Intrinsic *Intrinsic

	// Out says how the outputs' element types follow from the node.
	Out OutType
	// Changes are the opsets where the op's meaning changed.
	Changes Changes
	// Fusion is the op's part in the built-in engine's fused steps.
	Fusion Fusion
}

// Torch is one torch op that exports as the op.
type Torch struct {
	Name string
	// If narrows the nodes the name stands for (conv2d: a rank-4 weight);
	// nil when it stands for every node of the type. A name with a
	// condition that holds is preferred over the plain ones.
	If func(n *onnxgraph.Node) bool
	// Preferred marks the plain name shown for a node when several torch
	// ops export to the type.
	Preferred bool
	// Args name the op's activation arguments in order and States its
	// constant ones, for a call the exporter wrote as several ONNX nodes
	// (a Linear on a 3-D input is MatMul + Add). Unset: "input", "other"
	// and no state names.
	Args, States []string
	// NodeArgs name the inputs of a node that is a whole call of this torch
	// op by ONNX position, where they differ from the op's Args (an
	// embedding is a Gather reading (weight, input)).
	NodeArgs [][]string
	// Targets are other torch names a traced call may carry for the same
	// op: the name also selects their calls (concat selects a call of
	// aten.cat, split one of aten.split_with_sizes).
	Targets []string
}

// Kind is how an op's tensors are quantized.
type Kind uint8

const (
	// Compute ops (Conv, Gemm, MatMul) have a weight, an optional int32
	// bias and quantized activations in and out.
	Compute Kind = iota
	// Generic ops quantize each float input and output with their own
	// qparams.
	Generic
	// Shared ops move data without changing values: the output reuses the
	// qparams of input 0, so ONNX Runtime can drop the Q/DQ around them.
	Shared
)

// String is the kind's name in `coreaiq ops`.
func (k Kind) String() string { return [...]string{"compute", "generic", "shared"}[k] }

// Quant is an op's quantization rule.
type Quant struct {
	Kind Kind
	// Inputs are the activation inputs that may be quantized; nil means
	// all.
	Inputs []int
	// AllOutputs quantizes every output (Split); otherwise output 0 only.
	AllOutputs bool
	// Bias is the input position of a Compute op's int32 bias; 0 for none.
	Bias int
	// FusesActivation: an Activation op that alone consumes the output is
	// fused into this op (torch and ONNX Runtime), so no Q/DQ goes between
	// them.
	FusesActivation bool
	// Activation marks the ops that FusesActivation ops absorb (Relu,
	// Clip).
	Activation bool
}

// QuantizesInput reports whether activation input i may be quantized.
func (q *Quant) QuantizesInput(i int) bool {
	if q == nil || q.Inputs == nil {
		return true
	}
	for _, j := range q.Inputs {
		if j == i {
			return true
		}
	}
	return false
}

// QuantizesOutput reports whether output i is quantized.
func (q *Quant) QuantizesOutput(i int) bool { return i == 0 || q != nil && q.AllOutputs }

// WeightAxes are the guide's default axes of a weight, translated to the
// ONNX layout of the op.
type WeightAxes struct {
	// Of returns the per-channel axis (the output channels, which a bias's
	// scales follow) and the per-block axis (the reduction axis) of a
	// weight of rank rank read by n.
	Of func(n *onnxgraph.Node, rank int) (channel, block int)
	// Doc states the axes for `coreaiq ops`.
	Doc string
}

// fixedAxes is a WeightAxes whose axes do not depend on the node.
func fixedAxes(channel, block int, doc string) *WeightAxes {
	return &WeightAxes{Of: func(*onnxgraph.Node, int) (int, int) { return channel, block }, Doc: doc}
}

// Range is a closed float range.
type Range struct{ Min, Max float32 }

// Intrinsic is what an op's output range says about its quantization,
// whatever the config asks for: coreai-opt's graph-mode "op-intrinsic
// override" (its _fixed_q_params_ops table), which proposes a qscheme and a
// float range at a priority above the user's config. The qscheme applies
// to integer specs only (float8/float4 grids are symmetric by
// definition); the range applies to every spec.
type Intrinsic struct {
	// Scheme is the qscheme the output takes.
	Scheme spec.QScheme
	// Range is the output's range; nil leaves it to calibration.
	Range *Range
	// What states the output range for the plan and the per-layer report
	// ("Relu output is non-negative").
	What string
	// IfInputsNonNegative applies the rule only when every data input is
	// non-negative (coreai-opt ties Concat's and the average pools'
	// observers to their inputs', so the inputs' qscheme reaches them;
	// their range stays their own).
	IfInputsNonNegative bool
}

// OutType says how a node's output element types follow from the node;
// the zero value is "the type of input 0", which most ops keep.
type OutType struct {
	// Fixed is the type of every output when it does not depend on the
	// node (Shape: int64).
	Fixed tensor.DType
	// Input is the input whose type the outputs take when Fixed is unset.
	Input int
	// Attr reads the type from the node's attributes (Cast's `to`).
	Attr func(n *onnxgraph.Node) tensor.DType
	// Unknown: the type cannot be told from the node (QuantizeLinear's
	// output type comes from its zero point).
	Unknown bool
	// Extra fixes the type of outputs past 0 (TopK's indices: int64).
	Extra map[int]tensor.DType
}

// Changes are the opset versions at which an op changed in a way that
// alters the meaning of an existing node (an attribute turned into an
// input, a changed default or semantics). Versions that only added element
// types, or added attributes and inputs whose defaults keep the old
// behaviour, are not listed. The zero value is "unknown": raising the
// opset of a model that uses the op is refused, since nothing says it is
// safe.
type Changes struct {
	Known bool
	At    []int64
}

// unchanged is an op whose meaning never changed.
var unchanged = Changes{Known: true}

// changedAt is an op whose meaning changed at the given opsets.
func changedAt(v ...int64) Changes { return Changes{Known: true, At: v} }

// Fusion is an op's part in the built-in engine's fused steps.
type Fusion uint8

const (
	// FuseNone: the op runs as its own step.
	FuseNone Fusion = iota
	// FuseConv heads a chain computed in its GEMM epilogue (Conv).
	FuseConv
	// FuseConvNorm is an inference normalization folded into the epilogue
	// of the FuseConv op it follows (BatchNormalization).
	FuseConvNorm
	// FuseConvResidual adds another tensor of the output's shape in the
	// epilogue (Add).
	FuseConvResidual
	// FuseConvRelu is max(0, x) in the epilogue (Relu).
	FuseConvRelu
	// FuseSigmoidMul heads x·σ(x): a sigmoid whose output multiplies its
	// input in one pass (Sigmoid).
	FuseSigmoidMul
	// FuseSigmoidMulTail is that multiplication (Mul).
	FuseSigmoidMulTail
	// FuseRoundTrip heads a QuantizeLinear whose only reader is a
	// DequantizeLinear with the same qparams: one pass computes what the
	// second gives back, without the codes (QuantizeLinear).
	FuseRoundTrip
	// FuseRoundTripTail is that DequantizeLinear.
	FuseRoundTripTail
)

// table indexes the entries by type.
var table = func() map[string]*Op {
	m := make(map[string]*Op, len(entries))
	for i := range entries {
		op := &entries[i]
		if _, dup := m[op.Type]; dup {
			panic("ops: " + op.Type + " listed twice")
		}
		m[op.Type] = op
	}
	return m
}()

// Lookup returns the entry of a default-domain op type.
func Lookup(opType string) (*Op, bool) {
	op, ok := table[opType]
	return op, ok
}

// Of returns n's entry; ok is false for an op of another domain or one the
// table does not list.
func Of(n *onnxgraph.Node) (*Op, bool) {
	if n == nil || n.Domain != "" {
		return nil, false
	}
	return Lookup(n.OpType)
}

// QuantOf returns n's quantization rule, nil when prepare leaves it in
// float.
func QuantOf(n *onnxgraph.Node) *Quant {
	if op, ok := Of(n); ok {
		return op.Quant
	}
	return nil
}

// FusionOf returns n's part in the engine's fused steps.
func FusionOf(n *onnxgraph.Node) Fusion {
	if op, ok := Of(n); ok {
		return op.Fusion
	}
	return FuseNone
}

// All lists the entries sorted by type.
func All() []*Op {
	out := make([]*Op, 0, len(table))
	for _, op := range table {
		out = append(out, op)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// Register adds op to the table, or replaces the entry of its type, and
// returns the function that restores the table as it was. It is for ops a
// program defines beside the standard ones, and for tests; it is not safe
// to call while the table is read concurrently.
func Register(op Op) (restore func()) {
	prev, had := table[op.Type]
	table[op.Type] = &op
	return func() {
		if had {
			table[op.Type] = prev
		} else {
			delete(table, op.Type)
		}
	}
}

// StateName names constant input i of n for op_state_spec; "" when it has
// no name.
func StateName(n *onnxgraph.Node, i int) string {
	if op, ok := Of(n); ok {
		return op.States[i]
	}
	return ""
}

// DefaultAxis is the guide's default axis of input i of n, of rank rank,
// for per-channel (block false) or per-block granularity: the op's
// WeightAxes for its "weight" state of rank ≥ 2, 0 for any rank-1 tensor
// (normalization scales, biases). ok is false for anything else: an axis
// must be given.
func DefaultAxis(n *onnxgraph.Node, i, rank int, block bool) (axis int, ok bool) {
	if op, found := Of(n); found && op.Weight != nil && op.States[i] == "weight" && rank >= 2 {
		channel, blk := op.Weight.Of(n, rank)
		if block {
			return blk, true
		}
		return channel, true
	}
	if rank == 1 {
		return 0, true
	}
	return 0, false
}

// ElemType returns the element type of n's output o given its inputs'
// types (input(i) is Undefined when unknown); Undefined when it cannot be
// told.
func ElemType(n *onnxgraph.Node, o int, input func(i int) tensor.DType) tensor.DType {
	if n.Domain != "" {
		return tensor.Undefined
	}
	op, ok := Lookup(n.OpType)
	if !ok {
		return input(0)
	}
	t := op.Out
	if dt, ok := t.Extra[o]; ok {
		return dt
	}
	switch {
	case t.Unknown:
		return tensor.Undefined
	case t.Attr != nil:
		return t.Attr(n)
	case t.Fixed != tensor.Undefined:
		return t.Fixed
	}
	return input(t.Input)
}

// TorchOp returns the op types a torch op name exports as, sorted, and its
// listing in the first of them (linear: Gemm's and MatMul's, which agree on
// its Args, States and Targets, as TestTableConsistent checks).
func TorchOp(name string) (t Torch, types []string, ok bool) {
	first := ""
	for _, op := range table {
		for _, x := range op.Torch {
			if x.Name == name {
				if !ok || op.Type < first {
					t, ok, first = x, true, op.Type
				}
				types = append(types, op.Type)
			}
		}
	}
	sort.Strings(types)
	return t, types, ok
}

// TorchNames lists every torch op name of the table, sorted, once each.
func TorchNames() []string {
	set := map[string]bool{}
	for _, op := range table {
		for _, t := range op.Torch {
			set[t.Name] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Synonyms are the torch names whose Targets list name: the other keys
// that select a traced call of name (concat for a call of aten.cat),
// sorted.
func Synonyms(name string) []string {
	var out []string
	for _, op := range table {
		for _, t := range op.Torch {
			for _, x := range t.Targets {
				if x == name && !slices.Contains(out, t.Name) {
					out = append(out, t.Name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// TargetNames lists every name some torch name's Targets list (the keys
// Synonyms answers), sorted, once each.
func TargetNames() []string {
	set := map[string]bool{}
	for _, op := range table {
		for _, t := range op.Torch {
			for _, x := range t.Targets {
				set[x] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

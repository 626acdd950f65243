package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// The names the config language gives ops and their tensors (ONNX schema
// names, torch aliases and argument names, state names) and the default
// weight axes are the op table's (pkg/ops); this file reads them.

func constInput(i int) func(n *onnxgraph.Node) bool {
	return func(n *onnxgraph.Node) bool {
		return i < len(n.Inputs) && n.Inputs[i] != nil && n.Inputs[i].IsConst()
	}
}

// opTypeKeys lists every valid op_type_config key, for hints.
func opTypeKeys() []string {
	keys := append(ops.ONNXTypes(), ops.TorchNames()...)
	sort.Strings(keys)
	return keys
}

// opTypeOfKey is the op type an op_type_config key stands for: the torch
// op type of a torch/aten name, else the key itself.
func opTypeOfKey(key string) string {
	if t, ok := torchOpType(key); ok {
		return t
	}
	return key
}

// validOpTypeKey reports whether key names ONNX nodes: an ONNX op type, a
// torch alias, or "domain.OpType" for a custom domain.
func validOpTypeKey(key string) bool {
	if ops.IsONNX(key) {
		return true
	}
	if _, _, ok := ops.TorchOp(key); ok {
		return true
	}
	if len(ops.Synonyms(key)) > 0 {
		return true
	}
	if _, ok := torchOpType(key); ok {
		return true
	}
	i := strings.LastIndex(key, ".")
	return i > 0 && i < len(key)-1
}

// exactOpType reports whether key is n's ONNX op type ("domain.OpType"
// outside the default domain).
func exactOpType(key string, n *onnxgraph.Node) bool {
	if n.Domain != "" {
		return key == n.Domain+"."+n.OpType
	}
	return key == n.OpType
}

// nodeTorchArgs returns the torch argument names of input i of a node that
// is a whole torch op by itself: the NodeArgs of a torch name whose
// condition holds (an embedding's Gather reads (weight, input)), else the
// op table's Args, else "input"/"self" for input 0.
func nodeTorchArgs(n *onnxgraph.Node, i int) []string {
	if n.Domain != "" {
		return nil
	}
	op, ok := ops.Of(n)
	if ok {
		for _, t := range op.Torch {
			if t.NodeArgs != nil && (t.If == nil || t.If(n)) {
				return t.NodeArgs[min(i, len(t.NodeArgs)-1)]
			}
		}
		if op.Args != nil {
			return op.Args[min(i, len(op.Args)-1)]
		}
	}
	if i == 0 {
		return []string{"input", "self"}
	}
	return nil
}

// outputNames are the torch names every op's output 0 answers to.
var outputNames = []string{"output", "out"}

// knownTensorNames lists every name key an op_*_spec or module_*_spec may
// use on some op, for validation and hints: ONNX schema names, torch
// argument names, state names.
func knownTensorNames() []string {
	set := map[string]bool{}
	for _, op := range ops.All() {
		for _, n := range append(append([]string(nil), op.Inputs...), op.Outputs...) {
			set[n] = true
		}
		for _, names := range op.Args {
			for _, n := range names {
				set[n] = true
			}
		}
		for _, t := range op.Torch {
			for _, n := range append(append([]string(nil), t.Args...), t.States...) {
				set[n] = true
			}
		}
	}
	for _, n := range append([]string{"input", "other", "self"}, outputNames...) {
		set[n] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// validTensorName reports whether key may name a tensor slot: a known name
// or input_<i>/output_<i>.
func validTensorName(key string) bool {
	for _, p := range []string{"input_", "output_"} {
		if rest, ok := strings.CutPrefix(key, p); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return true
		}
	}
	for _, n := range knownTensorNames() {
		if n == key {
			return true
		}
	}
	return false
}

// torchOpType is the op type a torch op name stands for, by the guide's
// rule (the part after the last period) extended to aten targets, whose
// last part is the overload: "torch.add" and "torch.nn.functional.add" are
// add, "aten.linear.default" and "torch.ops.aten.linear.default" are
// linear. A leading underscore of an aten op is dropped (aten._softmax is
// softmax). ok is false for a key that is not a torch name.
func torchOpType(key string) (string, bool) {
	k := strings.TrimPrefix(key, "torch.ops.")
	if rest, ok := strings.CutPrefix(k, "aten."); ok {
		name, _, _ := strings.Cut(rest, ".")
		return strings.TrimLeft(name, "_"), name != ""
	}
	if strings.HasPrefix(k, "torch.") {
		name := k[strings.LastIndex(k, ".")+1:]
		return name, name != ""
	}
	return "", false
}

// tensorNames are the names an op_input_spec/op_output_spec key may use for
// tensor i of n: "input_<pos>"/"output_<pos>" for its position pos in the
// op call, and the ONNX schema name when n is the whole call.
func tensorNames(n *onnxgraph.Node, output bool, i, pos int, whole bool) []string {
	prefix := "input_"
	if output {
		prefix = "output_"
	}
	var names []string
	if pos >= 0 {
		names = append(names, fmt.Sprintf("%s%d", prefix, pos))
	}
	if op, ok := ops.Of(n); ok && whole {
		list := op.Inputs
		if output {
			list = op.Outputs
		}
		if len(list) > 0 {
			names = append(names, list[min(i, len(list)-1)])
		}
	}
	return names
}

// stateName names a constant input of n for op_state_spec (the op table's
// States); other constants have no name and only "*" selects them.
func stateName(n *onnxgraph.Node, i int) string { return ops.StateName(n, i) }

// defaultAxis is the guide's default weight axis for per-channel and
// per-block granularity, translated to ONNX layouts (ops.DefaultAxis).
func defaultAxis(n *onnxgraph.Node, input int, rank int, g spec.GranularityType) (axis int, ok bool) {
	return ops.DefaultAxis(n, input, rank, g == spec.PerBlock)
}

// OpNames describes how the config language names one ONNX op type, for
// `coreaiq ops`.
type OpNames struct {
	// TorchTypes are the op_type_config keys besides the ONNX op type.
	TorchTypes []string
	// Inputs are the key names of each input position: torch argument
	// names, then the ONNX schema name.
	Inputs [][]string
	// WeightAxes are the default per_channel and per_block axes of the
	// weight, as the guide's tables translated to ONNX layouts; "" when the
	// op has no weight.
	WeightAxes string
}

// NamesOf returns how configs name op type op and its tensors; inputs is
// the number of input positions to describe.
func NamesOf(opType string, inputs int) OpNames {
	var o OpNames
	op, ok := ops.Lookup(opType)
	if !ok {
		op = &ops.Op{}
	}
	for _, t := range op.Torch {
		o.TorchTypes = append(o.TorchTypes, t.Name)
	}
	sort.Strings(o.TorchTypes)
	for i := 0; i < inputs; i++ {
		var names []string
		if op.Args != nil {
			names = append(names, op.Args[min(i, len(op.Args)-1)]...)
		} else if i == 0 {
			names = append(names, "input")
		}
		if len(op.Inputs) > 0 {
			names = append(names, op.Inputs[min(i, len(op.Inputs)-1)])
		}
		var uniq []string
		for _, n := range names {
			if !contains(uniq, n) {
				uniq = append(uniq, n)
			}
		}
		o.Inputs = append(o.Inputs, uniq)
	}
	if op.Weight != nil {
		o.WeightAxes = op.Weight.Doc
	}
	return o
}

package passes

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// placement is where a target's integer kernels put Q/DQ pairs: which
// nodes run in integer, which run in float (no Q/DQ of their own), and
// which integer nodes keep a float output.
type placement struct {
	// floatWhy holds, for each node the target runs in float although the
	// config quantizes it, the reason.
	floatWhy map[string]string
	// floatOutput marks integer nodes whose output stays float: the kernel
	// allows it (IntegerOp.OptionalOutput) and no consumer runs in integer.
	floatOutput map[string]bool
}

// place decides, for a target with an op table, which nodes run in integer:
// anchors (Conv, MatMul, Gemm) wherever the config quantizes their inputs,
// other kernels only when every input they need quantized comes from an
// integer node, so that no QuantizeLinear is paid in front of an op that
// saves less than it costs. Nodes are in topological order, so one pass
// sees every producer first. A target without an op table (generic)
// places Q/DQ wherever the config asks.
func place(g *onnxgraph.Graph, res *config.Resolution, t *config.Target) *placement {
	pl := &placement{floatWhy: map[string]string{}, floatOutput: map[string]bool{}}
	if t == nil || t.Ops == nil {
		return pl
	}
	integer := map[string]bool{} // by node name
	intValue := func(v *onnxgraph.Value) bool {
		return v != nil && v.Producer != nil && integer[v.Producer.Name]
	}
	small := reducedValues(g)
	nodes := g.AllNodes()
	for _, n := range nodes {
		nr := res.Node(n.Name)
		if nr != nil && biasOfIntegerLinear(n, nr, integer) {
			// The bias Add of a linear call runs in the MatMul's integer
			// kernel (MatMulIntegerToFloat takes the bias).
			integer[n.Name] = true
			continue
		}
		if nr != nil && !quantizesActivations(nr) && quantizesOutput(nr) {
			// Only constants in, a quantized output: an integer kernel
			// only if the target's check lets it (a Gather of a table).
			if why := checkedBlocker(n, t); why != "" {
				pl.floatWhy[n.Name] = fmt.Sprintf("target %s: %s; runs in float without Q/DQ", t.Name, why)
			}
			continue
		}
		if nr == nil || !quantizesActivations(nr) {
			continue // weight-only or not quantized: the config decides alone
		}
		why := integerBlocker(n, nr, t, intValue, small)
		if why != "" {
			pl.floatWhy[n.Name] = fmt.Sprintf("target %s: %s; runs in float without Q/DQ", t.Name, why)
			continue
		}
		integer[n.Name] = true
	}
	// Backwards, a data-movement op or Concat that reads a graph input
	// (directly or through other such ops) and feeds only integer nodes
	// takes the QuantizeLinear its consumers need in front of it instead
	// of after it: the same values are quantized, and it then moves 8-bit
	// values (the Slices and Concat between an image and its first Conv).
	// Behind a computed value the move is not made: it quantizes the
	// producer's output, which then requantizes inside its integer kernel
	// (bert_encoder's output SQNR fell from 34.5 to 29.7 dB when the
	// Reshape and Transpose of each attention head took the
	// QuantizeLinear). Ops that compute (Softmax, Sigmoid, pools) keep
	// their float input in any case.
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		nr := res.Node(n.Name)
		if integer[n.Name] || nr == nil || !quantizesActivations(nr) || !movesInputs(n, t) || !feedsOnlyInteger(n, integer) || !fromGraphInput(n) {
			continue
		}
		if integerBlocker(n, nr, t, func(*onnxgraph.Value) bool { return true }, nil) == "" {
			integer[n.Name] = true
			delete(pl.floatWhy, n.Name)
		}
	}
	for _, n := range nodes {
		op, ok := t.Ops[n.OpType]
		if !integer[n.Name] || !ok || !op.OptionalOutput || op.NeedsOutput != nil && op.NeedsOutput(n) {
			continue
		}
		consumed := false
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			for _, c := range v.Consumers {
				consumed = consumed || integer[c.Name]
			}
		}
		if !consumed {
			pl.floatOutput[n.Name] = true
		}
	}
	return pl
}

// biasOfIntegerLinear reports whether n is the bias Add of a linear call
// (MatMul + Add) whose MatMul runs in integer.
func biasOfIntegerLinear(n *onnxgraph.Node, nr *config.NodeResolution, integer map[string]bool) bool {
	c := nr.Call
	return c != nil && c.Type == "linear" && len(c.Nodes) == 2 && c.Nodes[1] == n && integer[c.Nodes[0].Name]
}

// quantizesActivations reports whether the config gives any non-constant
// input of the node a spec.
func quantizesActivations(nr *config.NodeResolution) bool {
	for _, tr := range nr.Tensors {
		if tr.Role == config.RoleInput && tr.Spec != nil {
			return true
		}
	}
	return false
}

// quantizesOutput reports whether the config gives an output of the node
// a spec.
func quantizesOutput(nr *config.NodeResolution) bool {
	for _, tr := range nr.Tensors {
		if tr.Role == config.RoleOutput && tr.Spec != nil {
			return true
		}
	}
	return false
}

// checkedBlocker is what the target's check of n's kernel says against
// it, "" when the op has no check or passes it.
func checkedBlocker(n *onnxgraph.Node, t *config.Target) string {
	if op, ok := t.Ops[n.OpType]; ok && n.Domain == "" && op.Check != nil {
		return op.Check(n)
	}
	return ""
}

// integerBlocker says why target t cannot run n as an integer kernel, ""
// when it can. intValue reports values made by integer nodes; a follower
// with one input from an integer node also takes float inputs that small
// marks (one value per channel: a QuantizeLinear on them costs nothing).
func integerBlocker(n *onnxgraph.Node, nr *config.NodeResolution, t *config.Target, intValue func(*onnxgraph.Value) bool, small map[string]bool) string {
	op, ok := t.Ops[n.OpType]
	if n.Domain != "" || !ok {
		return fmt.Sprintf("%s has no integer kernel in %s", n.OpType, t.Runtime)
	}
	if why := checkedBlocker(n, t); why != "" {
		return why
	}
	fromInteger := false
	for i, v := range n.Inputs {
		fromInteger = fromInteger || v != nil && op.NeedsInput(i) && intValue(v)
	}
	specOf := map[int]bool{}
	for _, tr := range nr.Tensors {
		if tr.Role != config.RoleOutput && tr.Spec != nil {
			specOf[tr.Index] = true
		}
	}
	for i, v := range n.Inputs {
		if v == nil || !op.NeedsInput(i) {
			continue
		}
		switch {
		case v.IsConst() && !specOf[i]:
			return fmt.Sprintf("%s needs input %d quantized, and the constant %q has no op_state_spec", op.Kernel, i, v.Name)
		case !specOf[i]:
			return fmt.Sprintf("%s needs input %d %q quantized and the config leaves it in float", op.Kernel, i, v.Name)
		case !v.IsConst() && !op.Anchor && !intValue(v) && !(fromInteger && small[v.Name]):
			from := "a graph input"
			if v.Producer != nil {
				from = "float " + v.Producer.String()
			}
			return fmt.Sprintf("%s runs on integers only after integer ops, and input %d %q comes from %s", op.Kernel, i, v.Name, from)
		}
	}
	return ""
}

// movesInputs reports an integer kernel that only moves values: data
// movement with one scale in and out, or Concat.
func movesInputs(n *onnxgraph.Node, t *config.Target) bool {
	op, ok := t.Ops[n.OpType]
	return ok && n.Domain == "" && (op.SameParams || n.OpType == "Concat")
}

// feedsOnlyInteger reports whether n's outputs are read, and only by
// integer nodes.
func feedsOnlyInteger(n *onnxgraph.Node, integer map[string]bool) bool {
	read := false
	for _, v := range n.Outputs {
		if v == nil {
			continue
		}
		if v.IsGraphOutput {
			return false
		}
		for _, c := range v.Consumers {
			if !integer[c.Name] {
				return false
			}
			read = true
		}
	}
	return read
}

// spreads are the ops whose output can be larger than their inputs.
var spreads = map[string]bool{"Resize": true, "Upsample": true, "Expand": true, "Tile": true, "ConvTranspose": true,
	"ConstantOfShape": true, "Pad": true, "MatMul": true, "Gemm": true, "Einsum": true}

// reducedValues marks the values that hold one value per channel: outputs
// of global pools, and of nodes whose data inputs are all such values and
// that cannot spread them (the layers of a squeeze-and-excitation branch).
func reducedValues(g *onnxgraph.Graph) map[string]bool {
	out := map[string]bool{}
	for _, n := range g.AllNodes() {
		yes := false
		switch {
		case n.Domain != "":
		case n.OpType == "GlobalAveragePool" || n.OpType == "GlobalMaxPool":
			yes = true
		case !spreads[n.OpType]:
			for _, v := range n.Inputs {
				if v == nil || v.IsConst() {
					continue
				}
				if !out[v.Name] {
					yes = false
					break
				}
				yes = true
			}
		}
		if yes {
			for _, v := range n.Outputs {
				if v != nil {
					out[v.Name] = true
				}
			}
		}
	}
	return out
}

// fromGraphInput reports whether every non-constant input of n is a graph
// input or the output of a data-movement op that reads one.
func fromGraphInput(n *onnxgraph.Node) bool {
	seen := false
	for _, v := range n.Inputs {
		if v == nil || v.IsConst() {
			continue
		}
		seen = true
		if v.Producer != nil && !movesGraphInput(v.Producer, 0) {
			return false
		}
	}
	return seen
}

// maxMoveDepth bounds the chains of data movement movesGraphInput follows.
const maxMoveDepth = 16

// movesGraphInput reports whether n only moves values that come from graph
// inputs (Slice, Reshape, Concat, ... chains back to them).
func movesGraphInput(n *onnxgraph.Node, depth int) bool {
	if depth > maxMoveDepth || n.Domain != "" || !dataMovement[n.OpType] {
		return false
	}
	for _, v := range n.Inputs {
		if v != nil && !v.IsConst() && v.Producer != nil && !movesGraphInput(v.Producer, depth+1) {
			return false
		}
	}
	return true
}

// dataMovement are the ops that only move values.
var dataMovement = map[string]bool{"Slice": true, "Reshape": true, "Transpose": true, "Squeeze": true, "Unsqueeze": true,
	"Flatten": true, "Concat": true, "Split": true, "Gather": true, "Expand": true, "Tile": true, "Identity": true,
	"DepthToSpace": true, "SpaceToDepth": true}

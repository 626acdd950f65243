package runtime

import (
	"fmt"
	"slices"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// ewUnary are the element-wise float ops an element-wise chain computes,
// each with the row kernel its own node runs (see opTable), so a chain
// gives the same bits as its nodes one by one.
var ewUnary = map[string]func(dst, src []float32){
	"Erf":     kernels.Erf,
	"Tanh":    kernels.Tanh,
	"Sigmoid": kernels.Sigmoid,
	"Relu":    reluRow,
}

// ewBinary are the binary ops an element-wise chain computes, as
// binaryF32 does for operands of one shape or a scalar.
var ewBinary = map[string]kernels.BinOp{
	"Add": kernels.BinAdd,
	"Sub": kernels.BinSub,
	"Mul": kernels.BinMul,
	"Div": kernels.BinDiv,
}

// ewChain is a chain of element-wise nodes computed in one step: every
// node reads x, outputs of earlier nodes of the chain and float constants
// of one element or of one row along x's last axis (a linear layer's
// bias), and only the last node's output is read outside the chain (a
// bias Add, then GELU written as Div, Erf, Add, Mul, Mul). The step runs the nodes'
// row kernels on blocks of x small enough to stay in the L1 cache instead
// of passing each intermediate tensor through memory, and gives the same
// bits as the nodes one by one. A run that taps an intermediate value, or
// whose x is not float32, runs the nodes one by one.
type ewChain struct {
	nodes []*onnxgraph.Node
	x     *onnxgraph.Value
	out   *onnxgraph.Value
}

// fusedOps names the nodes after the first ("+Erf+Add+Mul+Mul").
func (ch *ewChain) fusedOps() string {
	var s strings.Builder
	for _, n := range ch.nodes[1:] {
		s.WriteString("+" + n.OpType)
	}
	return s.String()
}

// ewNode reports whether n is an op the chain computes, in its plain form
// (no legacy broadcast attributes) with one output.
func ewNode(n *onnxgraph.Node) bool {
	if n.Domain != "" || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return false
	}
	if _, ok := ewUnary[n.OpType]; ok {
		return len(n.Inputs) == 1 && n.Inputs[0] != nil
	}
	if _, ok := ewBinary[n.OpType]; ok {
		return len(n.Inputs) == 2 && n.Inputs[0] != nil && n.Inputs[1] != nil && n.Attr("broadcast") == nil && n.Attr("axis") == nil
	}
	return false
}

// ewConst returns v's value when v is a float32 constant a chain reads:
// one element, or one row (every dimension but the last is 1), from an
// initializer, a folded value, or the output of a Constant node, which
// may come after the chain's first node in the graph.
func (c *compiler) ewConst(v *onnxgraph.Value) *tensor.Tensor {
	t := c.constOf(v)
	if t == nil && v != nil && v.Const != nil && rowDims(v.Const.GetDims()) {
		t, _ = c.constTensor(v)
	}
	if t == nil || t.DType != tensor.Float || t.Len() == 0 {
		return nil
	}
	for _, d := range t.Shape[:max(0, len(t.Shape)-1)] {
		if d != 1 {
			return nil
		}
	}
	return t
}

// rowDims reports whether dims are all 1 but the last.
func rowDims(dims []int64) bool {
	return len(dims) == 0 || oneElement(dims[:len(dims)-1])
}

func oneElement(dims []int64) bool {
	for _, d := range dims {
		if d != 1 {
			return false
		}
	}
	return true
}

// planEWChain returns the element-wise chain that starts at n, or nil
// when n starts none of at least two nodes. taken reports nodes another
// fused step already computes.
func (c *compiler) planEWChain(n *onnxgraph.Node, taken func(*onnxgraph.Node) bool) *ewChain {
	if !ewNode(n) {
		return nil
	}
	// rowLen is the length of the chain's row constants, which must all
	// have the one length of x's last axis.
	rowLen := 0
	constFits := func(v *onnxgraph.Value) bool {
		t := c.ewConst(v)
		return t != nil && (t.Len() == 1 || rowLen == 0 || t.Len() == rowLen)
	}
	takeRows := func(m *onnxgraph.Node) {
		for _, v := range m.Inputs {
			if t := c.ewConst(v); t != nil && t.Len() > 1 {
				rowLen = t.Len()
			}
		}
	}
	var x *onnxgraph.Value
	for _, v := range n.Inputs {
		switch {
		case constFits(v):
		case c.constOf(v) != nil || v.Const != nil || x != nil && x != v:
			return nil
		default:
			x = v
		}
	}
	if x == nil {
		return nil
	}
	takeRows(n)
	ch := &ewChain{nodes: []*onnxgraph.Node{n}, x: x}
	inner := map[*onnxgraph.Value]bool{n.Outputs[0]: true}
	member := map[*onnxgraph.Node]bool{n: true}
	fits := func(m *onnxgraph.Node) bool {
		if member[m] || taken(m) || !ewNode(m) {
			return false
		}
		for _, v := range m.Inputs {
			if v != x && !inner[v] && !constFits(v) {
				return false
			}
		}
		return true
	}
	// Grow in a fixed order: each value's readers, values in the order
	// the chain made them; a node joins once all its inputs are there.
	for i := 0; i < len(ch.nodes); i++ {
		for _, m := range ch.nodes[i].Outputs[0].Consumers {
			if fits(m) {
				takeRows(m)
				ch.nodes = append(ch.nodes, m)
				member[m] = true
				inner[m.Outputs[0]] = true
			}
		}
	}
	// Only the last node's output may be read outside the chain: drop
	// nodes from the end until that holds.
	escapes := func(v *onnxgraph.Value) bool {
		if v.IsGraphOutput {
			return true
		}
		for _, m := range v.Consumers {
			if !member[m] {
				return true
			}
		}
		return false
	}
	for len(ch.nodes) >= 2 {
		last := len(ch.nodes) - 1
		ok := true
		for _, m := range ch.nodes[:last] {
			if escapes(m.Outputs[0]) {
				ok = false
				break
			}
		}
		if ok {
			ch.out = ch.nodes[last].Outputs[0]
			return ch
		}
		delete(member, ch.nodes[last])
		ch.nodes = ch.nodes[:last]
	}
	return nil
}

// ewBlock is the number of elements a chain computes at a time: a few
// such blocks of intermediates stay in the L1 cache, and the kernels'
// per-call cost is small next to the work of one.
const ewBlock = 1024

// ewStep is one node of a compiled chain: a unary row kernel, or a binary
// op whose operands are chain values (-1 for x, i ≥ 0 for the output of
// step i) or a constant: one element (scalar) or a row along the last
// axis (row).
type ewStep struct {
	unary  func(dst, src []float32)
	op     kernels.BinOp
	args   [2]int
	scalar float32
	row    []float32
	// constAt is the operand the constant replaces (0 or 1), -1 when both
	// are chain values.
	constAt int
}

const ewConstArg = -2

// buildEWChain compiles ch into one kernel reading x.
func (c *compiler) buildEWChain(ch *ewChain) (kernel, error) {
	idx := map[*onnxgraph.Value]int{ch.x: -1}
	steps := make([]ewStep, len(ch.nodes))
	unfused := make([]kernel, len(ch.nodes))
	consts := map[*onnxgraph.Value]*tensor.Tensor{}
	maxRank, rowLen := 0, 0
	for i, n := range ch.nodes {
		k, err := c.build(n)
		if err != nil {
			return nil, err
		}
		unfused[i] = k
		st := ewStep{constAt: -1}
		if f, ok := ewUnary[n.OpType]; ok {
			st.unary = f
			st.args[0] = idx[n.Inputs[0]]
		} else {
			st.op = ewBinary[n.OpType]
			for j, v := range n.Inputs {
				if a, ok := idx[v]; ok {
					st.args[j] = a
					continue
				}
				t := c.ewConst(v)
				st.args[j], st.constAt = ewConstArg, j
				if t.Len() == 1 {
					st.scalar = t.Float32s()[0]
				} else {
					st.row = t.Float32s()
					rowLen = len(st.row) // one length, planEWChain saw to it
				}
				consts[v] = t
				maxRank = max(maxRank, len(t.Shape))
			}
		}
		steps[i] = st
		idx[n.Outputs[0]] = i
	}
	inner := make([]string, 0, len(ch.nodes)-1)
	for _, n := range ch.nodes[:len(ch.nodes)-1] {
		inner = append(inner, n.Outputs[0].Name)
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		xt := in[0]
		xf, ok := xt.Data.([]float32)
		r := len(xt.Shape)
		if !ok || r < maxRank || rowLen > 0 && xt.Shape[r-1] != rowLen || slices.ContainsFunc(inner, rc.wants) {
			return runEWUnfused(rc, ch, unfused, consts, xt)
		}
		out := rc.newFloatOut(xt.Shape...)
		o := out.Float32s()
		// Blocks hold whole rows, or lie within one row when a row is
		// longer than a block, so that a row constant lines up with them.
		l := max(rowLen, 1)
		blk := ewBlock
		if l <= ewBlock {
			blk = ewBlock / l * l
		}
		kernels.Parallel(rc.threads, len(xf)/l, max(1, parGrain/l), func(lo, hi int) {
			end := hi * l
			// A small tensor needs no more than its own length.
			stride := min(blk, end-lo*l)
			bufs := make([]float32, (len(steps)-1)*stride)
			for b := lo * l; b < end; {
				e := min(b+blk, end, (b/l+1)*l)
				if l <= ewBlock {
					e = min(b+blk, end)
				}
				runEWBlock(steps, bufs, stride, l, b, xf[b:e], o[b:e])
				b = e
			}
		})
		return one(out), nil
	}, nil
}

// runEWBlock computes the steps on one block x, which starts at element
// at of the tensor, into o, the intermediates in bufs (stride floats per
// step but the last). l is the length of the chain's row constants (1
// without any): the block holds whole rows of l or lies within one row.
func runEWBlock(steps []ewStep, bufs []float32, stride, l, at int, x, o []float32) {
	n := len(x)
	val := func(a int) []float32 {
		if a < 0 {
			return x
		}
		return bufs[a*stride : a*stride+n]
	}
	for i, st := range steps {
		dst := o
		if i < len(steps)-1 {
			dst = bufs[i*stride : i*stride+n]
		}
		switch {
		case st.unary != nil:
			st.unary(dst, val(st.args[0]))
		case st.constAt < 0:
			kernels.Binary(st.op, dst, val(st.args[0]), val(st.args[1]))
		case st.row == nil:
			other := val(st.args[1-st.constAt])
			kernels.BinaryScalar(st.op, dst, other, st.scalar, st.constAt == 0)
		default:
			other := val(st.args[1-st.constAt])
			c0 := at % l
			for j := 0; j < n; {
				m := min(n-j, l-c0)
				a, b := other[j:j+m], st.row[c0:c0+m]
				if st.constAt == 0 {
					a, b = b, a
				}
				kernels.Binary(st.op, dst[j:j+m], a, b)
				j += m
				c0 = 0
			}
		}
	}
}

// runEWUnfused runs a chain's nodes one by one with their own kernels,
// handing each intermediate value to the run's tap.
func runEWUnfused(rc *runCtx, ch *ewChain, ks []kernel, consts map[*onnxgraph.Value]*tensor.Tensor, x *tensor.Tensor) ([]*tensor.Tensor, error) {
	vals := map[*onnxgraph.Value]*tensor.Tensor{ch.x: x}
	var cur *tensor.Tensor
	for i, n := range ch.nodes {
		args := make([]*tensor.Tensor, len(n.Inputs))
		for j, v := range n.Inputs {
			if t, ok := vals[v]; ok {
				args[j] = t
			} else {
				args[j] = consts[v]
			}
		}
		outs, err := ks[i](rc, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		cur = outs[0]
		vals[n.Outputs[0]] = cur
		if i < len(ch.nodes)-1 {
			rc.emit(n.Outputs[0].Name, cur)
		}
	}
	return one(cur), nil
}

package runtime

import (
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// convChain is a Conv with the nodes fused into it at compile time: an
// inference BatchNormalization, an Add of another tensor of the output's
// shape (a residual connection) and a Relu, applied in the GEMM epilogue.
// The BatchNormalization is not folded into the weights: the epilogue
// computes exactly what the standalone kernels compute (same factors, same
// operation order, no fused multiply-add), so a fused step and its nodes
// run one by one give bit-identical results, whatever a run taps.
//
// Taps: the values between the fused nodes are not materialised on the fast
// path. When a run's tap asks for any of them, the step runs the original
// nodes one after the other instead (unfolded weights, separate kernels)
// and hands each intermediate value to the tap, so what a tap observes
// never depends on fusion.
type convChain struct {
	conv, bn, add, act *onnxgraph.Node
	// residual is add's other operand, residualFirst whether it is the
	// left one.
	residual      *onnxgraph.Value
	residualFirst bool
	// out is the value the chain produces (the last fused node's output).
	out *onnxgraph.Value
}

// fusedOps names the nodes fused into the Conv ("+BatchNormalization+Relu").
func (ch *convChain) fusedOps() string {
	var s string
	for _, n := range []*onnxgraph.Node{ch.bn, ch.add, ch.act} {
		if n != nil {
			s += "+" + n.OpType
		}
	}
	return s
}

// fusibleNext returns the single consumer of v when v feeds nothing else
// and is not a graph output.
func fusibleNext(v *onnxgraph.Value) *onnxgraph.Node {
	if v == nil || v.IsGraphOutput || len(v.Consumers) != 1 {
		return nil
	}
	n := v.Consumers[0]
	if n.Domain != "" || len(n.Inputs) == 0 || n.Inputs[0] != v {
		return nil
	}
	return n
}

// residualAdd returns the Add that v feeds as its only consumer, with the
// other operand and whether that comes first, when that operand is ready
// before the Conv runs (ready: an input, a constant or the output of an
// earlier step).
func residualAdd(v *onnxgraph.Value, ready func(*onnxgraph.Value) bool) (add *onnxgraph.Node, other *onnxgraph.Value, first bool) {
	if v == nil || v.IsGraphOutput || len(v.Consumers) != 1 {
		return nil, nil, false
	}
	n := v.Consumers[0]
	if ops.FusionOf(n) != ops.FuseConvResidual || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil, nil, false
	}
	switch {
	case n.Inputs[0] == v && n.Inputs[1] != v:
		other = n.Inputs[1]
	case n.Inputs[1] == v && n.Inputs[0] != v:
		other, first = n.Inputs[0], true
	default:
		return nil, nil, false
	}
	if other == nil || !ready(other) {
		return nil, nil, false
	}
	return n, other, first
}

// planConvChain finds the nodes to fuse into conv. constOf returns the
// compile-time value of a node input, or nil; ready reports whether a
// value is computed before conv runs.
func planConvChain(conv *onnxgraph.Node, constOf func(*onnxgraph.Value) *tensor.Tensor, ready func(*onnxgraph.Value) bool) *convChain {
	if len(conv.Outputs) != 1 || len(conv.Inputs) < 2 {
		return nil
	}
	ch := &convChain{conv: conv, out: conv.Outputs[0]}
	if bn := fusibleNext(ch.out); bn != nil && ops.FusionOf(bn) == ops.FuseConvNorm && foldableBN(bn, conv, constOf) {
		ch.bn, ch.out = bn, bn.Outputs[0]
	}
	if add, other, first := residualAdd(ch.out, ready); add != nil {
		ch.add, ch.residual, ch.residualFirst, ch.out = add, other, first, add.Outputs[0]
	}
	if act := fusibleNext(ch.out); act != nil && ops.FusionOf(act) == ops.FuseConvRelu && len(act.Outputs) == 1 && act.Outputs[0] != nil {
		ch.act, ch.out = act, act.Outputs[0]
	}
	if ch.bn == nil && ch.add == nil && ch.act == nil {
		return nil
	}
	return ch
}

func foldableBN(bn, conv *onnxgraph.Node, constOf func(*onnxgraph.Value) *tensor.Tensor) bool {
	if len(bn.Inputs) != 5 || bn.Attr("training_mode") != nil && bn.Attr("training_mode").GetI() != 0 {
		return false
	}
	if bn.Opset() < 9 && bn.Attr("spatial") != nil && bn.Attr("spatial").GetI() == 0 {
		return false
	}
	for _, o := range bn.Outputs[1:] {
		if o != nil {
			return false
		}
	}
	w := constOf(conv.Inputs[1])
	if w == nil || w.DType != tensor.Float || len(w.Shape) < 3 {
		return false
	}
	if len(conv.Inputs) > 2 && conv.Inputs[2] != nil {
		if b := constOf(conv.Inputs[2]); b == nil || b.DType != tensor.Float || b.Len() != w.Shape[0] {
			return false
		}
	}
	for _, v := range bn.Inputs[1:] {
		t := constOf(v)
		if t == nil || t.DType != tensor.Float || t.Len() != w.Shape[0] {
			return false
		}
	}
	return true
}

// buildConvChain compiles the chain into one kernel taking the Conv's
// inputs. unfused are the kernels of the chain's nodes, run in order when
// an intermediate value is tapped.
func (c *compiler) buildConvChain(ch *convChain, constOf func(*onnxgraph.Value) *tensor.Tensor) (kernel, error) {
	convK, err := c.build(ch.conv)
	if err != nil {
		return nil, err
	}
	b := &builder{c: c, n: ch.conv, opset: ch.conv.Opset()}
	attrs, err := readConvAttrs(b)
	if err != nil {
		return nil, err
	}
	cv := &convKernel{attrs: attrs, want: c.convWay}
	if k := cv.planAhead(ch.conv.Inputs[0], constOf(ch.conv.Inputs[1])); k != "" {
		c.chose(ch.conv.Name, ch.fusedOps()+" "+k)
	}
	var bnK, actK kernel
	var bnArgs []*tensor.Tensor
	var bn *bnPost
	if ch.bn != nil {
		if bnK, err = c.build(ch.bn); err != nil {
			return nil, err
		}
		for _, v := range ch.bn.Inputs[1:] {
			bnArgs = append(bnArgs, constOf(v))
		}
		bnb := &builder{c: c, n: ch.bn, opset: ch.bn.Opset()}
		bn = &bnPost{}
		bn.scale, bn.shift = kernels.BatchNormFold(bnArgs[0].Float32s(), bnArgs[1].Float32s(), bnArgs[2].Float32s(), bnArgs[3].Float32s(), nil, bnb.float("epsilon", 1e-5))
	}
	var addK kernel
	if ch.add != nil {
		if addK, err = c.build(ch.add); err != nil {
			return nil, err
		}
	}
	act := kernels.ActNone
	if ch.act != nil {
		if actK, err = c.build(ch.act); err != nil {
			return nil, err
		}
		act = kernels.ActRelu
	}
	// Every value but the last is fused away: a run that taps one runs the
	// nodes one by one.
	var inner []string
	for _, n := range []*onnxgraph.Node{ch.conv, ch.bn, ch.add, ch.act} {
		if n != nil && n.Outputs[0] != ch.out {
			inner = append(inner, n.Outputs[0].Name)
		}
	}
	unfused := &unfusedChain{ch: ch, convK: convK, bnK: bnK, addK: addK, actK: actK, bnArgs: bnArgs}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		var residual *tensor.Tensor
		if ch.add != nil {
			// The step's last input (see compileGraph).
			residual = in[len(in)-1]
			in = in[:len(in)-1]
		}
		if slices.ContainsFunc(inner, rc.wants) || residual != nil && !residualFits(residual, in[0], in[1], attrs) {
			rc.place = nil // the nodes' outputs are not the step's
			return unfused.run(rc, in, residual)
		}
		var bias *tensor.Tensor
		if len(in) > 2 {
			bias = in[2]
		}
		out, err := cv.run(rc, in[0], in[1], bias, bn, act, residual, ch.residualFirst)
		if err != nil {
			return nil, err
		}
		return one(out), nil
	}, nil
}

// residualFits reports whether a residual can be added in the epilogue:
// a float tensor of exactly the convolution's output shape (the Add does
// not broadcast it). Inputs the Conv rejects fall to the unfused path,
// which reports them.
func residualFits(r, x, w *tensor.Tensor, a *convAttrs) bool {
	if r.DType != tensor.Float || len(x.Shape) < 3 || len(w.Shape) != len(x.Shape) || !slices.Equal(r.Shape[:min(2, len(r.Shape))], []int{x.Shape[0], w.Shape[0]}) {
		return false
	}
	g, _, err := a.geometry(x.Shape[2:], w.Shape[2:])
	return err == nil && slices.Equal(r.Shape[2:], g.Out)
}

// unfusedChain runs a chain's nodes one by one: when a run taps a value
// inside the chain, or the residual does not fit the epilogue.
type unfusedChain struct {
	ch                     *convChain
	convK, bnK, addK, actK kernel
	bnArgs                 []*tensor.Tensor
}

func (u *unfusedChain) run(rc *runCtx, in []*tensor.Tensor, residual *tensor.Tensor) ([]*tensor.Tensor, error) {
	ch := u.ch
	outs, err := u.convK(rc, in)
	if err != nil {
		return nil, err
	}
	cur := outs[0]
	steps := []struct {
		n *onnxgraph.Node
		k kernel
	}{{ch.bn, u.bnK}, {ch.add, u.addK}, {ch.act, u.actK}}
	prev := ch.conv
	for _, s := range steps {
		if s.n == nil {
			continue
		}
		rc.emit(prev.Outputs[0].Name, cur)
		args := []*tensor.Tensor{cur}
		switch s.n {
		case ch.bn:
			args = append(args, u.bnArgs...)
		case ch.add:
			args = append(args, residual)
			if ch.residualFirst {
				args[0], args[1] = residual, cur
			}
		}
		o, err := s.k(rc, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.n, err)
		}
		cur, prev = o[0], s.n
	}
	return one(cur), nil
}

// planSiLU returns the Mul that multiplies sig's output by sig's input,
// when it is the output's only reader: x·σ(x) (SiLU, Swish), which one
// step computes in one pass over x (kernels.SiLU) with the same bits as
// the two nodes.
func planSiLU(sig *onnxgraph.Node) *onnxgraph.Node {
	if len(sig.Inputs) != 1 || len(sig.Outputs) != 1 || sig.Inputs[0] == nil {
		return nil
	}
	x, s := sig.Inputs[0], sig.Outputs[0]
	if s == nil || s.IsGraphOutput || len(s.Consumers) != 1 {
		return nil
	}
	mul := s.Consumers[0]
	if ops.FusionOf(mul) != ops.FuseSigmoidMulTail || len(mul.Inputs) != 2 || len(mul.Outputs) != 1 || mul.Outputs[0] == nil || mul.Attr("broadcast") != nil {
		return nil
	}
	if !(mul.Inputs[0] == x && mul.Inputs[1] == s || mul.Inputs[0] == s && mul.Inputs[1] == x) {
		return nil
	}
	return mul
}

// buildSiLU compiles a Sigmoid and the Mul planSiLU found into one kernel
// reading the Sigmoid's input. A run that taps the Sigmoid's output, or
// an input that is not float32, runs the two nodes one after the other.
func (c *compiler) buildSiLU(sig, mul *onnxgraph.Node) (kernel, error) {
	sigK, err := c.build(sig)
	if err != nil {
		return nil, err
	}
	mulK, err := c.build(mul)
	if err != nil {
		return nil, err
	}
	s := sig.Outputs[0]
	sFirst := mul.Inputs[0] == s
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, ok := in[0].Data.([]float32)
		if !ok || rc.wants(s.Name) {
			so, err := sigK(rc, in)
			if err != nil {
				return nil, err
			}
			rc.emit(s.Name, so[0])
			args := []*tensor.Tensor{in[0], so[0]}
			if sFirst {
				args[0], args[1] = so[0], in[0]
			}
			o, err := mulK(rc, args)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mul, err)
			}
			return o, nil
		}
		out := rc.newFloatOut(in[0].Shape...)
		y := out.Float32s()
		kernels.Parallel(rc.threads, len(x), parGrain, func(lo, hi int) { kernels.SiLU(y[lo:hi], x[lo:hi]) })
		return one(out), nil
	}, nil
}

// hardSwishChain is HardSwish as exporters decompose it, x·clip(x + a,
// lo, hi) divided or multiplied by d (x·relu6(x + 3)/6): an Add of a
// scalar constant, a Clip with constant bounds, a Mul by x and a Div or
// Mul by a scalar constant, each intermediate read by the next node
// alone. One step computes it in one pass over x (kernels.HardSwishChain)
// with the four nodes' roundings.
type hardSwishChain struct {
	add, clip, mul, tail *onnxgraph.Node
	// xIn is the index of x among the Add's inputs; tailFirst whether the
	// Mul's product is the tail's left operand.
	xIn, tailFirst bool
	p              kernels.HardSwishParams
	// rank is the largest rank of the constants: an x of lower rank
	// broadcasts to a larger output, which the nodes compute.
	rank int
}

// constValue returns v's value when it is known at compile time: from
// constOf, or from the Constant node that produces v, which may come
// after the node being planned (exporters write a chain's constants just
// before the node that reads them).
func (c *compiler) constValue(v *onnxgraph.Value, constOf func(*onnxgraph.Value) *tensor.Tensor) *tensor.Tensor {
	if t := constOf(v); t != nil || v == nil || v.Const == nil {
		return t
	}
	t, err := c.constTensor(v)
	if err != nil {
		return nil
	}
	return t
}

// planHardSwish returns the chain that add heads, or nil.
func (c *compiler) planHardSwish(add *onnxgraph.Node, constOf func(*onnxgraph.Value) *tensor.Tensor) *hardSwishChain {
	// scalar returns v's value when it is a one-element float constant,
	// with its rank.
	scalar := func(v *onnxgraph.Value) (float32, int, bool) {
		t := c.constValue(v, constOf)
		if t == nil || t.DType != tensor.Float || t.Len() != 1 {
			return 0, 0, false
		}
		return t.Float32s()[0], len(t.Shape), true
	}
	// binary reports whether n is a two-input op of type op, with one
	// output and no legacy broadcast attributes.
	binary := func(n *onnxgraph.Node, op string) bool {
		return n != nil && n.Domain == "" && n.OpType == op && len(n.Inputs) == 2 && len(n.Outputs) == 1 && n.Outputs[0] != nil &&
			n.Attr("broadcast") == nil && n.Attr("axis") == nil
	}
	// only returns the single reader of v.
	only := func(v *onnxgraph.Value) *onnxgraph.Node {
		if v == nil || v.IsGraphOutput || len(v.Consumers) != 1 {
			return nil
		}
		return v.Consumers[0]
	}
	if !binary(add, "Add") {
		return nil
	}
	ch := &hardSwishChain{add: add}
	var rank int
	var ok bool
	if ch.p.Shift, rank, ok = scalar(add.Inputs[1]); !ok {
		if ch.p.Shift, rank, ok = scalar(add.Inputs[0]); !ok {
			return nil
		}
		ch.xIn = true
	}
	ch.rank = rank
	x := add.Inputs[0]
	if ch.xIn {
		x = add.Inputs[1]
	}
	if x == nil || constOf(x) != nil {
		return nil
	}
	ch.clip = only(add.Outputs[0])
	if ch.clip == nil || ch.clip.Domain != "" || ch.clip.OpType != "Clip" || len(ch.clip.Inputs) == 0 || ch.clip.Inputs[0] != add.Outputs[0] || len(ch.clip.Outputs) != 1 || ch.clip.Outputs[0] == nil {
		return nil
	}
	ch.p.Lo, ch.p.Hi = float32(math.Inf(-1)), float32(math.Inf(1))
	if ch.clip.Opset() < 11 {
		b := &builder{c: c, n: ch.clip, opset: ch.clip.Opset()}
		ch.p.Lo, ch.p.Hi = b.float("min", ch.p.Lo), b.float("max", ch.p.Hi)
	} else {
		for i, bound := range []*float32{&ch.p.Lo, &ch.p.Hi} {
			if i+1 >= len(ch.clip.Inputs) || ch.clip.Inputs[i+1] == nil {
				continue
			}
			v, r, ok := scalar(ch.clip.Inputs[i+1])
			if !ok {
				return nil
			}
			*bound, ch.rank = v, max(ch.rank, r)
		}
	}
	cv := ch.clip.Outputs[0]
	ch.mul = only(cv)
	if !binary(ch.mul, "Mul") || !(ch.mul.Inputs[0] == x && ch.mul.Inputs[1] == cv || ch.mul.Inputs[0] == cv && ch.mul.Inputs[1] == x) {
		return nil
	}
	m := ch.mul.Outputs[0]
	ch.tail = only(m)
	switch {
	case binary(ch.tail, "Div") && ch.tail.Inputs[0] == m:
		ch.p.Div, ch.tailFirst = true, true
		ch.p.D, rank, ok = scalar(ch.tail.Inputs[1])
	case binary(ch.tail, "Mul") && ch.tail.Inputs[0] == m:
		ch.tailFirst = true
		ch.p.D, rank, ok = scalar(ch.tail.Inputs[1])
	case binary(ch.tail, "Mul") && ch.tail.Inputs[1] == m:
		ch.p.D, rank, ok = scalar(ch.tail.Inputs[0])
	default:
		return nil
	}
	if !ok {
		return nil
	}
	ch.rank = max(ch.rank, rank)
	return ch
}

// fusedOps names the nodes fused into the Add ("+Clip+Mul+Div").
func (ch *hardSwishChain) fusedOps() string {
	return "+Clip+Mul+" + ch.tail.OpType
}

// buildHardSwish compiles the chain into one kernel taking the Add's
// inputs. A run that taps an intermediate value, an x that is not float32
// or of lower rank than the constants runs the four nodes one by one.
func (c *compiler) buildHardSwish(ch *hardSwishChain, constOf func(*onnxgraph.Value) *tensor.Tensor) (kernel, error) {
	nodes := []*onnxgraph.Node{ch.add, ch.clip, ch.mul, ch.tail}
	ks := make([]kernel, len(nodes))
	for i, n := range nodes {
		k, err := c.build(n)
		if err != nil {
			return nil, err
		}
		ks[i] = k
	}
	var clipBounds []*tensor.Tensor
	for _, v := range ch.clip.Inputs[1:] {
		clipBounds = append(clipBounds, c.constValue(v, constOf))
	}
	tailConst := c.constValue(ch.tail.Inputs[1], constOf)
	if !ch.tailFirst {
		tailConst = c.constValue(ch.tail.Inputs[0], constOf)
	}
	inner := []string{ch.add.Outputs[0].Name, ch.clip.Outputs[0].Name, ch.mul.Outputs[0].Name}
	xi := 0
	if ch.xIn {
		xi = 1
	}
	unfused := func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x := in[xi]
		t, err := ks[0](rc, in)
		if err != nil {
			return nil, err
		}
		rc.emit(inner[0], t[0])
		cl, err := ks[1](rc, append([]*tensor.Tensor{t[0]}, clipBounds...))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.clip, err)
		}
		rc.emit(inner[1], cl[0])
		args := []*tensor.Tensor{x, cl[0]}
		if ch.mul.Inputs[0] != ch.add.Inputs[xi] {
			args[0], args[1] = cl[0], x
		}
		m, err := ks[2](rc, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.mul, err)
		}
		rc.emit(inner[2], m[0])
		args = []*tensor.Tensor{m[0], tailConst}
		if !ch.tailFirst {
			args[0], args[1] = tailConst, m[0]
		}
		o, err := ks[3](rc, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.tail, err)
		}
		return o, nil
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, ok := in[xi].Data.([]float32)
		if !ok || len(in[xi].Shape) < ch.rank || slices.ContainsFunc(inner, rc.wants) {
			return unfused(rc, in)
		}
		out := rc.newFloatOut(in[xi].Shape...)
		y := out.Float32s()
		kernels.Parallel(rc.threads, len(x), parGrain, func(lo, hi int) { kernels.HardSwishChain(y[lo:hi], x[lo:hi], ch.p) })
		return one(out), nil
	}, nil
}

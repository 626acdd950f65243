package runtime

import (
	"fmt"
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

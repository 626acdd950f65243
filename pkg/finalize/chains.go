package finalize

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"google.golang.org/protobuf/proto"
)

// A clamp chain is y = X' ⊙ f·Clip(X + k, lo, hi), the form exporters
// write HardSwish (x·Clip(x+3, 0, 6)/6) and HardSigmoid (Clip(x+3, 0,
// 6)/6) in when the opset or the exporter has no op for them: X and X'
// come out of DequantizeLinear nodes, k is a constant scalar, f a
// constant scalar Div or Mul anywhere after the Clip, ⊙ an optional Mul,
// and the chain's output is quantized. prepare quantizes the chain at its
// boundary only (the hard_swish patterns), which leaves every op of it in
// float between a DequantizeLinear and a QuantizeLinear. ONNX Runtime runs
// the chain on integers once:
//
//   - k has a DequantizeLinear: a constant scalar is exact on an 8-bit grid
//     whose end it is (scale k/255), so the Add becomes a QLinearAdd;
//   - the Clip's output is quantized to the Clip's own range, which the
//     quantization clamps exactly: ONNX Runtime's ClipQuantFusion removes
//     the Clip, and nothing is lost (the Clip bounds the values);
//   - f folds into a scale: into the DequantizeLinear after the Clip's
//     QuantizeLinear when the Mul follows (DQ(q; s·f) = f·DQ(q; s)), into
//     the QuantizeLinear of the output otherwise (Q(f·v; s) = Q(v; s/f)),
//     so no float op remains and the Mul becomes a QLinearMul.
//
// A Sigmoid bounds its output to [0, 1] as the Clip does: SiLU written out
// (x·Sigmoid(x), yolox-nano has 104) is the chain without the Add, whose
// Sigmoid ONNX Runtime runs as QLinearSigmoid once its output is quantized
// to [0, 1].
//
// The model's function is unchanged but for the rounding of the Clip's or
// Sigmoid's output to 8 bits, which the integer Mul needs.
type clampChain struct {
	// add is nil for a Sigmoid, which bounds its output itself.
	add, clip, mul, factor *onnxgraph.Node // mul and factor may be nil
	x                      *onnxgraph.Node // the DequantizeLinear the Add or Sigmoid reads
	k, lo, hi, f           float32
	factorFirst            bool // factor is between the Clip and the Mul
	outQs                  []*onnxgraph.Node
}

// lowerClampChains rewrites the clamp chains of m's main graph for ONNX
// Runtime's integer kernels (Options.IntegerChains) and returns the model,
// a note per chain and the nodes of the chains. m itself is returned when
// no chain is found.
func lowerClampChains(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var chains []*clampChain
	for _, n := range m.Graph.Nodes {
		if c := matchClampChain(m, n); c != nil {
			chains = append(chains, c)
		}
	}
	if len(chains) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	name := func(base string) string { return uniqueIn(used, base) }
	drop := map[int]bool{}
	dropValue := map[string]bool{}
	before := map[int][]*onnxpb.NodeProto{}   // by node index
	inserted := map[int][]*onnxpb.NodeProto{} // after node index
	var notes, lowered []string
	for _, c := range chains {
		xdq := c.x.Proto
		meta := xdq.GetMetadataProps()
		dt := c.x.Inputs[2].DType()
		qmin, qmax := qRange(dt)
		newNode := func(op, base string, in, outs []string) *onnxpb.NodeProto {
			n := &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name(base)), Input: in, Output: outs}
			for _, kv := range meta {
				n.MetadataProps = append(n.MetadataProps, proto.CloneOf(kv))
			}
			return n
		}
		addInit := func(t *tensor.Tensor, base string) (string, error) { return addInitializer(g, used, t, base) }
		scalar := func(dt tensor.DType, v float64) *tensor.Tensor {
			t := tensor.New(dt)
			switch d := t.Data.(type) {
			case []float32:
				d[0] = float32(v)
			case []uint8:
				d[0] = uint8(v)
			case []int8:
				d[0] = int8(v)
			}
			return t
		}
		if c.add != nil {
			// The constant k on the grid whose end it is.
			ks, kz, kq := constGrid(c.k, qmin, qmax)
			addName := c.add.Name
			kScale, err := addInit(scalar(tensor.Float, float64(ks)), addName+"_constant_scale")
			if err != nil {
				return nil, nil, nil, err
			}
			kZP, err := addInit(scalar(dt, float64(kz)), addName+"_constant_zero_point")
			if err != nil {
				return nil, nil, nil, err
			}
			kQ, err := addInit(scalar(dt, float64(kq)), addName+"_constant_quantized")
			if err != nil {
				return nil, nil, nil, err
			}
			kOut := name(addName + "_constant")
			addP := g.Node[c.add.Index]
			kIdx := slices.IndexFunc(c.add.Inputs, func(v *onnxgraph.Value) bool { return v.IsConst() })
			addP.Input[kIdx] = kOut
			before[c.add.Index] = append(before[c.add.Index], newNode("DequantizeLinear", addName+"_constant_DequantizeLinear", []string{kQ, kScale, kZP}, []string{kOut}))
		}

		clipOut := c.clip.Outputs[0].Name
		switch {
		case c.mul == nil:
			// Clip → factor → Q: the factor goes into each Q's scale.
			if err := scaleQs(m, g, c.outQs, c.f, clipOut, addInit); err != nil {
				return nil, nil, nil, err
			}
			drop[c.factor.Index] = true
			dropValue[c.factor.Outputs[0].Name] = true
		default:
			cs, cz := clampGrid(c.lo, c.hi, qmin, qmax)
			qScale, err := addInit(scalar(tensor.Float, float64(cs)), clipOut+"_scale")
			if err != nil {
				return nil, nil, nil, err
			}
			dqScale := qScale
			if c.factor != nil && c.factorFirst {
				if dqScale, err = addInit(scalar(tensor.Float, float64(cs*c.f)), clipOut+"_scaled_scale"); err != nil {
					return nil, nil, nil, err
				}
			}
			zp, err := addInit(scalar(dt, float64(cz)), clipOut+"_zero_point")
			if err != nil {
				return nil, nil, nil, err
			}
			qIn, qOut := name(clipOut+"_QuantizeLinear_Input"), name(clipOut+"_QuantizeLinear_Output")
			g.Node[c.clip.Index].Output[0] = qIn
			dqOut := clipOut
			if c.factor != nil && c.factorFirst {
				dropValue[clipOut] = true
				// The Mul reads the scaled DequantizeLinear instead of the factor.
				dqOut = c.factor.Outputs[0].Name
				drop[c.factor.Index] = true
			}
			inserted[c.clip.Index] = append(inserted[c.clip.Index],
				newNode("QuantizeLinear", clipOut+"_QuantizeLinear", []string{qIn, qScale, zp}, []string{qOut}),
				newNode("DequantizeLinear", clipOut+"_DequantizeLinear", []string{qOut, dqScale, zp}, []string{dqOut}))
			if c.factor != nil && !c.factorFirst {
				if err := scaleQs(m, g, c.outQs, c.f, c.mul.Outputs[0].Name, addInit); err != nil {
					return nil, nil, nil, err
				}
				drop[c.factor.Index] = true
				dropValue[c.factor.Outputs[0].Name] = true
			}
		}
		notes = append(notes, c.note())
		for _, n := range []*onnxgraph.Node{c.add, c.clip, c.mul, c.factor} {
			if n != nil {
				lowered = append(lowered, n.Name)
			}
		}
	}
	spliceNodes(g, before, drop, inserted)
	dropValueInfo(g, dropValue)
	lm, err := rewritten(m, out, "clamp chains")
	if err != nil {
		return nil, nil, nil, err
	}
	return lm, notes, lowered, nil
}

// note says what ONNX Runtime runs of the chain.
func (c *clampChain) note() string {
	var ops []string
	if c.add != nil {
		ops = append(ops, fmt.Sprintf("Add %g as QLinearAdd, Clip %g..%g as its QuantizeLinear's clamp", c.k, c.lo, c.hi))
	} else {
		ops = append(ops, "Sigmoid as QLinearSigmoid")
	}
	if c.mul != nil {
		ops = append(ops, "Mul as QLinearMul")
	}
	if c.factor != nil {
		ops = append(ops, fmt.Sprintf("the scalar %s folded into a scale", c.factor.OpType))
	}
	return fmt.Sprintf("%s: on integers in ONNX Runtime: %s", c.clip, strings.Join(ops, ", "))
}

// scaleQs makes the QuantizeLinear nodes qs, which quantize f·v, read v
// with their scale divided by f: Q(f·v; s) = Q(v; s/f).
func scaleQs(m *onnxgraph.Model, g *onnxpb.GraphProto, qs []*onnxgraph.Node, f float32, v string, addInit func(*tensor.Tensor, string) (string, error)) error {
	for _, q := range qs {
		s, err := tensor.FromProto(q.Inputs[1].Const, m)
		if err != nil {
			return err
		}
		t := tensor.New(tensor.Float)
		t.Data.([]float32)[0] = s.Data.([]float32)[0] / f
		nm, err := addInit(t, q.Inputs[1].Name+"_unscaled")
		if err != nil {
			return err
		}
		p := g.Node[q.Index]
		p.Input[0], p.Input[1] = v, nm
	}
	return nil
}

// qRange is the integer range of an 8-bit Q/DQ type.
func qRange(dt tensor.DType) (qmin, qmax int) {
	if dt == tensor.Int8 {
		return -128, 127
	}
	return 0, 255
}

// constGrid puts the scalar k at the end of an 8-bit grid that holds 0:
// the scale |k|/(qmax−qmin), k exact up to float rounding.
func constGrid(k float32, qmin, qmax int) (scale float32, zp, q int) {
	scale = float32(math.Abs(float64(k)) / float64(qmax-qmin))
	if k > 0 {
		return scale, qmin, qmax
	}
	return scale, qmax, qmin
}

// clampGrid is the asymmetric grid of the range [lo, hi] (0 ≤ hi, lo ≤
// 0): the scale is the largest whose grid ends within the range as ONNX
// Runtime computes it in float32 (ClipQuantFusion removes the Clip only
// then).
func clampGrid(lo, hi float32, qmin, qmax int) (scale float32, zp int) {
	scale = (hi - lo) / float32(qmax-qmin)
	zp = qmin + int(math.Round(float64(-lo/scale)))
	for range 8 {
		if scale*float32(qmax-zp) <= hi && scale*float32(qmin-zp) >= lo {
			break
		}
		scale = math.Nextafter32(scale, 0)
	}
	return scale, zp
}

// matchClampChain returns the clamp chain whose Add is n, nil when n
// starts none.
func matchClampChain(m *onnxgraph.Model, n *onnxgraph.Node) *clampChain {
	if defaultOp(n, "Sigmoid") && len(n.Inputs) == 1 && n.Inputs[0] != nil && n.Inputs[0].Producer != nil && activationDQ(n.Inputs[0].Producer) {
		return matchChainTail(m, &clampChain{clip: n, x: n.Inputs[0].Producer, lo: 0, hi: 1, f: 1})
	}
	if !defaultOp(n, "Add") || len(n.Inputs) != 2 || n.Inputs[0] == nil || n.Inputs[1] == nil {
		return nil
	}
	c := &clampChain{add: n}
	var kv *onnxgraph.Value
	for _, v := range n.Inputs {
		switch {
		case v.IsConst():
			kv = v
		case v.Producer != nil && activationDQ(v.Producer):
			c.x = v.Producer
		}
	}
	if kv == nil || c.x == nil {
		return nil
	}
	k, ok := scalarConst(m, kv)
	if !ok || k == 0 {
		return nil
	}
	c.k = k
	clip := soleConsumer(n.Outputs[0])
	if clip == nil || !defaultOp(clip, "Clip") {
		return nil
	}
	op, ok := ops.Of(clip)
	if !ok || op.Bounds == nil {
		return nil
	}
	lo, hi := op.Bounds(m, clip)
	if lo == nil || hi == nil || *lo > 0 || *hi <= 0 {
		return nil
	}
	c.clip, c.lo, c.hi, c.f = clip, *lo, *hi, 1
	return matchChainTail(m, c)
}

// matchChainTail matches what follows the chain's bounded node c.clip (a
// factor, a Mul, a factor) up to the QuantizeLinear nodes.
func matchChainTail(m *onnxgraph.Model, c *clampChain) *clampChain {
	v := c.clip.Outputs[0]
	// factor, Mul and factor again, at most one factor.
	for step := 0; step < 2; step++ {
		next := soleConsumer(v)
		if next == nil {
			break
		}
		if f, ok := scalarFactorOf(m, next, v); ok && c.factor == nil {
			c.factor, c.f, c.factorFirst = next, f, c.mul == nil
			v = next.Outputs[0]
			continue
		}
		if defaultOp(next, "Mul") && c.mul == nil && len(next.Inputs) == 2 {
			other := next.Inputs[0]
			if other == v {
				other = next.Inputs[1]
			}
			if other == nil || other == v || other.Producer == nil || !activationDQ(other.Producer) || !sameGrid(other.Producer, c.x) {
				return nil
			}
			c.mul = next
			v = next.Outputs[0]
			continue
		}
		break
	}
	if c.mul == nil && c.factor == nil {
		return nil // Add → Clip → Q is fused as it is
	}
	if v.IsGraphOutput || len(v.Consumers) == 0 {
		return nil
	}
	for _, q := range v.Consumers {
		if !defaultOp(q, "QuantizeLinear") || len(q.Inputs) < 3 || q.Inputs[2] == nil || q.Inputs[2].DType() != c.x.Inputs[2].DType() ||
			q.Inputs[1] == nil || !q.Inputs[1].IsConst() || q.Inputs[1].DType() != tensor.Float || len(q.Inputs[1].Const.GetDims()) != 0 {
			return nil
		}
	}
	c.outQs = v.Consumers
	// Without a Mul the Clip is removed only when it feeds one
	// QuantizeLinear whose range, the factor folded in, lies within it.
	if c.mul == nil && c.add != nil && (len(c.outQs) != 1 || !clampWithinQ(c, m)) {
		return nil
	}
	return c
}

// clampWithinQ reports whether, with the factor folded into the output
// QuantizeLinear nodes, their range lies within the Clip's, so that ONNX
// Runtime removes the Clip.
func clampWithinQ(c *clampChain, m *onnxgraph.Model) bool {
	for _, q := range c.outQs {
		s, err := tensor.FromProto(q.Inputs[1].Const, m)
		if err != nil {
			return false
		}
		zt, err := tensor.FromProto(q.Inputs[2].Const, m)
		if err != nil {
			return false
		}
		zf, err := zt.AsFloat32()
		if err != nil || len(zf) != 1 {
			return false
		}
		qmin, qmax := qRange(zt.DType)
		scale := s.Data.([]float32)[0] / c.f
		z := int(zf[0])
		if scale*float32(qmax-z) > c.hi || scale*float32(qmin-z) < c.lo {
			return false
		}
	}
	return true
}

// scalarFactorOf reports a Div or Mul of v by a positive constant scalar,
// as the factor it multiplies by.
func scalarFactorOf(m *onnxgraph.Model, n *onnxgraph.Node, v *onnxgraph.Value) (float32, bool) {
	if !defaultOp(n, "Div") && !defaultOp(n, "Mul") || len(n.Inputs) != 2 {
		return 0, false
	}
	var other *onnxgraph.Value
	switch {
	case n.Inputs[0] == v:
		other = n.Inputs[1]
	case n.Inputs[1] == v && n.OpType == "Mul":
		other = n.Inputs[0]
	default:
		return 0, false
	}
	f, ok := scalarConst(m, other)
	if !ok || !(f > 0) || math.IsInf(float64(f), 0) {
		return 0, false
	}
	if n.OpType == "Div" {
		f = 1 / f
	}
	return f, true
}

// scalarConst reads a float32 constant of one element.
func scalarConst(m *onnxgraph.Model, v *onnxgraph.Value) (float32, bool) {
	if v == nil || !v.IsConst() || v.DType() != tensor.Float {
		return 0, false
	}
	t, err := tensor.FromProto(v.Const, m)
	if err != nil || t.Len() != 1 {
		return 0, false
	}
	f := t.Data.([]float32)[0]
	return f, !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0)
}

// activationDQ reports a per-tensor 8-bit DequantizeLinear of a computed
// value with a float scale.
func activationDQ(n *onnxgraph.Node) bool {
	if !defaultOp(n, "DequantizeLinear") || len(n.Inputs) < 3 || n.Inputs[0] == nil || n.Inputs[0].IsConst() || n.Inputs[1] == nil || n.Inputs[2] == nil {
		return false
	}
	dt := n.Inputs[2].DType()
	return (dt == tensor.Uint8 || dt == tensor.Int8) && n.Inputs[1].DType() == tensor.Float && n.Inputs[1].IsConst() && len(n.Inputs[1].Const.GetDims()) == 0
}

// sameGrid reports whether two activation DequantizeLinear nodes share
// their integer type.
func sameGrid(a, b *onnxgraph.Node) bool { return a.Inputs[2].DType() == b.Inputs[2].DType() }

func soleConsumer(v *onnxgraph.Value) *onnxgraph.Node {
	if v == nil || v.IsGraphOutput || len(v.Consumers) != 1 {
		return nil
	}
	return v.Consumers[0]
}

func defaultOp(n *onnxgraph.Node, op string) bool { return n.Domain == "" && n.OpType == op }

package finalize

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"google.golang.org/protobuf/proto"
)

// A scalar factor is a Div or Mul by a positive constant scalar whose
// output only QuantizeLinear nodes read (the 1/√d of attention scores, the
// ½ of a written-out GELU). Between a DequantizeLinear and a
// QuantizeLinear it is a float op ONNX Runtime runs on its own, a pass
// over the tensor. A positive factor is a change of scale:
//
//   - after a DequantizeLinear whose QuantizeLinear nodes feed only
//     DequantizeLinear nodes, f·DQ(q; s, z) = DQ(q; f·s, z): one
//     DequantizeLinear with the scaled scale replaces the factor and the
//     Q/DQ pairs after it, and the readers get the values without a
//     second rounding;
//   - otherwise Q(f·v; s, z) = Q(v; s/f, z): the QuantizeLinear nodes read
//     v with their scale divided by f (their DequantizeLinear nodes keep
//     s).
type scalarFactor struct {
	node *onnxgraph.Node
	f    float32
	in   *onnxgraph.Value
	qs   []*onnxgraph.Node
	dqs  []*onnxgraph.Node // the DequantizeLinear nodes after qs, for the first form
}

// foldScalarFactors folds the scalar factors of m's main graph into
// scales and returns the model, a note per factor and the factor nodes; m
// itself when there is none.
func foldScalarFactors(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var found []*scalarFactor
	for _, n := range m.Graph.Nodes {
		if sf := matchScalarFactor(m, n); sf != nil {
			found = append(found, sf)
		}
	}
	if len(found) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	drop := map[int]bool{}
	dropValue := map[string]bool{}
	replace := map[int]*onnxpb.NodeProto{}
	var notes, folded []string
	addScale := func(v float32, base string) (string, error) {
		nm := uniqueIn(used, base)
		t := tensor.New(tensor.Float)
		t.Data.([]float32)[0] = v
		tp, err := tensor.ToProto(t, nm)
		if err != nil {
			return "", err
		}
		g.Initializer = append(g.Initializer, tp)
		return nm, nil
	}
	for _, sf := range found {
		folded = append(folded, sf.node.Name)
		drop[sf.node.Index] = true
		dropValue[sf.node.Outputs[0].Name] = true
		if sf.dqs != nil {
			dq := sf.in.Producer
			scale, err := addScale(scalarOf(m, dq.Inputs[1])*sf.f, dq.Inputs[1].Name+"_scaled")
			if err != nil {
				return nil, nil, nil, err
			}
			for _, q := range sf.qs {
				drop[q.Index] = true
				dropValue[q.Outputs[0].Name] = true
			}
			if len(sf.in.Consumers) == 1 && !sf.in.IsGraphOutput {
				drop[dq.Index] = true // read only by the factor
			}
			for _, old := range sf.dqs {
				p := proto.CloneOf(g.Node[old.Index])
				p.Input = []string{dq.Inputs[0].Name, scale}
				if len(dq.Inputs) > 2 && dq.Inputs[2] != nil {
					p.Input = append(p.Input, dq.Inputs[2].Name)
				}
				p.Attribute = proto.CloneOf(dq.Proto).Attribute
				replace[old.Index] = p
			}
			notes = append(notes, fmt.Sprintf("%s: the scalar %s folded into the scale of the DequantizeLinear before it, with the QuantizeLinear after it", sf.node, sf.node.OpType))
			continue
		}
		for _, q := range sf.qs {
			scale, err := addScale(scalarOf(m, q.Inputs[1])/sf.f, q.Inputs[1].Name+"_unscaled")
			if err != nil {
				return nil, nil, nil, err
			}
			p := g.Node[q.Index]
			p.Input[0], p.Input[1] = sf.in.Name, scale
		}
		notes = append(notes, fmt.Sprintf("%s: the scalar %s folded into the scale of the QuantizeLinear after it", sf.node, sf.node.OpType))
	}
	var nodes []*onnxpb.NodeProto
	for i, n := range g.Node {
		switch {
		case replace[i] != nil:
			nodes = append(nodes, replace[i])
		case !drop[i]:
			nodes = append(nodes, n)
		}
	}
	g.Node = nodes
	dropValueInfo(g, dropValue)
	fm, err := rewritten(m, out, "scalar factors")
	if err != nil {
		return nil, nil, nil, err
	}
	return fm, notes, folded, nil
}

// matchScalarFactor returns n as a scalar factor, nil when it is none.
func matchScalarFactor(m *onnxgraph.Model, n *onnxgraph.Node) *scalarFactor {
	if len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil
	}
	var in *onnxgraph.Value
	for _, v := range n.Inputs {
		if v != nil && !v.IsConst() {
			in = v
		}
	}
	if in == nil {
		return nil
	}
	f, ok := scalarFactorOf(m, n, in)
	if !ok {
		return nil
	}
	y := n.Outputs[0]
	if y.IsGraphOutput || len(y.Consumers) == 0 {
		return nil
	}
	for _, q := range y.Consumers {
		if !defaultOp(q, "QuantizeLinear") || !perTensorFloatScale(q) || q.Inputs[0] != y {
			return nil
		}
	}
	sf := &scalarFactor{node: n, f: f, in: in, qs: y.Consumers}
	if in.Producer != nil && activationDQ(in.Producer) && len(in.Producer.Inputs) > 2 {
		var dqs []*onnxgraph.Node
		ok := true
		for _, q := range sf.qs {
			qv := q.Outputs[0]
			if qv.IsGraphOutput || len(qv.Consumers) == 0 || q.Inputs[2] == nil || q.Inputs[2].DType() != in.Producer.Inputs[2].DType() {
				ok = false
				break
			}
			for _, dq := range qv.Consumers {
				if !defaultOp(dq, "DequantizeLinear") || !perTensorFloatScale(dq) {
					ok = false
				}
				dqs = append(dqs, dq)
			}
		}
		if ok {
			sf.dqs = dqs
		}
	}
	return sf
}

// perTensorFloatScale reports a Q/DQ node with one float32 scale.
func perTensorFloatScale(n *onnxgraph.Node) bool {
	return len(n.Inputs) >= 2 && n.Inputs[1] != nil && n.Inputs[1].IsConst() && n.Inputs[1].DType() == tensor.Float &&
		len(n.Inputs[1].Const.GetDims()) == 0
}

// scalarOf reads a float32 scalar constant known to be one.
func scalarOf(m *onnxgraph.Model, v *onnxgraph.Value) float32 {
	f, _ := scalarConst(m, v)
	return f
}

package finalize

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"google.golang.org/protobuf/proto"
)

// ONNX Runtime's CPU provider upsamples by 2 in nearest mode with a fast
// loop only when the scales are {1, 1, 2, 2}: channels first, rows and
// columns doubled (upsample.cc, UpsampleNearest2x; for Resize from opset
// 11 only with coordinate_transformation_mode asymmetric and nearest_mode
// floor). Its layout transformer moves every 8-bit Resize between
// integer convolutions to channels-last ({1, 2, 2, 1}), where the
// generic loop copies one element at a time: ppocrv3-det's 2× Resize of
// a [1, 96, 40, 40] tensor took 1.24 ms there against 0.21 ms in the
// float model. The transformer pushes its transposes through Resize but
// not through Reshape: a Reshape that keeps the shape ([0, 0, 0, 0]),
// written on the 8-bit input of the Resize's DequantizeLinear, makes it
// transpose the small input back to channels-first, and the Resize runs
// the fast loop on integers. An upsampling by 2^j (4, 8) is j such
// Resizes in a row, each on integers: with asymmetric coordinates and
// floor, ⌊i/2^j⌋ = ⌊⌊i/2^(j-1)⌋/2⌋. The values are unchanged.
type nearestPow2 struct {
	resize *onnxgraph.Node
	dq     *onnxgraph.Node // the DequantizeLinear the Resize reads
	steps  int             // j: the upsampling is by 2^j
}

// keepNearestChannelsFirst writes the Reshape in front of every nearest
// Resize by a power of 2 in m's main graph that ONNX Runtime runs on
// integers, splits the Resize into 2× steps, and returns the model, a
// note per Resize and no rewritten nodes (the Resize ran on integers
// before); m itself when there is none.
func keepNearestChannelsFirst(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var found []nearestPow2
	for _, n := range m.Graph.Nodes {
		if dq, steps := matchNearestPow2(m, n); dq != nil {
			found = append(found, nearestPow2{resize: n, dq: dq, steps: steps})
		}
	}
	if len(found) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	var inits []*tensor.Tensor
	shapeName, twiceName := uniqueIn(used, "keep_shape"), uniqueIn(used, "nearest_2x_scales")
	keep := tensor.New(tensor.Int64, 4) // zeros: every dimension as it is
	twice := tensor.FromFloat32([]float32{1, 1, 2, 2}, 4)
	inits = append(inits, keep, twice)
	for i, nm := range []string{shapeName, twiceName} {
		tp, err := tensor.ToProto(inits[i], nm)
		if err != nil {
			return nil, nil, nil, err
		}
		g.Initializer = append(g.Initializer, tp)
	}
	before := map[int][]*onnxpb.NodeProto{} // by node index
	after := map[int][]*onnxpb.NodeProto{}
	drop := map[int]bool{}
	var notes []string
	for _, f := range found {
		withMeta := func(p *onnxpb.NodeProto, from *onnxpb.NodeProto) *onnxpb.NodeProto {
			for _, kv := range from.GetMetadataProps() {
				p.MetadataProps = append(p.MetadataProps, proto.CloneOf(kv))
			}
			return p
		}
		old := g.Node[f.dq.Index]
		if soleConsumer(f.dq.Outputs[0]) == f.resize {
			drop[f.dq.Index] = true
		}
		x := f.resize.Inputs[0].Name
		kept := uniqueIn(used, old.Input[0]+"_channels_first")
		dqOut := uniqueIn(used, x+"_channels_first")
		before[f.resize.Index] = append(before[f.resize.Index],
			withMeta(&onnxpb.NodeProto{OpType: proto.String("Reshape"), Name: proto.String(uniqueIn(used, f.resize.Name+"_channels_first")),
				Input: []string{old.Input[0], shapeName}, Output: []string{kept}}, old),
			withMeta(&onnxpb.NodeProto{OpType: proto.String("DequantizeLinear"), Name: proto.String(uniqueIn(used, f.resize.Name+"_DequantizeLinear")),
				Input: append([]string{kept}, old.Input[1:]...), Output: []string{dqOut}, Attribute: proto.CloneOf(old).Attribute}, old))
		rp := g.Node[f.resize.Index]
		rp.Input[0] = dqOut
		note := fmt.Sprintf("%s: a Reshape keeping its shape before its DequantizeLinear keeps ONNX Runtime from running the 2× nearest upsampling channels-last, where it has no fast loop", f.resize)
		if f.steps > 1 {
			note = fmt.Sprintf("%s: written as %d 2× nearest Resizes on integers, with a Reshape keeping its shape before them that keeps ONNX Runtime from running them channels-last, where 2× upsampling has no fast loop", f.resize, f.steps)
			scalesAt := len(rp.Input) - 1
			if f.resize.Opset() >= 11 {
				scalesAt = 2
			}
			rp.Input[scalesAt] = twiceName
			y := rp.Output[0]
			prev := rp
			for s := 1; s < f.steps; s++ {
				step := fmt.Sprintf("%s_2x_%d", f.resize.Name, s)
				qOut, dOut := uniqueIn(used, step+"_quantized"), uniqueIn(used, step+"_input")
				prev.Output[0] = uniqueIn(used, step+"_QuantizeLinear_Input")
				next := proto.CloneOf(rp)
				next.Name = proto.String(uniqueIn(used, step))
				next.Input[0] = dOut
				next.Output = []string{y}
				after[f.resize.Index] = append(after[f.resize.Index],
					withMeta(&onnxpb.NodeProto{OpType: proto.String("QuantizeLinear"), Name: proto.String(uniqueIn(used, step+"_QuantizeLinear")),
						Input: append([]string{prev.Output[0]}, old.Input[1:]...), Output: []string{qOut}, Attribute: proto.CloneOf(old).Attribute}, old),
					withMeta(&onnxpb.NodeProto{OpType: proto.String("DequantizeLinear"), Name: proto.String(uniqueIn(used, step+"_DequantizeLinear")),
						Input: append([]string{qOut}, old.Input[1:]...), Output: []string{dOut}, Attribute: proto.CloneOf(old).Attribute}, old),
					next)
				prev = next
			}
		}
		notes = append(notes, note)
	}
	var nodes []*onnxpb.NodeProto
	for i, n := range g.Node {
		nodes = append(nodes, before[i]...)
		if !drop[i] {
			nodes = append(nodes, n)
		}
		nodes = append(nodes, after[i]...)
	}
	g.Node = nodes
	km, err := rewritten(m, out, "nearest Resize")
	if err != nil {
		return nil, nil, nil, err
	}
	return km, notes, nil, nil
}

// matchNearestPow2 returns the DequantizeLinear a 4-D Resize reads and j
// when ONNX Runtime runs the Resize on integers (a per-tensor 8-bit
// DequantizeLinear before it, QuantizeLinear nodes of the same scale and
// zero point after it) and it upsamples rows and columns by 2^j in the
// mode whose 2× steps take the fast loop channels-first; nil otherwise.
func matchNearestPow2(m *onnxgraph.Model, n *onnxgraph.Node) (*onnxgraph.Node, int) {
	if !defaultOp(n, "Resize") || len(n.Inputs) == 0 || len(n.Outputs) != 1 || n.Outputs[0] == nil || !nearest2xAttrs(n) {
		return nil, 0
	}
	scalesAt := 2
	if n.Opset() < 11 {
		scalesAt = 1
	}
	if len(n.Inputs) <= scalesAt || len(n.Inputs) > scalesAt+1 && n.Inputs[scalesAt+1] != nil {
		return nil, 0 // no scales, or sizes as well
	}
	sc := float32Const(m, n.Inputs[scalesAt])
	if len(sc) != 4 || sc[0] != 1 || sc[1] != 1 || sc[2] != sc[3] {
		return nil, 0
	}
	k := int(sc[2])
	if float32(k) != sc[2] || k < 2 || k&(k-1) != 0 {
		return nil, 0
	}
	steps := bits.TrailingZeros(uint(k))
	dq := n.Inputs[0].Producer
	if dq == nil || !activationDQ(dq) || n.Inputs[0].IsGraphOutput {
		return nil, 0
	}
	y := n.Outputs[0]
	if y.IsGraphOutput || len(y.Consumers) == 0 {
		return nil, 0
	}
	for _, q := range y.Consumers {
		if !defaultOp(q, "QuantizeLinear") || len(q.Inputs) < 3 || q.Inputs[0] != y || !sameQParams(m, dq, q) {
			return nil, 0
		}
	}
	return dq, steps
}

// nearest2xAttrs reports a nearest Resize whose attributes let ONNX
// Runtime take the 2× fast loop.
func nearest2xAttrs(n *onnxgraph.Node) bool {
	str := func(name, def string) string {
		if a := n.Attr(name); a != nil {
			return string(a.GetS())
		}
		return def
	}
	if str("mode", "nearest") != "nearest" {
		return false
	}
	if n.Opset() < 11 {
		return true
	}
	return str("coordinate_transformation_mode", "half_pixel") == "asymmetric" && str("nearest_mode", "round_prefer_floor") == "floor"
}

// sameQParams reports whether two per-tensor Q/DQ nodes have the same
// scale and zero point (the values, not the names).
func sameQParams(m *onnxgraph.Model, a, b *onnxgraph.Node) bool {
	if !perTensorFloatScale(a) || !perTensorFloatScale(b) || a.Inputs[2] == nil || b.Inputs[2] == nil || a.Inputs[2].DType() != b.Inputs[2].DType() {
		return false
	}
	if scalarOf(m, a.Inputs[1]) != scalarOf(m, b.Inputs[1]) {
		return false
	}
	if !a.Inputs[2].IsConst() || !b.Inputs[2].IsConst() {
		return false
	}
	za, err := tensor.FromProto(a.Inputs[2].Const, m)
	if err != nil {
		return false
	}
	zb, err := tensor.FromProto(b.Inputs[2].Const, m)
	if err != nil {
		return false
	}
	fa, errA := za.AsFloat32()
	fb, errB := zb.AsFloat32()
	return errA == nil && errB == nil && slices.Equal(fa, fb)
}

// float32Const reads a float32 constant, nil when v is none.
func float32Const(m *onnxgraph.Model, v *onnxgraph.Value) []float32 {
	if v == nil || !v.IsConst() || v.DType() != tensor.Float {
		return nil
	}
	t, err := tensor.FromProto(v.Const, m)
	if err != nil {
		return nil
	}
	return t.Data.([]float32)
}

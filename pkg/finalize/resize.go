package finalize

import (
	"fmt"
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
// the fast loop on integers. The values are unchanged.
type nearest2x struct {
	resize *onnxgraph.Node
	dq     *onnxgraph.Node // the DequantizeLinear the Resize reads
}

// keepNearest2xChannelsFirst writes the Reshape in front of every 2×
// nearest Resize of m's main graph that ONNX Runtime runs on integers,
// and returns the model, a note per Resize and no rewritten nodes (the
// Resize ran on integers before); m itself when there is none.
func keepNearest2xChannelsFirst(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var found []nearest2x
	for _, n := range m.Graph.Nodes {
		if dq := matchNearest2x(m, n); dq != nil {
			found = append(found, nearest2x{resize: n, dq: dq})
		}
	}
	if len(found) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	shapeName := uniqueIn(used, "keep_shape")
	keep := tensor.New(tensor.Int64, 4) // zeros: every dimension as it is
	tp, err := tensor.ToProto(keep, shapeName)
	if err != nil {
		return nil, nil, nil, err
	}
	g.Initializer = append(g.Initializer, tp)
	before := map[int][]*onnxpb.NodeProto{}
	var notes []string
	for _, f := range found {
		dq := g.Node[f.dq.Index]
		if soleConsumer(f.dq.Outputs[0]) != f.resize {
			// Other nodes read the DequantizeLinear too: the Resize gets
			// one of its own.
			dq = proto.CloneOf(dq)
			dq.Name = proto.String(uniqueIn(used, f.resize.Name+"_DequantizeLinear"))
			dq.Output = []string{uniqueIn(used, f.resize.Inputs[0].Name+"_channels_first_DequantizeLinear_Output")}
			g.Node[f.resize.Index].Input[0] = dq.Output[0]
			before[f.resize.Index] = append(before[f.resize.Index], dq)
		}
		in := dq.Input[0]
		kept := uniqueIn(used, in+"_channels_first")
		r := &onnxpb.NodeProto{OpType: proto.String("Reshape"), Name: proto.String(uniqueIn(used, f.resize.Name+"_channels_first")),
			Input: []string{in, shapeName}, Output: []string{kept}}
		for _, kv := range dq.GetMetadataProps() {
			r.MetadataProps = append(r.MetadataProps, proto.CloneOf(kv))
		}
		dq.Input[0] = kept
		at := f.dq.Index
		if dq != g.Node[f.dq.Index] {
			at = f.resize.Index
			before[at] = slices.Insert(before[at], len(before[at])-1, r)
		} else {
			before[at] = append(before[at], r)
		}
		notes = append(notes, fmt.Sprintf("%s: a Reshape keeping its shape before its DequantizeLinear keeps ONNX Runtime from running the 2× nearest upsampling channels-last, where it has no fast loop", f.resize))
	}
	var nodes []*onnxpb.NodeProto
	for i, n := range g.Node {
		nodes = append(nodes, before[i]...)
		nodes = append(nodes, n)
	}
	g.Node = nodes
	km, err := rewritten(m, out, "nearest 2× Resize")
	if err != nil {
		return nil, nil, nil, err
	}
	return km, notes, nil, nil
}

// matchNearest2x returns the DequantizeLinear a 4-D Resize reads when ONNX
// Runtime runs the Resize on integers (a per-tensor 8-bit
// DequantizeLinear before it, QuantizeLinear nodes of
// the same scale and zero point after it) and would take the fast loop
// channels-first; nil otherwise.
func matchNearest2x(m *onnxgraph.Model, n *onnxgraph.Node) *onnxgraph.Node {
	if !defaultOp(n, "Resize") || len(n.Inputs) == 0 || len(n.Outputs) != 1 || n.Outputs[0] == nil || !nearest2xAttrs(n) {
		return nil
	}
	scalesAt := 2
	if n.Opset() < 11 {
		scalesAt = 1
	}
	if len(n.Inputs) <= scalesAt || !slices.Equal(float32Const(m, n.Inputs[scalesAt]), []float32{1, 1, 2, 2}) {
		return nil
	}
	if len(n.Inputs) > scalesAt+1 && n.Inputs[scalesAt+1] != nil {
		return nil // sizes given as well
	}
	dq := n.Inputs[0].Producer
	if dq == nil || !activationDQ(dq) || n.Inputs[0].IsGraphOutput {
		return nil
	}
	y := n.Outputs[0]
	if y.IsGraphOutput || len(y.Consumers) == 0 {
		return nil
	}
	for _, q := range y.Consumers {
		if !defaultOp(q, "QuantizeLinear") || len(q.Inputs) < 3 || q.Inputs[0] != y || !sameQParams(m, dq, q) {
			return nil
		}
	}
	return dq
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

package finalize

import (
	"errors"
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
// not through Reshape, and it removes a Reshape that provably keeps the
// shape. So the Resize is written on channel planes: a Reshape of its
// 8-bit input [N, C, H, W] to [N·C, 1, H, W] before its
// DequantizeLinear, and one back to [N, C, kH, kW] after its
// QuantizeLinear; ONNX Runtime then transposes the small input back to
// channels-first once and runs the fast loop on integers. An upsampling
// by k = 2^j (4, 8) is j such Resizes in a row, each on integers: with
// asymmetric coordinates and floor, ⌊i/2^j⌋ = ⌊⌊i/2^(j-1)⌋/2⌋. The values
// are unchanged.
type nearestPow2 struct {
	resize *onnxgraph.Node
	dq     *onnxgraph.Node // the DequantizeLinear the Resize reads
	q      *onnxgraph.Node // the QuantizeLinear that reads the Resize
	steps  int             // j: the upsampling is by 2^j
}

// keepNearestChannelsFirst writes every nearest Resize by a power of 2 in
// m's main graph that ONNX Runtime runs on integers on channel planes, in
// 2× steps, and returns the model, a note per Resize and no rewritten
// nodes (the Resize ran on integers before); m itself when there is none.
func keepNearestChannelsFirst(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var found []nearestPow2
	for _, n := range m.Graph.Nodes {
		if dq, q, steps := matchNearestPow2(m, n); dq != nil {
			found = append(found, nearestPow2{resize: n, dq: dq, q: q, steps: steps})
		}
	}
	if len(found) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	addInit := func(t *tensor.Tensor, base string) (string, error) { return addInitializer(g, used, t, base) }
	// [N·C, 1, H, W]: 0 copies the input's dimension, -1 takes the rest.
	planes, err := addInit(tensor.FromInt64([]int64{-1, 1, 0, 0}, 4), "channel_planes")
	if err != nil {
		return nil, nil, nil, err
	}
	twice, err := addInit(tensor.FromFloat32([]float32{1, 1, 2, 2}, 4), "nearest_2x_scales")
	if err != nil {
		return nil, nil, nil, err
	}
	grown := map[int]string{}               // by k: the factors of the shape back
	before := map[int][]*onnxpb.NodeProto{} // by node index
	after := map[int][]*onnxpb.NodeProto{}
	drop := map[int]bool{}
	var notes []string
	for _, f := range found {
		old := g.Node[f.dq.Index]
		node := func(op, base string, in, outs []string, attrs []*onnxpb.AttributeProto) *onnxpb.NodeProto {
			p := &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(uniqueIn(used, base)), Input: in, Output: outs, Attribute: attrs}
			for _, kv := range old.GetMetadataProps() {
				p.MetadataProps = append(p.MetadataProps, proto.CloneOf(kv))
			}
			return p
		}
		if soleConsumer(f.dq.Outputs[0]) == f.resize {
			drop[f.dq.Index] = true
		}
		xq := old.Input[0]
		flat := uniqueIn(used, xq+"_channel_planes")
		dqOut := uniqueIn(used, f.resize.Inputs[0].Name+"_channel_planes")
		before[f.resize.Index] = append(before[f.resize.Index],
			node("Reshape", f.resize.Name+"_channel_planes", []string{xq, planes}, []string{flat}, nil),
			node("DequantizeLinear", f.resize.Name+"_DequantizeLinear", append([]string{flat}, old.Input[1:]...), []string{dqOut}, proto.CloneOf(old).Attribute))
		rp := g.Node[f.resize.Index]
		rp.Input[0] = dqOut
		scalesAt := len(rp.Input) - 1
		if f.resize.Opset() >= 11 {
			scalesAt = 2
		}
		rp.Input[scalesAt] = twice
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
				node("QuantizeLinear", step+"_QuantizeLinear", append([]string{prev.Output[0]}, old.Input[1:]...), []string{qOut}, proto.CloneOf(old).Attribute),
				node("DequantizeLinear", step+"_DequantizeLinear", append([]string{qOut}, old.Input[1:]...), []string{dOut}, proto.CloneOf(old).Attribute),
				next)
			prev = next
		}
		// Back to [N, C, kH, kW]: the input's shape times {1, 1, k, k}.
		k := 1 << f.steps
		if grown[k] == "" {
			if grown[k], err = addInit(tensor.FromInt64([]int64{1, 1, int64(k), int64(k)}, 4), fmt.Sprintf("nearest_%dx_growth", k)); err != nil {
				return nil, nil, nil, err
			}
		}
		qp := g.Node[f.q.Index]
		yq := qp.Output[0]
		qp.Output[0] = uniqueIn(used, yq+"_channel_planes")
		inShape, outShape := uniqueIn(used, xq+"_shape"), uniqueIn(used, yq+"_shape")
		after[f.q.Index] = append(after[f.q.Index],
			node("Shape", f.resize.Name+"_input_shape", []string{xq}, []string{inShape}, nil),
			node("Mul", f.resize.Name+"_output_shape", []string{inShape, grown[k]}, []string{outShape}, nil),
			node("Reshape", f.resize.Name+"_channels", []string{qp.Output[0], outShape}, []string{yq}, nil))
		what := "the 2× nearest upsampling"
		if f.steps > 1 {
			what = fmt.Sprintf("the %d× nearest upsampling, as %d 2× Resizes on integers,", k, f.steps)
		}
		notes = append(notes, fmt.Sprintf("%s: %s runs on channel planes (Reshape to [N·C, 1, H, W] and back), which keeps ONNX Runtime from running it channels-last, where it has no fast loop", f.resize, what))
	}
	spliceNodes(g, before, drop, after)
	km, err := rewritten(m, out, "nearest Resize")
	if err != nil {
		return nil, nil, nil, err
	}
	return km, notes, nil, nil
}

// matchNearestPow2 returns the DequantizeLinear a 4-D Resize reads, the
// QuantizeLinear that reads it and j when ONNX Runtime runs the Resize on
// integers (a per-tensor 8-bit DequantizeLinear before it, one
// QuantizeLinear of the same scale and zero point after it) and it
// upsamples rows and columns by 2^j in the mode whose 2× steps take the
// fast loop channels-first; nils otherwise.
func matchNearestPow2(m *onnxgraph.Model, n *onnxgraph.Node) (dq, q *onnxgraph.Node, steps int) {
	if !defaultOp(n, "Resize") || len(n.Inputs) == 0 || len(n.Outputs) != 1 || n.Outputs[0] == nil || !nearest2xAttrs(n) {
		return nil, nil, 0
	}
	scalesAt := 2
	if n.Opset() < 11 {
		scalesAt = 1
	}
	if len(n.Inputs) <= scalesAt || len(n.Inputs) > scalesAt+1 && n.Inputs[scalesAt+1] != nil {
		return nil, nil, 0 // no scales, or sizes as well
	}
	sc := float32Const(m, n.Inputs[scalesAt])
	if len(sc) != 4 || sc[0] != 1 || sc[1] != 1 || sc[2] != sc[3] {
		return nil, nil, 0
	}
	k := int(sc[2])
	if float32(k) != sc[2] || k < 2 || k&(k-1) != 0 {
		return nil, nil, 0
	}
	steps = bits.TrailingZeros(uint(k))
	dq = n.Inputs[0].Producer
	if dq == nil || !activationDQ(dq) || n.Inputs[0].IsGraphOutput {
		return nil, nil, 0
	}
	q = soleConsumer(n.Outputs[0])
	if q == nil || !defaultOp(q, "QuantizeLinear") || len(q.Inputs) < 3 || q.Inputs[0] != n.Outputs[0] || !sameQParams(m, dq, q) {
		return nil, nil, 0
	}
	return dq, q, steps
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
	_, fa, errA := constAsFloat32(m, a.Inputs[2])
	_, fb, errB := constAsFloat32(m, b.Inputs[2])
	return errA == nil && errB == nil && slices.Equal(fa, fb)
}

// constAsFloat32 reads a constant of any numeric type and its values as
// float32 (which holds 8- and 16-bit integer codes exactly).
func constAsFloat32(m *onnxgraph.Model, v *onnxgraph.Value) (*tensor.Tensor, []float32, error) {
	if v == nil || !v.IsConst() {
		return nil, nil, errors.New("not a constant")
	}
	t, err := tensor.FromProto(v.Const, m)
	if err != nil {
		return nil, nil, err
	}
	f, err := t.AsFloat32()
	return t, f, err
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

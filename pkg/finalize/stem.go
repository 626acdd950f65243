package finalize

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"google.golang.org/protobuf/proto"
)

// ONNX Runtime's CPU provider takes about twice as long for an 8-bit 3×3
// convolution of a 3-channel image (the stem of most CNNs) as for one of
// 4 channels: a [1, 3, 224, 224] stem to 24 channels with stride 2 took
// 0.22 ms as QLinearConv against 0.12 ms with a fourth channel, by ONNX
// Runtime 1.23's profile (one thread, median of 60 runs). So the image's
// integers are padded with a channel of zero points (Pad on integers: the
// value 0) and the weight gets a channel of its zero points (weights of
// 0): the products are the same, and so are the values.
type paddedStem struct {
	conv, dq, wdq *onnxgraph.Node
}

// padThreeChannelStems writes every 8-bit 3×3 Conv of a 3-channel input
// in m's main graph that ONNX Runtime runs on integers with a fourth,
// zero channel, and returns the model and a note per Conv (no nodes are
// rewritten: they ran on integers before); m itself when there is none.
func padThreeChannelStems(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var found []paddedStem
	for _, n := range m.Graph.Nodes {
		if dq, wdq := matchThreeChannelStem(m, n); dq != nil {
			found = append(found, paddedStem{conv: n, dq: dq, wdq: wdq})
		}
	}
	if len(found) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	addInit := func(t *tensor.Tensor, base string) (string, error) { return addInitializer(g, used, t, base) }
	// [N, C, H, W] begins, then ends: one channel after the last.
	pads, err := addInit(tensor.FromInt64([]int64{0, 0, 0, 0, 0, 1, 0, 0}, 8), "fourth_channel_pads")
	if err != nil {
		return nil, nil, nil, err
	}
	before := map[int][]*onnxpb.NodeProto{}
	drop := map[int]bool{}
	var notes []string
	for _, f := range found {
		clone := func(src *onnxgraph.Node, base string, input0 string) *onnxpb.NodeProto {
			p := proto.CloneOf(g.Node[src.Index])
			p.Name = proto.String(uniqueIn(used, base))
			p.Input[0] = input0
			p.Output = []string{uniqueIn(used, p.GetOutput()[0]+"_4ch")}
			return p
		}
		// The image's integers with a channel of zero points.
		xq := g.Node[f.dq.Index].Input[0]
		padIn := []string{xq, pads}
		if len(f.dq.Inputs) > 2 && f.dq.Inputs[2] != nil {
			padIn = append(padIn, f.dq.Inputs[2].Name)
		}
		padded := uniqueIn(used, xq+"_4ch")
		pad := &onnxpb.NodeProto{OpType: proto.String("Pad"), Name: proto.String(uniqueIn(used, f.conv.Name+"_fourth_channel")), Input: padIn, Output: []string{padded}}
		pad.MetadataProps = proto.CloneOf(g.Node[f.dq.Index]).MetadataProps
		dq := clone(f.dq, f.dq.Name+"_4ch", padded)
		// The weight with a channel of its zero points.
		w4, err := fourthChannel(m, f.wdq)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", f.conv, err)
		}
		wName, err := addInit(w4, f.wdq.Inputs[0].Name+"_4ch")
		if err != nil {
			return nil, nil, nil, err
		}
		wdq := clone(f.wdq, f.wdq.Name+"_4ch", wName)
		before[f.conv.Index] = append(before[f.conv.Index], pad, dq, wdq)
		c := g.Node[f.conv.Index]
		c.Input[0], c.Input[1] = dq.Output[0], wdq.Output[0]
		for _, old := range []*onnxgraph.Node{f.dq, f.wdq} {
			if soleConsumer(old.Outputs[0]) == f.conv {
				drop[old.Index] = true
			}
		}
		notes = append(notes, fmt.Sprintf("%s: its 3-channel input is padded to 4 channels of zeros (Pad on integers, a zero weight channel), which ONNX Runtime's integer 3×3 convolution runs about twice as fast", f.conv))
	}
	spliceNodes(g, before, drop, nil)
	km, err := rewritten(m, out, "3-channel stem")
	if err != nil {
		return nil, nil, nil, err
	}
	return km, notes, nil, nil
}

// matchThreeChannelStem returns the DequantizeLinear nodes of a Conv's
// input and weight when ONNX Runtime runs the Conv on integers (a
// per-tensor 8-bit activation, an 8-bit constant weight, a QuantizeLinear
// after it, directly or through a Relu or Clip) and the Conv is a plain 3×3
// convolution of 3 channels in opset 11 or later (Pad takes its pads as an
// input); nils otherwise.
func matchThreeChannelStem(m *onnxgraph.Model, n *onnxgraph.Node) (dq, wdq *onnxgraph.Node) {
	if !defaultOp(n, "Conv") || n.Opset() < 11 || len(n.Inputs) < 2 || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil, nil
	}
	if a := n.Attr("group"); a != nil && a.GetI() != 1 {
		return nil, nil
	}
	dq, wdq = n.Inputs[0].Producer, n.Inputs[1].Producer
	if dq == nil || !activationDQ(dq) || wdq == nil || !defaultOp(wdq, "DequantizeLinear") || len(wdq.Inputs) < 2 {
		return nil, nil
	}
	w := wdq.Inputs[0]
	if w == nil || !w.IsConst() || (w.DType() != tensor.Int8 && w.DType() != tensor.Uint8) {
		return nil, nil
	}
	dims := w.Const.GetDims()
	if len(dims) != 4 || dims[1] != 3 || dims[2] != 3 || dims[3] != 3 {
		return nil, nil
	}
	if s := wdq.Inputs[1]; s == nil || !s.IsConst() {
		return nil, nil
	} else if len(s.Const.GetDims()) != 0 {
		if a := wdq.Attr("axis"); a == nil || a.GetI() != 0 {
			return nil, nil // per channel, but not of the output channels
		}
	}
	next := soleConsumer(n.Outputs[0])
	if next != nil && (defaultOp(next, "Relu") || defaultOp(next, "Clip")) {
		next = soleConsumer(next.Outputs[0])
	}
	if next == nil || !defaultOp(next, "QuantizeLinear") {
		return nil, nil
	}
	return dq, wdq
}

// fourthChannel is the weight a DequantizeLinear reads, [M, 3, kH, kW],
// with a fourth input channel of each output channel's zero point, so
// that it dequantizes to 0.
func fourthChannel(m *onnxgraph.Model, wdq *onnxgraph.Node) (*tensor.Tensor, error) {
	w, err := tensor.FromProto(wdq.Inputs[0].Const, m)
	if err != nil {
		return nil, err
	}
	zp := make([]int32, w.Shape[0])
	if len(wdq.Inputs) > 2 && wdq.Inputs[2] != nil {
		z, err := tensor.FromProto(wdq.Inputs[2].Const, m)
		if err != nil {
			return nil, err
		}
		f, err := z.AsFloat32()
		if err != nil {
			return nil, err
		}
		for i := range zp {
			zp[i] = int32(f[min(i, len(f)-1)])
		}
	}
	mOut, k := w.Shape[0], w.Shape[2]*w.Shape[3]
	out := tensor.New(w.DType, mOut, 4, w.Shape[2], w.Shape[3])
	for o := range mOut {
		for c := range 4 {
			for i := range k {
				at := (o*4+c)*k + i
				if c < 3 {
					setInt8(out, at, getInt8(w, (o*3+c)*k+i))
				} else {
					setInt8(out, at, zp[o])
				}
			}
		}
	}
	return out, nil
}

// getInt8 and setInt8 read and write element i of an int8 or uint8
// tensor as an int32.
func getInt8(t *tensor.Tensor, i int) int32 {
	if d, ok := t.Data.([]int8); ok {
		return int32(d[i])
	}
	return int32(t.Data.([]uint8)[i])
}

func setInt8(t *tensor.Tensor, i int, v int32) {
	if d, ok := t.Data.([]int8); ok {
		d[i] = int8(v)
		return
	}
	t.Data.([]uint8)[i] = uint8(v)
}

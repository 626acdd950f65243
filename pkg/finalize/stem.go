package finalize

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"google.golang.org/protobuf/proto"
)

// ONNX Runtime's CPU provider takes about twice as long for an 8-bit 3×3
// convolution of 1, 2 or 3 input channels (an image: the stem of most
// CNNs) as for one of 4. By its profile (ONNX Runtime 1.23, one thread,
// median of 60 runs), a [1, 3, 224, 224] stem to 24 channels with stride 2
// took 0.22 ms as QLinearConv against 0.12 ms with a fourth channel (1 and
// 2 channels: 0.21 ms), and 0.88 against 0.45 ms with stride 1. Larger
// kernels gain little or lose: a 7×7 stem 0.49 against 0.51 ms, and a 5×5
// one of 1 channel made a 28×28 MNIST model 0.90× as fast. So a 3×3
// stem's integers are padded to 4 channels with their zero point (Pad on
// integers: the value 0) and the weight gets channels of its zero points
// (weights of 0): the products are the same, and so are the values.
type paddedStem struct {
	conv, dq, wdq *onnxgraph.Node
	channels      int // the input's, 1 to 3
}

// stemChannels is the input channel count a narrow stem is padded to.
const stemChannels = 4

// padStemChannels writes every 8-bit 3×3 Conv of an input of fewer
// than stemChannels channels in m's main graph that ONNX Runtime runs on
// integers with stemChannels channels, the new ones zero, and returns the
// model and a note per Conv (no nodes are rewritten: they ran on integers
// before); m itself when there is none.
func padStemChannels(m *onnxgraph.Model) (*onnxgraph.Model, []string, []string, error) {
	var found []paddedStem
	for _, n := range m.Graph.Nodes {
		if dq, wdq, c := matchNarrowStem(m, n); dq != nil {
			found = append(found, paddedStem{conv: n, dq: dq, wdq: wdq, channels: c})
		}
	}
	if len(found) == 0 {
		return m, nil, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	used := usedNames(g)
	pads := map[int]string{} // by input channels
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
		if pads[f.channels] == "" {
			// [N, C, H, W] begins, then ends: channels after the last.
			p := tensor.FromInt64([]int64{0, 0, 0, 0, 0, int64(stemChannels - f.channels), 0, 0}, 8)
			name, err := addInitializer(g, used, p, fmt.Sprintf("stem_pads_%dto%d", f.channels, stemChannels))
			if err != nil {
				return nil, nil, nil, err
			}
			pads[f.channels] = name
		}
		// The image's integers with channels of zero points.
		xq := g.Node[f.dq.Index].Input[0]
		padIn := []string{xq, pads[f.channels]}
		if len(f.dq.Inputs) > 2 && f.dq.Inputs[2] != nil {
			padIn = append(padIn, f.dq.Inputs[2].Name)
		}
		padded := uniqueIn(used, xq+"_4ch")
		pad := &onnxpb.NodeProto{OpType: proto.String("Pad"), Name: proto.String(uniqueIn(used, f.conv.Name+"_stem_channels")), Input: padIn, Output: []string{padded}}
		pad.MetadataProps = proto.CloneOf(g.Node[f.dq.Index]).MetadataProps
		dq := clone(f.dq, f.dq.Name+"_4ch", padded)
		// The weight with input channels of its zero points.
		w, err := zeroChannels(m, f.wdq, stemChannels)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", f.conv, err)
		}
		wName, err := addInitializer(g, used, w, f.wdq.Inputs[0].Name+"_4ch")
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
		notes = append(notes, fmt.Sprintf("%s: its %d-channel input is padded to %d channels of zeros (Pad on integers, zero weight channels), which ONNX Runtime's integer convolution runs faster", f.conv, f.channels, stemChannels))
	}
	spliceNodes(g, before, drop, nil)
	km, err := rewritten(m, out, "narrow stem")
	if err != nil {
		return nil, nil, nil, err
	}
	return km, notes, nil, nil
}

// matchNarrowStem returns the DequantizeLinear nodes of a Conv's input and
// weight, and the input's channel count, when ONNX Runtime runs the Conv
// on integers (a per-tensor 8-bit activation, an 8-bit constant weight
// per tensor or per output channel, a QuantizeLinear after it, directly
// or through a Relu or Clip) and the Conv is a plain 3×3 convolution of
// fewer than stemChannels channels in opset 11 or later
// (Pad takes its pads as an input); nils otherwise.
func matchNarrowStem(m *onnxgraph.Model, n *onnxgraph.Node) (dq, wdq *onnxgraph.Node, channels int) {
	if !defaultOp(n, "Conv") || n.Opset() < 11 || len(n.Inputs) < 2 || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil, nil, 0
	}
	if a := n.Attr("group"); a != nil && a.GetI() != 1 {
		return nil, nil, 0
	}
	if n.Inputs[0] == nil || n.Inputs[1] == nil {
		return nil, nil, 0
	}
	dq, wdq = n.Inputs[0].Producer, n.Inputs[1].Producer
	if dq == nil || !activationDQ(dq) || wdq == nil || !defaultOp(wdq, "DequantizeLinear") || len(wdq.Inputs) < 2 {
		return nil, nil, 0
	}
	w := wdq.Inputs[0]
	if w == nil || !w.IsConst() || (w.DType() != tensor.Int8 && w.DType() != tensor.Uint8) {
		return nil, nil, 0
	}
	if len(wdq.Inputs) > 2 && wdq.Inputs[2] != nil && !wdq.Inputs[2].IsConst() {
		return nil, nil, 0
	}
	dims := w.Const.GetDims()
	if len(dims) != 4 || dims[1] < 1 || dims[1] >= stemChannels || dims[2] != 3 || dims[3] != 3 {
		return nil, nil, 0
	}
	if s := wdq.Inputs[1]; s == nil || !s.IsConst() {
		return nil, nil, 0
	} else if len(s.Const.GetDims()) != 0 {
		if a := wdq.Attr("axis"); a == nil || a.GetI() != 0 {
			return nil, nil, 0 // per channel, but not of the output channels
		}
		if b := wdq.Attr("block_size"); b != nil && b.GetI() != 0 {
			return nil, nil, 0 // per block
		}
	}
	next := soleConsumer(n.Outputs[0])
	if next != nil && (defaultOp(next, "Relu") || defaultOp(next, "Clip")) {
		next = soleConsumer(next.Outputs[0])
	}
	if next == nil || !defaultOp(next, "QuantizeLinear") {
		return nil, nil, 0
	}
	return dq, wdq, int(dims[1])
}

// zeroChannels is the weight a DequantizeLinear reads, [M, C, kH, kW], with
// input channels C to to-1 holding each output channel's zero point, so
// that they dequantize to 0. The 8-bit codes go through float32, which
// holds them exactly.
func zeroChannels(m *onnxgraph.Model, wdq *onnxgraph.Node, to int) (*tensor.Tensor, error) {
	w, codes, err := constAsFloat32(m, wdq.Inputs[0])
	if err != nil {
		return nil, err
	}
	zp := make([]float32, w.Shape[0])
	if len(wdq.Inputs) > 2 && wdq.Inputs[2] != nil {
		_, f, err := constAsFloat32(m, wdq.Inputs[2])
		if err != nil {
			return nil, err
		}
		for i := range zp {
			zp[i] = f[min(i, len(f)-1)]
		}
	}
	outCh, inCh, k := w.Shape[0], w.Shape[1], w.Shape[2]*w.Shape[3]
	out := make([]float32, outCh*to*k)
	for o := range outCh {
		for c := range to {
			for i := range k {
				v := zp[o]
				if c < inCh {
					v = codes[(o*inCh+c)*k+i]
				}
				out[(o*to+c)*k+i] = v
			}
		}
	}
	return tensor.Cast(tensor.FromFloat32(out, outCh, to, w.Shape[2], w.Shape[3]), w.DType)
}

package config

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// WeightPalette is what a kmeans_palettization_config decides for one
// weight of a Conv, ConvTranspose, Gemm, MatMul or embedding Gather.
type WeightPalette struct {
	Node  *onnxgraph.Node
	Input int
	Value string
	Shape []int
	// Palette is the palettization, nil when the weight stays float;
	// Reason then says why.
	Palette *Palettization
	Reason  string
	// Axis is channel_axis as an axis of the ONNX weight; ScaleAxis is the
	// output-channel axis the per-channel scale runs along; InputAxis is
	// the axis that meets the input's channels (Conv's input channels, the
	// reduction axis of Gemm and MatMul), -1 for an embedding table.
	Axis, ScaleAxis, InputAxis int
	// ActivationAxis is the channel axis of the node's input activation
	// that InputAxis meets (negative counts from the end); Groups is a
	// Conv's group count (its weight covers Cin/Groups input channels;
	// a ConvTranspose weight's input axis covers all of them).
	ActivationAxis, Groups int
	// Rule locates the config entry that decided.
	Rule Rule
}

// PaletteResolution is a kmeans_palettization_config applied to a graph.
type PaletteResolution struct {
	// Weights in the nodes' topological order, one per weight and node.
	Weights []*WeightPalette
	// Warnings are config keys that match nothing in the model.
	Warnings []*Diagnostic
}

// Palettized returns the weights that get a LUT.
func (r *PaletteResolution) Palettized() []*WeightPalette {
	var out []*WeightPalette
	for _, w := range r.Weights {
		if w.Palette != nil {
			out = append(out, w)
		}
	}
	return out
}

// paletteWeightInput is the input of n that palettization replaces, or -1.
func paletteWeightInput(n *onnxgraph.Node) int {
	if n.Domain != "" {
		return -1
	}
	switch n.OpType {
	case "Conv", "ConvTranspose", "Gemm", "MatMul":
		return 1
	case "Gather":
		return 0
	}
	return -1
}

// ResolvePalettization applies a kmeans_palettization_config to the weights
// of g with the precedence of Resolve (the same module and op matching):
// each weight takes the op config that applies to its node. A weight
// shared by several nodes takes the first node's (topological order).
func ResolvePalettization(cfg *QuantizerConfig, g *onnxgraph.Graph) (*PaletteResolution, error) {
	res, err := Resolve(cfg, g)
	if err != nil {
		return nil, err
	}
	out := &PaletteResolution{Warnings: res.Warnings}
	claimed := map[string]*onnxgraph.Node{}
	for _, nr := range res.Nodes {
		n := nr.Node
		i := paletteWeightInput(n)
		if i < 0 || i >= len(n.Inputs) || n.Inputs[i] == nil || !n.Inputs[i].IsConst() {
			continue
		}
		v := n.Inputs[i]
		w := &WeightPalette{Node: n, Input: i, Value: v.Name, Rule: nr.OpRule}
		for _, d := range v.Const.GetDims() {
			w.Shape = append(w.Shape, int(d))
		}
		out.Weights = append(out.Weights, w)
		var p *Palettization
		if nr.Op != nil {
			p = nr.Op.Palette
		}
		numel := 1
		for _, d := range w.Shape {
			numel *= d
		}
		switch dt := v.DType(); {
		case p == nil:
			w.Reason = "palettization config is null here"
		case dt != tensor.Float && dt != tensor.Float16 && dt != tensor.BFloat16:
			w.Reason = fmt.Sprintf("not a float tensor (%s)", dt)
		case claimed[v.Name] != nil:
			w.Reason = fmt.Sprintf("shared with %s, which palettizes it", claimed[v.Name])
		case len(w.Shape) < 2:
			w.Reason = fmt.Sprintf("rank %d: only matrices and convolution kernels are palettized", len(w.Shape))
		case numel <= p.WeightThreshold:
			w.Reason = fmt.Sprintf("%d elements, not above weight_threshold %d", numel, p.WeightThreshold)
		default:
			w.ScaleAxis, _ = defaultAxis(n, i, len(w.Shape), spec.PerChannel)
			w.Axis, w.InputAxis, w.Groups = w.ScaleAxis, -1, 1
			if n.OpType != "Gather" {
				w.InputAxis, _ = defaultAxis(n, i, len(w.Shape), spec.PerBlock)
				w.ActivationAxis = activationChannelAxis(n)
			}
			if a := n.Attr("group"); n.OpType == "Conv" && a != nil && a.GetI() > 1 {
				w.Groups = int(a.GetI())
			}
			if p.ChannelAxis == 1 {
				w.Axis, _ = defaultAxis(n, i, len(w.Shape), spec.PerBlock)
			}
			if c := w.Shape[w.Axis]; c%p.ClusterDim != 0 {
				w.Reason = fmt.Sprintf("%d channels along axis %d are not a multiple of cluster_dim %d", c, w.Axis, p.ClusterDim)
				break
			}
			w.Palette = p
			claimed[v.Name] = n
		}
	}
	return out, nil
}

// activationChannelAxis is the axis of a Conv/ConvTranspose/Gemm/MatMul's
// input 0 that the weight's input axis reduces over: channels (1) for
// convolutions, K for Gemm (0 under transA) and the last axis for MatMul.
func activationChannelAxis(n *onnxgraph.Node) int {
	switch n.OpType {
	case "Conv", "ConvTranspose":
		return 1
	case "Gemm":
		if a := n.Attr("transA"); a != nil && a.GetI() != 0 {
			return 0
		}
		return 1
	}
	return -1
}

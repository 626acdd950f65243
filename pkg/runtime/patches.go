package runtime

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// ConvPatches returns the patch matrix of x, the input [N, C, spatial...]
// of Conv node n whose weight has the given shape [M, C/group, k...]: for
// each image, row c·ks + kp is input channel c read at kernel position kp
// (zero in the padding) at every output position, shape [N, C·ks, out...].
// Channel c of group g is row g·(C/group)·ks + (c mod C/group)·ks + kp,
// so a group's rows are contiguous: the layer's output at every position
// is each group's weight rows times its rows of the patch. It is the
// column matrix the engine's convolution multiplies, with the node's own
// strides, dilations, pads and auto_pad.
func ConvPatches(n *onnxgraph.Node, x *tensor.Tensor, weightShape []int, threads int) (*tensor.Tensor, error) {
	if n.OpType != "Conv" {
		return nil, fmt.Errorf("%s: patches of a %s", n, n.OpType)
	}
	a, err := readConvAttrs(&builder{n: n, opset: n.Opset()})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n, err)
	}
	xs, err := x.AsFloat32()
	if err != nil {
		return nil, fmt.Errorf("%s: input: %w", n, err)
	}
	if len(x.Shape) < 3 || len(weightShape) != len(x.Shape) {
		return nil, fmt.Errorf("%s: input %v and weight %v do not make a convolution", n, x.Shape, weightShape)
	}
	batch, c := x.Shape[0], x.Shape[1]
	if c != weightShape[1]*a.group {
		return nil, fmt.Errorf("%s: input of %d channels for weight %v in %d groups", n, c, weightShape, a.group)
	}
	g, _, err := a.geometry(x.Shape[2:], weightShape[2:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n, err)
	}
	inSize, ks, outSize := g.InSize(), g.KernelSize(), g.OutSize()
	out := tensor.New(tensor.Float, append([]int{batch, c * ks}, g.Out...)...)
	col := out.Float32s()
	for i := range batch {
		kernels.Im2colParallel(threads, g, c, xs[i*c*inSize:(i+1)*c*inSize], col[i*c*ks*outSize:(i+1)*c*ks*outSize])
	}
	return out, nil
}

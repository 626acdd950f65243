package passes

import (
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestPerBlockConvLayout: a per-block weight whose block covers every
// input channel is quantized per output channel (coreai-opt's block spans
// the kernel), not with one ONNX block per kernel position; a wider Conv
// keeps ONNX blocks along the input channels.
func TestPerBlockConvLayout(t *testing.T) {
	b := testmodels.New("convs", 17)
	b.Input("x", tensor.Float, 1, 1, 8, 8).Output("y", tensor.Float, 1, 4, 4, 4)
	w1 := make([]float32, 40*1*3*3)
	w2 := make([]float32, 4*40*3*3)
	for i := range w1 {
		w1[i] = float32(i%7) - 3
	}
	for i := range w2 {
		w2[i] = float32(i%5) - 2
	}
	b.Init("w1", []int64{40, 1, 3, 3}, w1).Init("w2", []int64{4, 40, 3, 3}, w2)
	b.Node("Conv", "conv1", []string{"x", "w1"}, []string{"h"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Conv", "conv2", []string{"h", "w2"}, []string{"y"}, testmodels.AttrInts("strides", 2, 2), testmodels.AttrInts("pads", 1, 1, 1, 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Preset("w4")
	if err != nil {
		t.Fatal(err)
	}
	res, err := config.Resolve(cfg, m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(m, res, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value       string
		axis, block int
		scales      int
	}{{"w1", 0, 0, 40}, {"w2", 1, 32, 4 * 2 * 3 * 3}} {
		tp := plan.Tensor(c.value)
		if tp == nil {
			t.Fatalf("%s not planned", c.value)
		}
		if tp.Axis != c.axis || tp.BlockSize != c.block || len(tp.Params.Scales) != c.scales {
			t.Errorf("%s: axis %d block %d scales %d, want axis %d block %d scales %d",
				c.value, tp.Axis, tp.BlockSize, len(tp.Params.Scales), c.axis, c.block, c.scales)
		}
	}
}

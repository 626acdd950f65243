package runtime

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestReduceRuns checks every reduction over trailing axes of a float32
// tensor, which reduces contiguous runs, against the same values as
// float64, which take the general loop: the same bits once rounded.
func TestReduceRuns(t *testing.T) {
	x := randomInput(6, 2, 3, 4, 5)
	x.Float32s()[7], x.Float32s()[50] = float32(math.NaN()), float32(math.Inf(1))
	x64 := tensor.New(tensor.Double, 2, 3, 4, 5)
	for i, v := range x.Float32s() {
		x64.Data.([]float64)[i] = float64(v)
	}
	for op := range reducers {
		for _, axes := range [][]int64{{3}, {2, 3}, {1, 2, 3}, {-1, -2}} {
			for _, keep := range []int64{0, 1} {
				name := fmt.Sprintf("%s/%v/keepdims=%d", op, axes, keep)
				run := func(in *tensor.Tensor) *tensor.Tensor {
					b := testmodels.New("reduce", 13)
					b.Input("x", in.DType, 2, 3, 4, 5)
					b.Output("y", in.DType)
					inputs := []string{"x"}
					if op == "ReduceSum" {
						b.InitInt64("axes", []int64{int64(len(axes))}, axes)
						inputs = append(inputs, "axes")
					}
					n := b.Node(op, "r", inputs, []string{"y"}, testmodels.AttrInt("keepdims", keep))
					if op != "ReduceSum" {
						n.Attribute = append(n.Attribute, testmodels.AttrInts("axes", axes...))
					}
					m, err := onnxgraph.LoadBytes(b.Bytes(), "")
					if err != nil {
						t.Fatal(err)
					}
					s, err := NewGoSession(m, Options{Threads: 2})
					if err != nil {
						t.Fatal(err)
					}
					outs, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": in}, RunOptions{})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					return outs["y"]
				}
				got, want := run(x), run(x64)
				g, w := got.Float32s(), want.Data.([]float64)
				if len(g) != len(w) || fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) {
					t.Fatalf("%s: shape %v, float64 gives %v", name, got.Shape, want.Shape)
				}
				for i := range g {
					if wf := float32(w[i]); math.Float32bits(g[i]) != math.Float32bits(wf) && !(g[i] != g[i] && wf != wf) {
						t.Fatalf("%s: y[%d] = %g, float64 gives %g", name, i, g[i], wf)
					}
				}
			}
		}
	}
}

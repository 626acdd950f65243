package runtime

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// convBNReluModel is Conv → BatchNormalization → Relu → Conv (depthwise)
// → Relu, the pattern fusion targets.
func convBNReluModel(group int64) *testmodels.Builder {
	b := testmodels.New("convbn", 17)
	b.Input("x", tensor.Float, 2, 4, 9, 11)
	b.Output("y", tensor.Float, 2, 8, 5, 6)
	b.RandomInit("w1", 0.5, 8, 4, 3, 3)
	b.RandomInit("b1", 0.5, 8)
	b.RandomInit("scale", 1, 8)
	b.RandomInit("shift", 1, 8)
	b.RandomInit("mean", 0.5, 8)
	b.Init("var", []int64{8}, []float32{0.5, 1, 2, 0.1, 3, 0.7, 1.5, 0.9})
	b.RandomInit("w2", 0.5, 8, 8/group, 3, 3)
	b.RandomInit("b2", 0.5, 8)
	b.Node("Conv", "conv1", []string{"x", "w1", "b1"}, []string{"c1"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("BatchNormalization", "bn1", []string{"c1", "scale", "shift", "mean", "var"}, []string{"n1"})
	b.Node("Relu", "relu1", []string{"n1"}, []string{"r1"})
	b.Node("Conv", "conv2", []string{"r1", "w2", "b2"}, []string{"c2"}, testmodels.AttrInts("pads", 1, 1, 1, 1),
		testmodels.AttrInts("strides", 2, 2), testmodels.AttrInt("group", group))
	b.Node("Relu", "relu2", []string{"c2"}, []string{"y"})
	return b
}

// TestConvFusion checks that fused Conv+BatchNormalization+Relu computes
// bit for bit what the unfused nodes compute, and that taps of the
// fused-away values see exactly what the unfused engine computes.
func TestConvFusion(t *testing.T) {
	for _, group := range []int64{1, 8} {
		t.Run(fmt.Sprintf("group=%d", group), func(t *testing.T) {
			m, err := onnxgraph.LoadBytes(convBNReluModel(group).Bytes(), "")
			if err != nil {
				t.Fatal(err)
			}
			fused, err := NewGoSession(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(fused.prog.steps) != 2 {
				t.Fatalf("%d steps, want 2 fused Conv steps", len(fused.prog.steps))
			}
			c := &compiler{model: m, threads: 2, noFuse: true}
			prog, err := c.compileGraph(m.Graph, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			plain := &GoSession{model: m, prog: prog, threads: 2, inputs: fused.inputs, outputs: fused.outputs}
			r := rand.New(rand.NewPCG(1, 2))
			x := tensor.New(tensor.Float, 2, 4, 9, 11)
			for i := range x.Float32s() {
				x.Float32s()[i] = r.Float32()*4 - 2
			}
			in := map[string]*tensor.Tensor{"x": x}
			collect := func(s *GoSession, values []string) map[string][]float32 {
				got := map[string][]float32{}
				outs, err := s.Run(context.Background(), in, RunOptions{TapValues: values, Tap: func(name string, t *tensor.Tensor) {
					got[name] = append([]float32(nil), t.Float32s()...)
				}})
				if err != nil {
					t.Fatal(err)
				}
				got["out"] = outs["y"].Float32s()
				return got
			}
			want := collect(plain, nil)
			gotFast := collect(fused, []string{"y"})
			for i, v := range gotFast["out"] {
				if math.Float32bits(v) != math.Float32bits(want["out"][i]) {
					t.Fatalf("fused y[%d] = %g, unfused engine gives %g", i, v, want["out"][i])
				}
			}
			tapped := collect(fused, nil)
			for _, name := range []string{"c1", "n1", "r1", "c2", "y"} {
				g, w := tapped[name], want[name]
				if len(g) == 0 || len(g) != len(w) {
					t.Fatalf("tap %s: %d values, want %d", name, len(g), len(w))
				}
				for i := range g {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
						t.Fatalf("tap %s[%d] = %g, unfused engine gives %g", name, i, g[i], w[i])
					}
				}
			}
		})
	}
}

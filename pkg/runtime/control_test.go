package runtime

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// runModel runs b's model on in with the given threads.
func runModel(t *testing.T, b *testmodels.Builder, threads int, in map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewGoSession(m, Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := s.Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

func checkBits(t *testing.T, what string, got *tensor.Tensor, shape []int, want []float32) {
	t.Helper()
	if !slices.Equal(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	for i, v := range got.Float32s() {
		if math.Float32bits(v) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, v, want[i])
		}
	}
}

// TestLoop runs testmodels.Loop on one and two threads against its loop
// written out: three iterations of at most five, the third's condition
// output ending it.
func TestLoop(t *testing.T) {
	x := randomInput(9, 3, 4)
	acc := slices.Clone(x.Float32s())
	var steps []float32
	for i := range 3 {
		for j, v := range acc {
			ax := float32(math.Abs(float64(x.Float32s()[j])))
			acc[j] = kernels.Sigmoid32(v + float32(ax*float32(i))) // no fused multiply-add
			steps = append(steps, acc[j]+ax)
		}
	}
	for _, threads := range []int{1, 2} {
		outs := runModel(t, testmodels.Loop(), threads, map[string]*tensor.Tensor{"x": x})
		checkBits(t, "y", outs["y"], []int{3, 4}, acc)
		checkBits(t, "steps", outs["steps"], []int{3, 3, 4}, steps)
	}
}

// TestScan runs testmodels.Scan on one and two threads against its loop
// written out: x's rows forward, z's columns backwards, the outputs
// stacked along axis 1.
func TestScan(t *testing.T) {
	s0, x, z := randomInput(10, 3), randomInput(11, 5, 3), randomInput(12, 3, 5)
	b := testmodels.Scan()
	wt, err := tensor.FromProto(b.Model.Graph.Initializer[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	w := wt.Float32s()
	s := slices.Clone(s0.Float32s())
	rows := make([]float32, 15)
	for step := range 5 {
		for j := range s {
			s[j] = s[j] + float32(x.Float32s()[step*3+j]*w[j]) - z.Float32s()[j*5+4-step]
			rows[j*5+step] = kernels.Tanh32(s[j])
		}
	}
	for _, threads := range []int{1, 2} {
		outs := runModel(t, b, threads, map[string]*tensor.Tensor{"s0": s0, "x": x, "z": z})
		checkBits(t, "y", outs["y"], []int{3}, s)
		checkBits(t, "rows", outs["rows"], []int{3, 5}, rows)
	}
}

package calibrate

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// TestBatchAxisRead: with the batch on axis 1 of a [2, 5, 3] array, a
// batch of samples [1, 3) is the [2, 2, 3] slice h[:, 1:3, :].
func TestBatchAxisRead(t *testing.T) {
	h := make([]float32, 2*5*3)
	for i := range h {
		h[i] = float32(i)
	}
	path := filepath.Join(t.TempDir(), "h.npy")
	if err := npy.WriteNPYFile(path, tensor.FromFloat32(h, 2, 5, 3)); err != nil {
		t.Fatal(err)
	}
	inputs := []runtime.IOInfo{{Name: "state", DType: tensor.Float, Shape: []int64{2, -1, 3}}}
	src, err := Open(inputs, []string{"state=" + path + ":axis=1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Samples() != 5 {
		t.Fatalf("%d samples, want 5", src.Samples())
	}
	got, err := src.Batch(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{3, 4, 5, 6, 7, 8, 18, 19, 20, 21, 22, 23}
	if g := got["state"]; !slices.Equal(g.Shape, []int{2, 2, 3}) || !slices.Equal(g.Float32s(), want) {
		t.Fatalf("batch = %v %v, want [2 2 3] %v", g.Shape, g.Float32s(), want)
	}
}

package kernels

import (
	"math"
	"testing"
)

// TestEpilogueReluMatchesMax checks the fused Relu against max(v, 0), the
// standalone op's formula, on signed zeros, NaN and infinities.
func TestEpilogueReluMatchesMax(t *testing.T) {
	in := []float32{-1, 0, float32(math.Copysign(0, -1)), 2.5, float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), -1e-45}
	got := append([]float32(nil), in...)
	(&Epilogue{Act: ActRelu}).Apply(got, len(got), 1, len(got))
	for i, v := range in {
		want := max(v, 0)
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Errorf("relu(%g) = %g (bits %#x), max gives %g (bits %#x)", v, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
		}
	}
}

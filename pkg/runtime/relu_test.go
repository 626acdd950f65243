package runtime

import (
	"math"
	"testing"
)

// TestReluRow checks the row Relu bit for bit against the builtin max(x, 0)
// the element-wise definition uses, on signed zeros, NaN, infinities and
// denormals, at every position of a vector and in the tail after the
// vectors.
func TestReluRow(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		1e-45, -1e-45, 3.5, -3.5, math.MaxFloat32, -math.MaxFloat32}
	var src []float32
	for range 3 {
		src = append(src, specials...)
	}
	dst := make([]float32, len(src))
	reluRow(dst, src)
	for i, v := range src {
		want := max(v, 0)
		if math.Float32bits(dst[i]) != math.Float32bits(want) && !(v != v && dst[i] != dst[i]) {
			t.Errorf("relu(%g) = %g (%#x), want %g (%#x)", v, dst[i], math.Float32bits(dst[i]), want, math.Float32bits(want))
		}
	}
}

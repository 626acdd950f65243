package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMaxRowMatchesReference checks maxRow (assembly where the build has
// it) against maxRowGo bit for bit, NaN payloads included, on every length
// up to 67 with NaN, infinities and zeros of both signs on either side
// (where a vector max would differ: a NaN source or +0 against −0 keeps
// the destination).
func TestMaxRowMatchesReference(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), math.Float32frombits(0x7fc01234),
		float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45}
	r := rand.New(rand.NewPCG(30, 31))
	draw := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			if r.IntN(3) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			} else {
				x[i] = float32(r.NormFloat64())
			}
		}
		return x
	}
	for n := 0; n <= 67; n++ {
		for _, first := range []bool{false, true} {
			dst, src := draw(n), draw(n+2)
			got, want := slices.Clone(dst), slices.Clone(dst)
			maxRow(got, src, first)
			maxRowGo(want, src, first)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d first=%v: [%d] = %g (%#x), reference %g (%#x)", n, first, i,
						got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

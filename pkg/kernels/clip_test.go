package kernels

import (
	"math"
	"testing"
)

// TestClip checks Clip against Go's min(max(v, lo), hi) bit for bit (any
// NaN for a NaN) on the specials and zeros of both signs, for bounds the
// vector kernel takes and those it leaves to the Go loop, at every length
// up to 40 and offset up to 7.
func TestClip(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	xs := []float32{0, negZero, 1, -1, 5.5, 6, 7, -7, 0.25, inf, -inf, nan, 1e-45, -1e-45, 3e38, -3e38}
	for len(xs) < 48 {
		xs = append(xs, float32(len(xs)%13)-6.5)
	}
	for _, b := range []struct{ lo, hi float32 }{{0, 6}, {-1, 1}, {-inf, inf}, {negZero, 6}, {-3, 0}, {-3, negZero}, {2, -2}, {nan, 1}} {
		for off := 0; off < 8; off++ {
			for n := 0; off+n <= len(xs) && n <= 40; n++ {
				got := make([]float32, n)
				Clip(got, xs[off:], b.lo, b.hi)
				for i, v := range xs[off : off+n] {
					want := min(max(v, b.lo), b.hi)
					if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
						t.Fatalf("bounds %v offset %d length %d: Clip(%g) = %g (%#x), Go gives %g (%#x)", b, off, n, v, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

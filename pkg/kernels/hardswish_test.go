package kernels

import (
	"math"
	"testing"
)

// TestHardSwishChain checks HardSwishChain against its four steps in Go
// bit for bit (any NaN for a NaN) on the specials, zeros of both signs and
// values around the clip bounds, for divided and multiplied products, for
// bounds the vector kernel takes and those it leaves to the Go loop, at
// every length up to 40 and offset up to 7.
func TestHardSwishChain(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	xs := []float32{0, negZero, 1, -1, -3, 3, -3.0000002, 2.9999998, 5.5, 6, 7, -7, 0.25, inf, -inf, nan, 1e-45, -1e-45, 3e38, -3e38}
	for len(xs) < 48 {
		xs = append(xs, float32(len(xs)%13)*0.7-4.5)
	}
	for _, p := range []HardSwishParams{
		{Shift: 3, Lo: 0, Hi: 6, D: 6, Div: true},
		{Shift: 3, Lo: 0, Hi: 6, D: 1.0 / 6},
		{Shift: -0.5, Lo: -1, Hi: 1, D: 0, Div: true},
		{Shift: 3, Lo: negZero, Hi: 6, D: 6, Div: true},
		{Shift: 1, Lo: -inf, Hi: inf, D: inf},
		{Shift: 3, Lo: nan, Hi: 6, D: 6, Div: true},
	} {
		for off := 0; off < 8; off++ {
			for n := 0; off+n <= len(xs) && n <= 40; n++ {
				got := make([]float32, n)
				HardSwishChain(got, xs[off:], p)
				for i, x := range xs[off : off+n] {
					c := min(max(float32(x+p.Shift), p.Lo), p.Hi)
					want := float32(x * c)
					if p.Div {
						want = float32(want / p.D)
					} else {
						want = float32(want * p.D)
					}
					if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
						t.Fatalf("%+v offset %d length %d: f(%g) = %g (%#x), the steps give %g (%#x)", p, off, n, x, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

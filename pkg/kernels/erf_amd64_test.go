//go:build !noasm && amd64

package kernels

import (
	"math"
	"testing"
)

// TestErfRowVariants holds each assembly erf row kernel the CPU runs, not
// only the widest one Erf picks, bit-identical to Erf32 on every 97th
// float32 bit pattern of both signs (any NaN for a NaN).
func TestErfRowVariants(t *testing.T) {
	var xs []float32
	for b := uint32(0); b < 0x7f800000; b += 97 {
		xs = append(xs, math.Float32frombits(b), -math.Float32frombits(b))
	}
	xs = append(xs, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 4, -4)
	for _, v := range []struct {
		name   string
		ok     bool
		step   int
		kernel func(dst, src *float32, n int)
	}{
		{"avx2", hasAVX2, 16, erfRowAVX2},
		{"avx512", hasAVX512, 32, erfRowAVX512},
	} {
		if !v.ok {
			t.Logf("%s: not run by this CPU", v.name)
			continue
		}
		n := len(xs) / v.step * v.step
		got := make([]float32, n)
		v.kernel(&got[0], &xs[0], n)
		for i, g := range got {
			x, ref := xs[i], Erf32(xs[i])
			if math.IsNaN(float64(x)) {
				if !math.IsNaN(float64(g)) {
					t.Fatalf("%s: erf(NaN) = %g", v.name, g)
				}
				continue
			}
			if math.Float32bits(g) != math.Float32bits(ref) {
				t.Fatalf("%s: erf(%g) = %.9g, Erf32 gives %.9g", v.name, x, g, ref)
			}
		}
	}
}

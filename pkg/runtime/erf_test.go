package runtime

import (
	"math"
	"testing"
)

// TestErf32Accuracy holds erf32 to 1e-6 relative error against math.Erf
// (one subnormal unit for subnormal results)
// on every 97th float32 bit pattern (both signs, subnormals to the
// largest finite values), on the region boundaries and on the specials.
func TestErf32Accuracy(t *testing.T) {
	check := func(x float32) {
		got := erf32(x)
		want := math.Erf(float64(x))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("erf32(%g) = %g, want NaN", x, got)
			}
			return
		}
		// Subnormal results carry less than float32 precision: there the
		// bound is one unit of the smallest subnormal.
		if d := math.Abs(float64(got) - want); d > max(1e-6*math.Abs(want), 0x1p-149) {
			t.Fatalf("erf32(%g) = %.9g, math.Erf gives %.9g (relative error %.3g)", x, got, want, d/math.Abs(want))
		}
	}
	for b := uint32(0); b < 0x7f800000; b += 97 {
		check(math.Float32frombits(b))
		check(-math.Float32frombits(b))
	}
	for _, x := range []float32{0, float32(math.Copysign(0, -1)), 0.5, math.Nextafter32(0.5, 0), 6, math.Nextafter32(6, 0), 1e-45, math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		check(x)
		check(-x)
	}
	if got := erf32(float32(math.Copysign(0, -1))); math.Float32bits(got) != 0x80000000 {
		t.Errorf("erf32(-0) = %g, want -0", got)
	}
}

// BenchmarkErf compares erf32 with math.Erf over [-4, 4].
func BenchmarkErf(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i)/512 - 4
	}
	var sink float32
	b.Run("erf32", func(b *testing.B) {
		for b.Loop() {
			for _, x := range xs {
				sink += erf32(x)
			}
		}
	})
	b.Run("math.Erf", func(b *testing.B) {
		for b.Loop() {
			for _, x := range xs {
				sink += float32(math.Erf(float64(x)))
			}
		}
	})
	_ = sink
}

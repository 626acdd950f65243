package kernels

import (
	"math"
	"testing"
)

// TestErfRow checks Erf on every 97th float32 bit pattern of both signs
// (subnormals to the largest finite values), on the region boundaries and
// on the specials: bit-identical to Erf32 element by element (any NaN for
// a NaN), within 1e-6 relative error of math.Erf (one subnormal unit for
// subnormal results), and the same whatever the row length and offset.
func TestErfRow(t *testing.T) {
	var xs []float32
	for b := uint32(0); b < 0x7f800000; b += 97 {
		xs = append(xs, math.Float32frombits(b), -math.Float32frombits(b))
	}
	for _, x := range []float32{0, 0.5, math.Nextafter32(0.5, 0), 4, math.Nextafter32(4, 0), math.Nextafter32(4, 5), 6, 1e-45, math.MaxFloat32,
		float32(math.Inf(1)), float32(math.NaN())} {
		xs = append(xs, x, -x)
	}
	got := make([]float32, len(xs))
	Erf(got, xs)
	for i, x := range xs {
		ref := Erf32(x)
		g := got[i]
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(float64(g)) || !math.IsNaN(float64(ref)) {
				t.Fatalf("erf(%g) = %g, Erf32 gives %g, want NaN", x, g, ref)
			}
			continue
		}
		if math.Float32bits(g) != math.Float32bits(ref) {
			t.Fatalf("Erf(%g) = %.9g, Erf32 gives %.9g", x, g, ref)
		}
		want := math.Erf(float64(x))
		if d := math.Abs(float64(g) - want); d > max(1e-6*math.Abs(want), 0x1p-149) {
			t.Fatalf("Erf(%g) = %.9g, math.Erf gives %.9g (relative error %.3g)", x, g, want, d/math.Abs(want))
		}
	}
	if Erf(got[:1], []float32{float32(math.Copysign(0, -1))}); math.Float32bits(got[0]) != 0x80000000 {
		t.Errorf("Erf(-0) = %g, want -0", got[0])
	}
	// Rows of every length and offset up to 20 give the same bits as the
	// whole row, in place too.
	whole := make([]float32, 40)
	Erf(whole, xs[len(xs)-40:])
	for off := 0; off < 20; off++ {
		for n := 0; off+n <= 40 && n <= 20; n++ {
			part := append([]float32(nil), xs[len(xs)-40+off:len(xs)-40+off+n]...)
			Erf(part, part)
			for i, v := range part {
				if w := whole[off+i]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("offset %d length %d: element %d = %g, whole row gives %g", off, n, i, v, w)
				}
			}
		}
	}
}

// BenchmarkErf times Erf on 4096 values in [-4, 4].
func BenchmarkErf(b *testing.B) {
	xs, ys := make([]float32, 4096), make([]float32, 4096)
	for i := range xs {
		xs[i] = -4 + 8*float32(i)/float32(len(xs))
	}
	b.Run("row", func(b *testing.B) {
		for b.Loop() {
			Erf(ys, xs)
		}
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			erfGo(ys, xs)
		}
	})
}

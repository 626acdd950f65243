package kernels

import (
	"math"
	"testing"
)

// TestTanhRow checks Tanh on every 499th float32 bit pattern of both signs
// (subnormals to the largest finite values), around its branch point and
// clamp, and on the specials: bit-identical to Tanh32 element by element
// (any NaN for a NaN), within 2 ulp of math.Tanh, and the same whatever
// the row length and offset.
func TestTanhRow(t *testing.T) {
	var xs []float32
	for b := uint32(0); b < 0x7f800000; b += 499 {
		xs = append(xs, math.Float32frombits(b), -math.Float32frombits(b))
	}
	for _, x := range []float32{0, 1, 0.5, tanhSmall, math.Nextafter32(tanhSmall, 0), tanhClamp, 8.9, 9.1, 20, 1e-45, math.MaxFloat32,
		float32(math.Inf(1)), float32(math.NaN())} {
		xs = append(xs, x, -x)
	}
	got := make([]float32, len(xs))
	Tanh(got, xs)
	worst := 0.0
	for i, x := range xs {
		ref, g := Tanh32(x), got[i]
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(float64(g)) || !math.IsNaN(float64(ref)) {
				t.Fatalf("tanh(%g) = %g, reference %g, want NaN", x, g, ref)
			}
			continue
		}
		if math.Float32bits(g) != math.Float32bits(ref) {
			t.Fatalf("tanh(%g) = %.9g, the Go loop gives %.9g", x, g, ref)
		}
		want := math.Tanh(float64(x))
		ulp := float64(math.Nextafter32(float32(math.Abs(want)), float32(math.Inf(1))) - float32(math.Abs(want)))
		if d := math.Abs(float64(g)-want) / ulp; d > worst {
			worst = d
		}
		if d := math.Abs(float64(g)-want) / ulp; d > 2 || math.Signbit(float64(g)) != math.Signbit(want) {
			t.Fatalf("tanh(%g) = %.9g, exactly %.9g (%.2f ulp)", x, g, want, d)
		}
	}
	t.Logf("largest error %.2f ulp", worst)
	tail := xs[len(xs)-64 : len(xs)-24]
	whole := make([]float32, 40)
	Tanh(whole, tail)
	for off := 0; off < 20; off++ {
		for n := 0; off+n <= 40 && n <= 20; n++ {
			part := append([]float32(nil), tail[off:off+n]...)
			Tanh(part, part)
			for i, v := range part {
				if w := whole[off+i]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("offset %d length %d: element %d = %g, whole row gives %g", off, n, i, v, w)
				}
			}
		}
	}
}

func BenchmarkTanh(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%200)/20 - 5
	}
	y := make([]float32, len(x))
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			Tanh(y, x)
		}
	})
	b.Run("math.Tanh", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				y[i] = float32(math.Tanh(float64(v)))
			}
		}
	})
}

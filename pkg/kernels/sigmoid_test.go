package kernels

import (
	"math"
	"testing"
)

// TestSigmoidRow checks Sigmoid and SiLU on every 499th float32 bit
// pattern of both signs (subnormals to the largest finite values), on the
// ends of e^x's range and on the specials: bit-identical to Sigmoid32
// element by element (any NaN for a NaN), within 3e-7 relative error of
// the exact logistic where it is above 1e-37 and within 1e-38 below, and
// the same whatever the row length and offset.
func TestSigmoidRow(t *testing.T) {
	var xs []float32
	for b := uint32(0); b < 0x7f800000; b += 499 {
		xs = append(xs, math.Float32frombits(b), -math.Float32frombits(b))
	}
	for _, x := range []float32{0, 1, 0.5, 87.33654, 87.34, 88.3762626, 88.4, 100, 1e-45, math.MaxFloat32,
		float32(math.Inf(1)), float32(math.NaN())} {
		xs = append(xs, x, -x)
	}
	for _, silu := range []bool{false, true} {
		got := make([]float32, len(xs))
		if silu {
			SiLU(got, xs)
		} else {
			Sigmoid(got, xs)
		}
		for i, x := range xs {
			ref := Sigmoid32(x)
			if silu {
				ref = float32(x * ref)
			}
			g := got[i]
			if math.IsNaN(float64(x)) {
				if !math.IsNaN(float64(g)) || !math.IsNaN(float64(ref)) {
					t.Fatalf("silu %v: f(%g) = %g, reference %g, want NaN", silu, x, g, ref)
				}
				continue
			}
			if math.Float32bits(g) != math.Float32bits(ref) {
				t.Fatalf("silu %v: f(%g) = %.9g, the Go loop gives %.9g", silu, x, g, ref)
			}
			if silu {
				continue
			}
			want := 1 / (1 + math.Exp(-float64(x)))
			if d := math.Abs(float64(g) - want); want > 1e-37 && d > 3e-7*want || want <= 1e-37 && d > 1e-38 {
				t.Fatalf("Sigmoid(%g) = %.9g, exactly %.9g (relative error %.3g)", x, g, want, d/want)
			}
		}
	}
	// Rows of every length and offset up to 20 give the same bits as the
	// whole row, in place too.
	tail := xs[len(xs)-64 : len(xs)-24]
	whole := make([]float32, 40)
	SiLU(whole, tail)
	for off := 0; off < 20; off++ {
		for n := 0; off+n <= 40 && n <= 20; n++ {
			part := append([]float32(nil), tail[off:off+n]...)
			SiLU(part, part)
			for i, v := range part {
				if w := whole[off+i]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("offset %d length %d: element %d = %g, whole row gives %g", off, n, i, v, w)
				}
			}
		}
	}
}

func BenchmarkSigmoid(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%200)/10 - 10
	}
	y := make([]float32, len(x))
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			Sigmoid(y, x)
		}
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			sigmoidGo(y, x, false)
		}
	})
	b.Run("float64", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				y[i] = float32(1 / (1 + math.Exp(-float64(v))))
			}
		}
	})
}

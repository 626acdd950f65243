package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// quantizeRef is QuantizeU8/QuantizeI8's definition, computed in float64:
// clamp(roundHalfEven(x/scale) + zp, lo + zp, hi + zp), NaN to lo + zp.
func quantizeRef(x, scale, lo, hi, zp float32) int32 {
	q := float64(x / scale)
	if math.IsNaN(q) {
		return int32(lo + zp)
	}
	return int32(math.Max(float64(lo+zp), math.Min(float64(hi+zp), math.RoundToEven(q)+float64(zp))))
}

// TestQuantize8 checks the 8-bit quantize and dequantize kernels (the
// vector prefix they cover, every element on machines without them)
// against the definitions, on ties at every half, ±Inf, NaN, −0, the
// largest floats and random values, for uint8 and int8 grids at their
// extreme and middle zero points, with lengths that leave tails.
func TestQuantize8(t *testing.T) {
	x := quantizeValues(5)
	for _, n := range []int{len(x), len(x) - 3, 7} {
		xs := x[:n]
		for _, scale := range []float32{1, 0.5, 0.37, 3} {
			for _, zp := range []int32{0, 128, 255} {
				u := make([]uint8, n)
				done := QuantizeU8(u, xs, scale, float32(-zp), float32(255-zp), float32(zp))
				if done%8 != 0 || done > n {
					t.Fatalf("covered %d of %d", done, n)
				}
				y := make([]float32, n)
				dy := DequantizeU8(y, u, scale, zp)
				for i := range done {
					if w := quantizeRef(xs[i], scale, float32(-zp), float32(255-zp), float32(zp)); int32(u[i]) != w {
						t.Fatalf("uint8 zp %d scale %g: %g → %d, want %d", zp, scale, xs[i], u[i], w)
					}
				}
				for i := range dy {
					if w := float32(int32(u[i])-zp) * scale; y[i] != w {
						t.Fatalf("uint8 zp %d scale %g: code %d → %g, want %g", zp, scale, u[i], y[i], w)
					}
				}
			}
			for _, zp := range []int32{-128, 0, 127} {
				s := make([]int8, n)
				done := QuantizeI8(s, xs, scale, float32(-128-zp), float32(127-zp), float32(zp))
				y := make([]float32, n)
				dy := DequantizeI8(y, s, scale, zp)
				for i := range done {
					if w := quantizeRef(xs[i], scale, float32(-128-zp), float32(127-zp), float32(zp)); int32(s[i]) != w {
						t.Fatalf("int8 zp %d scale %g: %g → %d, want %d", zp, scale, xs[i], s[i], w)
					}
				}
				for i := range dy {
					if w := float32(int32(s[i])-zp) * scale; y[i] != w {
						t.Fatalf("int8 zp %d scale %g: code %d → %g, want %g", zp, scale, s[i], y[i], w)
					}
				}
			}
		}
	}
}

// quantizeValues are values that break a quantizer's rounding or clamp:
// ties at every half and next to them, ±Inf, NaN, −0, the largest floats,
// quotients around 2^22 and 2^23, and random values of many sizes (seeded).
func quantizeValues(seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, seed+1))
	var x []float32
	for k := -300; k <= 300; k++ {
		x = append(x, float32(k)+0.5, float32(k)-0.5, float32(k)+0.49999997, float32(k)+0.50000006)
	}
	x = append(x, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, 1<<22+0.5, -(1 << 23))
	for range 3000 {
		x = append(x, float32(r.NormFloat64()*float64(r.IntN(400)+1)))
	}
	return x
}

// TestQuantizeCols8 checks the per-element-scale kernels against the
// definition with each element's scale (codes, and the codes read back):
// ties, ±Inf, NaN, −0, the largest floats and random values, scales
// cycling through four values, lengths that leave tails.
func TestQuantizeCols8(t *testing.T) {
	x := quantizeValues(7)
	scales := make([]float32, len(x))
	for i := range scales {
		scales[i] = []float32{1, 0.5, 0.37, 3}[i%4]
	}
	for _, n := range []int{len(x), len(x) - 3, 7} {
		u := make([]uint8, n)
		done := QuantizeColsU8(u, x[:n], scales, 0, 255)
		if done%8 != 0 || done > n {
			t.Fatalf("covered %d of %d", done, n)
		}
		for i := range done {
			if w := quantizeRef(x[i], scales[i], 0, 255, 0); int32(u[i]) != w {
				t.Fatalf("uint8 scale %g: %g → %d, want %d", scales[i], x[i], u[i], w)
			}
		}
		y := make([]float32, n)
		done = DequantizeColsU8(y, u, scales)
		for i := range done {
			if w := float32(u[i]) * scales[i]; y[i] != w {
				t.Fatalf("uint8 scale %g: code %d → %g, want %g", scales[i], u[i], y[i], w)
			}
		}
		s := make([]int8, n)
		done = QuantizeColsI8(s, x[:n], scales, -128, 127)
		for i := range done {
			if w := quantizeRef(x[i], scales[i], -128, 127, 0); int32(s[i]) != w {
				t.Fatalf("int8 scale %g: %g → %d, want %d", scales[i], x[i], s[i], w)
			}
		}
		done = DequantizeColsI8(y, s, scales)
		for i := range done {
			if w := float32(s[i]) * scales[i]; y[i] != w {
				t.Fatalf("int8 scale %g: code %d → %g, want %g", scales[i], s[i], y[i], w)
			}
		}
	}
}

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdaRoundUpdate checks the vector kernel against the scalar loop bit
// for bit, over lengths that leave tails, with soft fractions inside and
// outside (0, 1) and at ½ (no rounding term), weights at the grid's edges,
// with and without the rounding term; and that a weight outside (0, 1)
// is left as it was.
func TestAdaRoundUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	stretch, shift := float32(1.2), float32(-0.1)
	for _, n := range []int{1, 7, 8, 9, 31, 64, 257} {
		for _, p := range []AdaRoundStep{
			{Stretch: stretch, Shift: shift, Step: 0.05 / 0.1, InvC2: 1 / 0.001},
			{Stretch: stretch, Shift: shift, RegStep: 2e-3, Exponent: 19, Step: 0.05 / 0.4, InvC2: 1 / 0.02},
			{Stretch: stretch, Shift: shift, RegStep: 5e-4, Exponent: 1, Step: 0.05, InvC2: 1.2},
		} {
			v, mom, vel, sig := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			da, g, gs, low, high := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range n {
				v[i] = float32(rng.NormFloat64() * 3)
				sig[i] = float32(1 / (1 + math.Exp(-float64(v[i]))))
				switch i % 11 {
				case 3:
					sig[i] = 0.5 // h = ½ or next to it
				case 5:
					sig[i] = 1 / 12.0 // h = 0
				}
				mom[i], vel[i] = float32(rng.NormFloat64()*0.1), float32(rng.Float64()*0.01)
				da[i], g[i], gs[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.Float64()*0.2)
				low[i], high[i] = -float32(rng.IntN(3)), float32(rng.IntN(3))
			}
			want := [][]float32{clone(v), clone(mom), clone(vel)}
			adaRoundUpdateGo(want[0], want[1], want[2], sig, da, g, gs, low, high, p)
			got := [][]float32{clone(v), clone(mom), clone(vel)}
			AdaRoundUpdate(got[0], got[1], got[2], sig, da, g, gs, low, high, p)
			for k, name := range []string{"v", "mom", "vel"} {
				for i := range n {
					if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
						t.Fatalf("n %d, %+v: %s[%d] = %g, the scalar loop gives %g", n, p, name, i, got[k][i], want[k][i])
					}
				}
			}
			for i := range n {
				if h := sig[i]*stretch + shift; !(h > 0 && h < 1) && (got[0][i] != v[i] || got[1][i] != mom[i] || got[2][i] != vel[i]) {
					t.Fatalf("element %d with h = %g was updated", i, h)
				}
			}
		}
	}
}

// TestAdaRoundDelta checks the vector kernel against the scalar loop bit
// for bit, with soft fractions clamped at both ends and codes clamped to
// the grid.
func TestAdaRoundDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 8, 13, 100} {
		sig, floor, lo, hi, scale, w := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range n {
			sig[i] = float32(rng.Float64())
			scale[i] = float32(rng.Float64()*0.1 + 0.01)
			w[i] = float32(rng.NormFloat64() * 0.5)
			floor[i] = float32(math.Floor(float64(w[i] / scale[i])))
			lo[i], hi[i] = -8, 7
		}
		want, got := make([]float32, n), make([]float32, n)
		adaRoundDeltaGo(want, sig, floor, lo, hi, scale, w, 1.2, -0.1)
		AdaRoundDelta(got, sig, floor, lo, hi, scale, w, 1.2, -0.1)
		for i := range n {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n %d: d[%d] = %g, the scalar loop gives %g", n, i, got[i], want[i])
			}
		}
	}
}

func clone(x []float32) []float32 { return append([]float32(nil), x...) }

// TestPow32 checks the float32 power of AdaRound's rounding-term gradient
// against math.Pow over (1e-6, 1] and the exponents β − 1 takes (β from
// 20 down to 2, and beyond): relative error below 1e-4.
func TestPow32(t *testing.T) {
	for _, e := range []float32{0, 1, 1.5, 2.7, 7, 19, 25} {
		for x := float32(1e-6); x <= 1; x *= 1.013 {
			got, want := float64(Pow32(x, e)), math.Pow(float64(x), float64(e))
			if want < 1e-30 {
				continue
			}
			if d := math.Abs(got-want) / want; d > 1e-4 {
				t.Fatalf("Pow32(%g, %g) = %g, want %g (relative error %.2g)", x, e, got, want, d)
			}
		}
	}
}

// BenchmarkAdaRoundUpdate times one Adam step over a 512×4608 weight (a
// ResNet-18 layer4 convolution), the kernel against the scalar loop.
func BenchmarkAdaRoundUpdate(b *testing.B) {
	const n = 512 * 4608
	rng := rand.New(rand.NewPCG(1, 2))
	s := make([][]float32, 9)
	for i := range s {
		s[i] = make([]float32, n)
		for j := range s[i] {
			s[i][j] = float32(rng.Float64())
		}
	}
	for j := range n {
		s[7][j], s[8][j] = -2, 2 // low, high
	}
	p := AdaRoundStep{Stretch: 1.2, Shift: -0.1, RegStep: 1e-3, Exponent: 9, Step: 0.05, InvC2: 10}
	for _, c := range []struct {
		name string
		fn   func(v, mom, vel, sig, da, g, gs, low, high []float32, p AdaRoundStep)
	}{{"kernel", AdaRoundUpdate}, {"scalar", adaRoundUpdateGo}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(n * 4)
			for b.Loop() {
				c.fn(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], p)
			}
		})
	}
}

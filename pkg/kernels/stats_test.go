package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var (
	posInf32 = float32(math.Inf(1))
	negInf32 = float32(math.Inf(-1))
	nan32    = float32(math.NaN())
	negZero  = float32(math.Copysign(0, -1))
	// specials are mixed into random inputs: non-finite values, signed
	// zeros, subnormals and the extreme finite values.
	specials = []float32{nan32, posInf32, negInf32, 0, negZero,
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		math.Float32frombits(0x007fffff), -math.Float32frombits(0x007fffff),
		math.MaxFloat32, -math.MaxFloat32}
)

// statsInput makes n values of one of several kinds; seed fixes the data.
func statsInput(kind string, n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		switch kind {
		case "normal":
			x[i] = float32(r.NormFloat64())
		case "specials":
			if r.IntN(4) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			} else {
				x[i] = float32(r.NormFloat64() * 1e3)
			}
		case "zeros":
			if r.IntN(2) == 0 {
				x[i] = negZero
			}
		case "nan":
			x[i] = nan32
		case "subnormal":
			x[i] = math.Float32frombits(uint32(r.IntN(0x7fffff)+1)) * float32(1-2*r.IntN(2))
		}
	}
	return x
}

var statsKinds = []string{"normal", "specials", "zeros", "nan", "subnormal"}

// naiveMinMax is FiniteMinMax written with the math package, independent of the
// folding trick the kernels use.
func naiveMinMax(x []float32) (lo, hi float32, nan, inf int) {
	lo, hi = posInf32, negInf32
	for _, v := range x {
		switch {
		case math.IsNaN(float64(v)):
			nan++
		case math.IsInf(float64(v), 0):
			inf++
		default:
			if v == 0 {
				v = 0 // canonical +0
			}
			if v < lo {
				lo = v
			}
			if v > hi {
				hi = v
			}
		}
	}
	return lo, hi, nan, inf
}

// statsVariant is one implementation of the whole-vector kernels with the
// tail finished by the reference, as the dispatchers do; each build lists
// its own in statsVariants.
type statsVariant struct {
	name   string
	ok     bool
	minMax func(x []float32) (float32, float32, int)
	accum  func(x, lo, hi []float32) int
	// hist is HistogramPow2 for parameters that satisfy histKernelOK.
	hist func(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int)
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

func TestFiniteMinMaxVariants(t *testing.T) {
	for _, v := range statsVariants() {
		if !v.ok {
			t.Logf("%s: not supported by this CPU", v.name)
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			for _, kind := range statsKinds {
				for n := 0; n <= 257; n++ {
					x := statsInput(kind, n+2, uint64(n))
					// Guard elements at both ends must never be read into the result.
					x[0], x[n+1] = -1e30, 1e30
					in := x[1 : n+1 : n+1]
					wl, wh, wnan, winf := naiveMinMax(in)
					lo, hi, nf := v.minMax(in)
					if !sameBits(lo, wl) || !sameBits(hi, wh) || nf != wnan+winf {
						t.Fatalf("%s n=%d: got (%v, %v, %d), want (%v, %v, %d)", kind, n, lo, hi, nf, wl, wh, wnan+winf)
					}
					rl, rh, rnf := minMaxRef(in)
					if !sameBits(rl, wl) || !sameBits(rh, wh) || rnf != nf {
						t.Fatalf("%s n=%d: reference (%v, %v, %d) differs", kind, n, rl, rh, rnf)
					}
				}
			}
		})
	}
}

func TestFiniteMinMaxAccumVariants(t *testing.T) {
	const guard = 4
	for _, v := range statsVariants() {
		if !v.ok {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			for _, kind := range statsKinds {
				for n := 0; n <= 257; n++ {
					x := statsInput(kind, n, uint64(1000+n))
					// Accumulators start from earlier data, with guards around them.
					lo := make([]float32, n+2*guard)
					hi := make([]float32, n+2*guard)
					init := statsInput("normal", n, uint64(n))
					for i := range lo {
						lo[i], hi[i] = 77, -77
					}
					for i := range n {
						lo[guard+i], hi[guard+i] = init[i], init[i]
					}
					wlo, whi := append([]float32(nil), lo...), append([]float32(nil), hi...)
					wnf := 0
					for i, x := range x {
						l, h, a, b := naiveMinMax([]float32{x})
						wnf += a + b
						wlo[guard+i] = min(wlo[guard+i], l)
						whi[guard+i] = max(whi[guard+i], h)
					}
					nf := v.accum(x, lo[guard:guard+n], hi[guard:guard+n])
					if nf != wnf {
						t.Fatalf("%s n=%d: %d non-finite, want %d", kind, n, nf, wnf)
					}
					for i := range lo {
						if !sameBits(lo[i], wlo[i]) || !sameBits(hi[i], whi[i]) {
							t.Fatalf("%s n=%d: element %d (guard %d): got (%v, %v), want (%v, %v)",
								kind, n, i, guard, lo[i], hi[i], wlo[i], whi[i])
						}
					}
				}
			}
		})
	}
}

func TestFiniteMinMaxPublic(t *testing.T) {
	for _, kind := range statsKinds {
		for _, n := range []int{0, 1, 63, 64, 65, 1000, 4099} {
			t.Run(fmt.Sprintf("%s/%d", kind, n), func(t *testing.T) {
				x := statsInput(kind, n, 3)
				wl, wh, wnan, winf := naiveMinMax(x)
				lo, hi, nan, inf := FiniteMinMax(x)
				if !sameBits(lo, wl) || !sameBits(hi, wh) || nan != wnan || inf != winf {
					t.Fatalf("got (%v, %v, %d, %d), want (%v, %v, %d, %d)", lo, hi, nan, inf, wl, wh, wnan, winf)
				}
				am, nan2, inf2 := FiniteAbsMax(x)
				want := float32(0)
				if wl <= wh {
					want = max(-wl, wh) + 0
				}
				if !sameBits(am, want) || nan2 != wnan || inf2 != winf {
					t.Fatalf("FiniteAbsMax = (%v, %d, %d), want (%v, %d, %d)", am, nan2, inf2, want, wnan, winf)
				}
			})
		}
	}
}

func TestSignedZero(t *testing.T) {
	x := make([]float32, 100)
	for i := range x {
		x[i] = negZero
	}
	lo, hi, _, _ := FiniteMinMax(x)
	if math.Float32bits(lo) != 0 || math.Float32bits(hi) != 0 {
		t.Fatalf("zeros give (%v, %v) with bits %#x %#x, want +0", lo, hi, math.Float32bits(lo), math.Float32bits(hi))
	}
}

func TestFiniteMinMaxChannels(t *testing.T) {
	cases := []struct{ outer, channels, inner int }{
		{1, 1, 1}, {2, 3, 1}, {4, 17, 1}, {2, 3, 5}, {3, 4, 70}, {1, 64, 49}, {0, 3, 4},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dx%dx%d", c.outer, c.channels, c.inner), func(t *testing.T) {
			x := statsInput("specials", c.outer*c.channels*c.inner, 11)
			lo, hi := make([]float32, c.channels+1), make([]float32, c.channels+1)
			wlo, whi := make([]float32, c.channels+1), make([]float32, c.channels+1)
			for i := range lo {
				lo[i], hi[i], wlo[i], whi[i] = posInf32, negInf32, posInf32, negInf32
			}
			wnan, winf := 0, 0
			for o := range c.outer {
				for ch := range c.channels {
					for i := range c.inner {
						l, h, a, b := naiveMinMax([]float32{x[(o*c.channels+ch)*c.inner+i]})
						wlo[ch], whi[ch] = min(wlo[ch], l), max(whi[ch], h)
						wnan, winf = wnan+a, winf+b
					}
				}
			}
			nan, inf := FiniteMinMaxChannels(x, c.outer, c.channels, c.inner, lo, hi)
			if nan != wnan || inf != winf {
				t.Fatalf("counts (%d, %d), want (%d, %d)", nan, inf, wnan, winf)
			}
			for i := range lo {
				if !sameBits(lo[i], wlo[i]) || !sameBits(hi[i], whi[i]) {
					t.Fatalf("channel %d: (%v, %v), want (%v, %v)", i, lo[i], hi[i], wlo[i], whi[i])
				}
			}
		})
	}
}

func TestHistogramPow2(t *testing.T) {
	tests := []struct {
		name        string
		x           []float32
		exp, start  int
		n           int
		want        []uint64
		under, over int
		nonFinite   int
	}{
		{name: "unit bins", x: []float32{0, 0.5, 1, 1.99, 2, 3.5, -0.25}, exp: 0, start: -1, n: 4,
			want: []uint64{1, 2, 2, 1}, over: 1},
		{name: "half bins negative edges", x: []float32{-1, -0.5, -0.25, negZero, 0.75}, exp: -1, start: -2, n: 4,
			want: []uint64{1, 2, 1, 1}},
		{name: "non-finite", x: []float32{nan32, posInf32, negInf32, 4}, exp: 2, start: 0, n: 2,
			want: []uint64{0, 1}, nonFinite: 3},
		{name: "tiny negative is below zero", x: []float32{-math.SmallestNonzeroFloat32, math.SmallestNonzeroFloat32}, exp: 10, start: -1, n: 2,
			want: []uint64{1, 1}},
		{name: "outside", x: []float32{-100, 100, 1}, exp: 0, start: 0, n: 2, want: []uint64{0, 1}, under: 1, over: 1},
		{name: "empty", exp: 0, n: 3, want: []uint64{0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			counts := make([]uint64, tc.n)
			under, over, nf := HistogramPow2(tc.x, tc.exp, tc.start, counts)
			if under != tc.under || over != tc.over || nf != tc.nonFinite {
				t.Fatalf("under, over, non-finite = %d, %d, %d; want %d, %d, %d", under, over, nf, tc.under, tc.over, tc.nonFinite)
			}
			for i := range counts {
				if counts[i] != tc.want[i] {
					t.Fatalf("counts = %v, want %v", counts, tc.want)
				}
			}
		})
	}
}

// TestHistogramPow2Rebin checks the property the calibration histograms rely
// on: counting at width 2^(e+1) equals counting at 2^e and merging bin pairs.
func TestHistogramPow2Rebin(t *testing.T) {
	x := statsInput("specials", 5000, 5)
	lo, hi, _, _ := FiniteMinMax(x)
	e := 0
	for math.Floor(float64(hi)/math.Ldexp(1, e))-math.Floor(float64(lo)/math.Ldexp(1, e)) >= 1<<12 {
		e++
	}
	start := int(math.Floor(float64(lo) / math.Ldexp(1, e)))
	fine := make([]uint64, 1<<12)
	if u, o, _ := HistogramPow2(x, e, start, fine); u != 0 || o != 0 {
		t.Fatalf("values outside the fine histogram: %d under, %d over", u, o)
	}
	cstart := start >> 1
	coarse := make([]uint64, 1<<12)
	HistogramPow2(x, e+1, cstart, coarse)
	merged := make([]uint64, 1<<12)
	for j, c := range fine {
		merged[((start+j)>>1)-cstart] += c
	}
	for j := range coarse {
		if coarse[j] != merged[j] {
			t.Fatalf("bin %d: %d counted at 2^%d, %d merged from 2^%d", j, coarse[j], e+1, merged[j], e)
		}
	}
}

func BenchmarkStats(b *testing.B) {
	sizes := []struct {
		name string
		n    int
	}{
		{"L2_256KiB", 64 << 10},
		// 64 MiB passes L2 but may stay in a large L3 (260 MiB on the
		// 2-core Xeon the figures in the docs come from); 512 MiB does not.
		{"L3_64MiB", 16 << 20},
		{"DRAM_512MiB", 128 << 20},
	}
	for _, s := range sizes {
		x := statsInput("normal", s.n, 1)
		dst := make([]float32, s.n)
		copy(dst, x) // fault the pages in before timing
		b.Run("copy/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(4 * s.n))
			for b.Loop() {
				copy(dst, x)
			}
		})
		b.Run("FiniteMinMax/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(4 * s.n))
			for b.Loop() {
				FiniteMinMax(x)
			}
		})
		b.Run("minMaxRef/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(4 * s.n))
			for b.Loop() {
				minMaxRef(x)
			}
		})
		const channels = 64
		lo, hi := make([]float32, channels), make([]float32, channels)
		b.Run("ChannelsNCHW64/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(4 * s.n))
			for b.Loop() {
				FiniteMinMaxChannels(x, 1, channels, s.n/channels, lo, hi)
			}
		})
		b.Run("ChannelsLast64/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(4 * s.n))
			for b.Loop() {
				FiniteMinMaxChannels(x, s.n/channels, channels, 1, lo, hi)
			}
		})
		// The calibration layout: 2048 bins of 2^−8 span ±4σ of normal
		// data; relu data puts half the values in one bin, the worst case
		// for store-to-load forwarding; constant data puts all of them there.
		counts := make([]uint64, 2048)
		c := histConfig{-8, -1024, 2048}
		for _, kind := range []string{"normal", "relu", "constant"} {
			h := x
			if kind != "normal" {
				h = histInput(kind, s.n, 1, c)
			}
			b.Run("HistogramPow2_2048_"+kind+"/"+s.name, func(b *testing.B) {
				b.SetBytes(int64(4 * s.n))
				for b.Loop() {
					HistogramPow2(h, c.exp, c.start, counts)
				}
			})
		}
		b.Run("histPow2Ref_2048_normal/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(4 * s.n))
			for b.Loop() {
				histPow2Ref(x, c.exp, c.start, counts)
			}
		})
	}
}

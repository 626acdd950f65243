package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// histConfig is one bin layout: n bins of width 2^exp from start.
type histConfig struct{ exp, start, n int }

// histConfigs cover unit and fractional widths, subnormal-sized bins, bins
// near the float32 maximum, widths at the ±900 limits (where v·2^−exp
// underflows to float64 subnormals or overflows to ±Inf), ranges entirely
// on one side of zero, single bins, and the calibration layout (2048 bins,
// indices up to 2^40).
var histConfigs = []histConfig{
	{0, -1, 4}, {-1, -2, 4}, {-8, -1024, 2048}, {3, -7, 13}, {0, 5, 1},
	{-149, -5, 10}, {-140, 0, 2048}, {-140, -(1 << 40) + 1, 2048}, {-126, -3, 300},
	{120, -300, 600}, {126, -4, 8}, {900, -1, 2}, {-900, -3, 7},
	{10, -1, 2}, {-20, 1000, 257}, {-4, -5000, 100}, {2, 0, 65536},
}

// histKinds are the input kinds the histogram tests draw from; "edges"
// and "inrange" depend on the bin layout.
var histKinds = []string{"normal", "specials", "zeros", "nan", "subnormal", "bits", "relu", "edges", "inrange", "constant"}

// histInput makes n values of kind for the layout c; seed fixes the data.
func histInput(kind string, n int, seed uint64, c histConfig) []float32 {
	switch kind {
	case "normal", "specials", "zeros", "nan", "subnormal":
		return statsInput(kind, n, seed)
	}
	r := rand.New(rand.NewPCG(seed, 11))
	w := math.Ldexp(1, c.exp)
	x := make([]float32, n)
	for i := range x {
		switch kind {
		case "bits":
			// Every float32 bit pattern is equally likely.
			x[i] = math.Float32frombits(r.Uint32())
		case "relu":
			if r.IntN(2) == 0 {
				x[i] = float32(math.Abs(r.NormFloat64()) * w * float64(c.n) / 4)
			}
		case "edges":
			// Bin edges around the layout, their float32 neighbours, −0 and
			// the float32 extremes.
			k := c.start - 2 + r.IntN(c.n+5)
			e := float32(float64(k) * w)
			switch r.IntN(5) {
			case 0:
				e = math.Nextafter32(e, posInf32)
			case 1:
				e = math.Nextafter32(e, negInf32)
			case 2:
				e = specials[r.IntN(len(specials))]
			}
			x[i] = e
		case "inrange":
			x[i] = float32((float64(c.start) + r.Float64()*float64(c.n)) * w)
		case "constant":
			x[i] = float32(float64(c.start) * w)
		}
	}
	return x
}

// histCheck runs hist over x into counts that start non-zero, with guard
// bins around them, and compares everything with the reference.
func histCheck(t *testing.T, label string, hist func([]float32, int, int, []uint64) (int, int, int), x []float32, c histConfig) {
	t.Helper()
	const guard = 3
	got := make([]uint64, c.n+2*guard)
	for i := range got {
		got[i] = uint64(1000 + i)
	}
	want := slices.Clone(got)
	wu, wo, wnf := histPow2Ref(x, c.exp, c.start, want[guard:guard+c.n])
	u, o, nf := hist(x, c.exp, c.start, got[guard:guard+c.n:guard+c.n])
	if u != wu || o != wo || nf != wnf {
		t.Fatalf("%s: under, over, non-finite = %d, %d, %d; want %d, %d, %d", label, u, o, nf, wu, wo, wnf)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: bin %d (guard %d): %d, want %d", label, i-guard, guard, got[i], want[i])
		}
	}
}

func TestHistogramPow2Variants(t *testing.T) {
	for _, v := range statsVariants() {
		if !v.ok {
			t.Logf("%s: not supported by this CPU", v.name)
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			for _, c := range histConfigs {
				for _, kind := range histKinds {
					for n := 0; n <= 257; n++ {
						if c.n > 4096 && n%16 != 15 {
							continue // summing 64 Ki bins per call is slow; a few lengths suffice
						}
						x := histInput(kind, n+2, uint64(n), c)
						// Guard values in the first and last bin must not be read.
						x[0], x[n+1] = float32(float64(c.start)*math.Ldexp(1, c.exp)), nan32
						histCheck(t, fmt.Sprintf("%v %s n=%d", c, kind, n), v.hist, x[1:n+1:n+1], c)
					}
				}
			}
		})
	}
}

func TestHistogramPow2VariantsLarge(t *testing.T) {
	for _, v := range statsVariants() {
		if !v.ok {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			for _, c := range histConfigs {
				for _, kind := range histKinds {
					for _, n := range []int{1000, 4099, 1<<16 + 3} {
						x := histInput(kind, n, uint64(n)^7, c)
						histCheck(t, fmt.Sprintf("%v %s n=%d", c, kind, n), v.hist, x, c)
					}
				}
			}
			// One input longer than any cache, in the calibration layout.
			c := histConfig{-8, -1024, 2048}
			for _, kind := range []string{"specials", "relu"} {
				histCheck(t, fmt.Sprintf("%v %s n=%d", c, kind, 1<<22+5), v.hist, histInput(kind, 1<<22+5, 1, c), c)
			}
		})
	}
}

// TestHistogramPow2CounterOverflow puts far more than 2^16 values in one
// bin, and in the trash bin, so that the kernels' narrow per-copy counters
// must be merged before they wrap.
func TestHistogramPow2CounterOverflow(t *testing.T) {
	const n = 9*65536 + 37
	c := histConfig{-8, -1024, 2048}
	inBin := make([]float32, n)
	for i := range inBin {
		inBin[i] = 0.5
	}
	outside := make([]float32, n)
	for i := range outside {
		outside[i] = float32(1-2*(i%2)) * 1e6
	}
	for _, v := range statsVariants() {
		if !v.ok {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			histCheck(t, "one bin", v.hist, inBin, c)
			histCheck(t, "out of range", v.hist, outside, c)
		})
	}
}

// TestHistogramPow2RandomLayouts draws bin layouts and data together.
func TestHistogramPow2RandomLayouts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, v := range statsVariants() {
		if !v.ok {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			for i := range 400 {
				c := histConfig{exp: r.IntN(300) - 160, n: 1 + r.IntN(3000)}
				c.start = r.IntN(4*c.n) - 2*c.n
				kind := histKinds[r.IntN(len(histKinds))]
				x := histInput(kind, r.IntN(20000), uint64(i), c)
				histCheck(t, fmt.Sprintf("%v %s", c, kind), v.hist, x, c)
			}
		})
	}
}

// TestHistogramPow2Public checks the exported function, whose dispatch
// picks the reference for short inputs and for layouts the kernels do not
// take, on both sides of those limits.
func TestHistogramPow2Public(t *testing.T) {
	cases := []struct {
		c histConfig
		n int
	}{
		{histConfig{-8, -1024, 2048}, 100}, {histConfig{-8, -1024, 2048}, 100000},
		{histConfig{0, 0, 0}, 1000}, {histConfig{-4, -10, 1<<16 + 1}, 300000},
		{histConfig{-30, 1 << 53, 16}, 5000}, {histConfig{-30, -(1 << 53), 16}, 5000},
		{histConfig{-140, -(1 << 52) + 1, 2048}, 50000},
	}
	for _, tc := range cases {
		for _, kind := range []string{"specials", "bits", "edges"} {
			t.Run(fmt.Sprintf("%v/%d/%s", tc.c, tc.n, kind), func(t *testing.T) {
				x := histInput(kind, tc.n, 9, tc.c)
				histCheck(t, "HistogramPow2", HistogramPow2, x, tc.c)
			})
		}
	}
}

func FuzzHistogramPow2(f *testing.F) {
	seed := func(exp int16, start int64, bins uint16, vals ...float32) {
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		f.Add(b, exp, start, bins)
	}
	seed(0, -1, 4, 0, 0.5, 1, 1.99, 2, 3.5, -0.25, nan32, posInf32, negInf32, negZero, 7, 8, 9, 10, 11)
	seed(-140, 0, 2048, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 0, 1e-40, 1e-39, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	seed(900, -1, 2, 1, -1, math.MaxFloat32, -math.MaxFloat32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	seed(-900, -3, 7, 1e-38, -1e-38, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	f.Fuzz(func(t *testing.T, data []byte, exp int16, start int64, bins uint16) {
		x := make([]float32, len(data)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		c := histConfig{exp: int(exp) % 901, start: int(start), n: int(bins) % 5000}
		histCheck(t, "HistogramPow2", HistogramPow2, x, c)
		if !histKernelOK(c.start, c.n) {
			return
		}
		for _, v := range statsVariants() {
			if v.ok {
				histCheck(t, v.name, v.hist, x, c)
			}
		}
	})
}

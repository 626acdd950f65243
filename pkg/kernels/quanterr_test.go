package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestQuantSqErrsMatchesReference: the kernel's sums equal the scalar
// reference within float32 summation error, for lengths around the vector
// width, candidates clamping at either end, and a candidate whose scale
// leaves every value on the grid.
func TestQuantSqErrsMatchesReference(t *testing.T) {
	scales := []float32{0.01, 0.1, 0.37, 1.5, 0.25}
	inv := make([]float32, len(scales))
	for i, s := range scales {
		inv[i] = 1 / s
	}
	lo := []float32{-8, -8, -3, 0, -8}
	hi := []float32{7, 7, 12, 15, 7}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 32, 33, 128, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(math.Sin(float64(i)*1.3)) * 1.7
			}
			out := make([]float32, len(scales))
			QuantSqErrs(x, inv, scales, lo, hi, out)
			for k := range scales {
				want := float64(0)
				for _, v := range x {
					q := math.RoundToEven(math.Min(math.Max(float64(v*inv[k]), float64(lo[k])), float64(hi[k])))
					d := float64(v - float32(q)*scales[k])
					want += d * d
				}
				if math.Abs(float64(out[k])-want) > 1e-5*want+1e-12 {
					t.Errorf("candidate %d: %g, want %g", k, out[k], want)
				}
			}
		})
	}
	grid := []float32{0.25, -0.5, 1.75, -2, 0, 0.25, 1, -1.75, 0.5}
	out := make([]float32, 1)
	QuantSqErrs(grid, []float32{4}, []float32{0.25}, []float32{-8}, []float32{7}, out)
	if out[0] != 0 {
		t.Errorf("values on the grid: error %g, want 0", out[0])
	}
}

// TestQuantSqErrsKernelMatchesScalar compares QuantSqErrs (the assembly
// kernel where the build has one, then the scalar tail) with
// quantSqErrRef over whole inputs, on every length from 0 to 67 and
// random data with and without NaN and ±Inf. The kernels sum in another
// order, so finite sums of n squares may differ by the reordering bound,
// n·2⁻²³ of the sum (each order is within (n−1)·2⁻²⁴ of the exact sum);
// a NaN anywhere makes every score NaN, else an Inf makes it +Inf, in
// both.
func TestQuantSqErrsKernelMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	scales := []float32{0.003, 0.05, 0.4, 2}
	inv := make([]float32, len(scales))
	for i, s := range scales {
		inv[i] = 1 / s
	}
	lo := []float32{-128, -8, 0, -1}
	hi := []float32{127, 7, 15, 1}
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 1e-40}
	for _, kind := range []string{"finite", "specials"} {
		for n := 0; n <= 67; n++ {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
				if kind == "specials" && r.IntN(8) == 0 {
					x[i] = specials[r.IntN(len(specials))]
				}
			}
			out := make([]float32, len(scales))
			QuantSqErrs(x, inv, scales, lo, hi, out)
			for k := range scales {
				want := quantSqErrRef(x, inv[k], scales[k], lo[k], hi[k])
				got := out[k]
				switch {
				case math.IsNaN(float64(want)) || math.IsInf(float64(want), 0):
					if !sameResultBits(got, want) {
						t.Fatalf("%s n=%d candidate %d: %g, reference %g", kind, n, k, got, want)
					}
				case math.Abs(float64(got)-float64(want)) > float64(n)*0x1p-23*float64(want):
					t.Fatalf("%s n=%d candidate %d: %g, reference %g", kind, n, k, got, want)
				}
			}
		}
	}
}

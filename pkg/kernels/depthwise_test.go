package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDepthwise2DMatchesLoop checks Depthwise2D against the loop its doc
// comment states, summing kernel positions in row-major order with the
// product rounded before each add, bit for bit, over strides, dilations,
// pads and widths on both sides of the vector length.
func TestDepthwise2DMatchesLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	for _, tc := range []struct{ ih, iw, k, s, d, p int }{
		{7, 7, 3, 1, 1, 1}, {12, 37, 3, 1, 1, 1}, {16, 16, 3, 2, 1, 1}, {9, 20, 5, 1, 1, 2}, {10, 33, 3, 1, 2, 2}, {5, 5, 3, 1, 1, 0}, {4, 9, 1, 1, 1, 0},
		// 3×3 row kernels: widths around whole vectors, both strides, pads 0-2.
		{6, 8, 3, 1, 1, 0}, {6, 10, 3, 1, 1, 0}, {6, 9, 3, 1, 1, 1}, {6, 17, 3, 1, 1, 1}, {6, 26, 3, 1, 1, 2}, {3, 2, 3, 1, 1, 1}, {2, 1, 3, 1, 1, 2},
		{6, 17, 3, 2, 1, 0}, {6, 18, 3, 2, 1, 1}, {7, 19, 3, 2, 1, 1}, {6, 28, 3, 2, 1, 1}, {8, 35, 3, 2, 1, 0}, {5, 50, 3, 2, 1, 2}, {4, 3, 3, 2, 1, 1}, {9, 112, 3, 2, 1, 1},
		{3, 56, 3, 3, 1, 1},
	} {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			const c = 3
			oh := (tc.ih+2*tc.p-(tc.k-1)*tc.d-1)/tc.s + 1
			ow := (tc.iw+2*tc.p-(tc.k-1)*tc.d-1)/tc.s + 1
			g := &ConvGeom{In: []int{tc.ih, tc.iw}, Kernel: []int{tc.k, tc.k}, Strides: []int{tc.s, tc.s}, Dilations: []int{tc.d, tc.d}, PadBegin: []int{tc.p, tc.p}, Out: []int{oh, ow}}
			x, w := randSlice(r, c*tc.ih*tc.iw), randSlice(r, c*tc.k*tc.k)
			// Channel 1 has a non-finite weight: Inf·0 on a padded tap
			// would be NaN where the definition skips the tap.
			w[tc.k*tc.k] = float32(math.Inf(1))
			for i := range x {
				if r.IntN(16) == 0 {
					x[i] = dwSpecials[r.IntN(len(dwSpecials))]
				}
			}
			got := randSlice(r, c*oh*ow) // overwritten
			Depthwise2D(g, x, w, got, 0, c, nil)
			for ch := 0; ch < c; ch++ {
				for oy := 0; oy < oh; oy++ {
					for ox := 0; ox < ow; ox++ {
						var acc float32
						for ky := 0; ky < tc.k; ky++ {
							iy := oy*tc.s - tc.p + ky*tc.d
							if iy < 0 || iy >= tc.ih {
								continue
							}
							for kx := 0; kx < tc.k; kx++ {
								ix := ox*tc.s - tc.p + kx*tc.d
								if ix < 0 || ix >= tc.iw {
									continue
								}
								acc += float32(w[(ch*tc.k+ky)*tc.k+kx] * x[(ch*tc.ih+iy)*tc.iw+ix])
							}
						}
						// Bits must agree except among NaNs: which NaN payload an
						// add of two NaNs keeps depends on the operand order of
						// the instruction, which ONNX leaves open.
						if v := got[(ch*oh+oy)*ow+ox]; math.Float32bits(v) != math.Float32bits(acc) && (v == v || acc == acc) {
							t.Fatalf("y[%d,%d,%d] = %g, loop gives %g", ch, oy, ox, v, acc)
						}
					}
				}
			}
		})
	}
}

var dwSpecials = []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-40, 3e38}

// TestDwRow3MatchesReference checks dwRow3 (assembly where the build has
// it) against dwRow3Go bit for bit on every length up to 40, both strides
// and one to three rows, with specials in the inputs and the weights.
func TestDwRow3MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 15))
	draw := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			if r.IntN(4) == 0 {
				x[i] = dwSpecials[r.IntN(len(dwSpecials))]
			} else {
				x[i] = float32(r.NormFloat64())
			}
		}
		return x
	}
	for _, stride := range []int{1, 2} {
		for nr := 1; nr <= 3; nr++ {
			for n := 0; n <= 40; n++ {
				ldx := stride*n + 5
				x, w := draw(nr*ldx), draw(9)
				if n%5 == 0 {
					w = []float32{0.5, -2, 0, 1e-39, 3e38, -1, 7, float32(math.Copysign(0, -1)), 1}
				}
				got, want := draw(n), make([]float32, n)
				dwRow3(got, x, ldx, nr, stride, w)
				dwRow3Go(want, x, ldx, nr, stride, w)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("stride %d, %d rows, n=%d: [%d] = %g, reference %g", stride, nr, n, i, got[i], want[i])
					}
				}
			}
		}
	}
}

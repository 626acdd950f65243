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
	} {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			const c = 3
			oh := (tc.ih+2*tc.p-(tc.k-1)*tc.d-1)/tc.s + 1
			ow := (tc.iw+2*tc.p-(tc.k-1)*tc.d-1)/tc.s + 1
			g := &ConvGeom{In: []int{tc.ih, tc.iw}, Kernel: []int{tc.k, tc.k}, Strides: []int{tc.s, tc.s}, Dilations: []int{tc.d, tc.d}, PadBegin: []int{tc.p, tc.p}, Out: []int{oh, ow}}
			x, w := randSlice(r, c*tc.ih*tc.iw), randSlice(r, c*tc.k*tc.k)
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
						if v := got[(ch*oh+oy)*ow+ox]; math.Float32bits(v) != math.Float32bits(acc) {
							t.Fatalf("y[%d,%d,%d] = %g, loop gives %g", ch, oy, ox, v, acc)
						}
					}
				}
			}
		})
	}
}

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmConvBitIdentical checks SgemmConv, whose B panels are gathered
// from the image or read in place by wide columns (sgemmWide), against
// Im2col followed by SgemmPacked, bit for bit, on every micro-kernel
// family and 1-3 threads: strides 1-3, dilations, pads (pe is the end
// padding, −1 for p), output rows shorter and longer than a panel, several
// k blocks (k > kc), column blocks (n > nc) and wide chunks, more rows than
// a row block (m > mc), threads splitting the output channels or the
// wide columns, with no epilogue, a row epilogue and a residual.
func TestSgemmConvBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	wide := 0
	for _, tc := range []struct{ c, m, ih, iw, kh, kw, s, d, p, pe int }{
		{3, 8, 7, 7, 3, 3, 1, 1, 1, -1}, {2, 5, 9, 40, 3, 3, 1, 1, 1, -1}, {4, 13, 16, 16, 3, 3, 2, 1, 1, -1},
		{3, 7, 15, 15, 7, 7, 2, 1, 3, -1}, {2, 4, 10, 33, 3, 3, 1, 2, 2, -1}, {30, 17, 8, 9, 3, 3, 1, 1, 1, -1},
		{5, 3, 12, 50, 1, 3, 3, 1, 0, -1}, {2, 6, 40, 40, 3, 1, 1, 1, 0, -1}, {1, 1, 2, 1, 3, 3, 1, 1, 2, -1},
		{64, 20, 6, 6, 1, 1, 2, 1, 0, -1}, {3, 9, 5, 70, 2, 2, 2, 1, 1, -1},
		{3, 24, 40, 40, 3, 3, 1, 1, 1, -1}, {2, 150, 6, 7, 3, 3, 1, 1, 1, -1}, {1, 16, 28, 28, 5, 5, 1, 1, 2, -1},
		{4, 12, 9, 11, 3, 3, 1, 1, 2, 0}, {3, 5, 8, 12, 3, 3, 1, 1, 0, 2}, {29, 36, 8, 8, 3, 3, 1, 1, 1, -1},
		{2, 8, 37, 25, 5, 5, 1, 1, 2, -1}, // two threads split the panels at a dropped column
	} {
		if tc.pe < 0 {
			tc.pe = tc.p
		}
		oh := (tc.ih+tc.p+tc.pe-(tc.kh-1)*tc.d-1)/tc.s + 1
		ow := (tc.iw+tc.p+tc.pe-(tc.kw-1)*tc.d-1)/tc.s + 1
		g := &ConvGeom{In: []int{tc.ih, tc.iw}, Kernel: []int{tc.kh, tc.kw}, Strides: []int{tc.s, tc.s}, Dilations: []int{tc.d, tc.d}, PadBegin: []int{tc.p, tc.p}, Out: []int{oh, ow}}
		if _, ok := widePitch(g, tc.m, 32); ok {
			wide++
		}
		for _, arch := range gemmArches() {
			t.Run(fmt.Sprintf("%s/%+v", arch.name, tc), func(t *testing.T) {
				saved := activeGemm
				activeGemm = arch
				defer func() { activeGemm = saved }()
				k, n := tc.c*tc.kh*tc.kw, oh*ow
				x, w := randSlice(r, tc.c*tc.ih*tc.iw), randSlice(r, tc.m*k)
				for i := range x {
					if r.IntN(32) == 0 {
						x[i] = dwSpecials[r.IntN(len(dwSpecials))]
					}
				}
				pa := PackA(false, tc.m, k, 1, w, k)
				col := randSlice(r, k*n) // overwritten
				Im2col(g, tc.c, x, col)
				bias, scale, shift, res := randSlice(r, tc.m), randSlice(r, tc.m), randSlice(r, tc.m), randSlice(r, tc.m*n)
				for _, ep := range []*Epilogue{nil, {RowBias: bias, Act: ActRelu}, {RowScale: scale, RowShift: shift},
					{RowBias: bias, Residual: res, Act: ActRelu}} {
					for threads := 1; threads <= 3; threads++ {
						want, got := randSlice(r, tc.m*n), randSlice(r, tc.m*n) // overwritten
						SgemmPacked(threads, pa, n, false, col, n, 0, want, n, ep)
						SgemmConv(threads, pa, g, x, got, n, ep)
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("threads %d ep %+v: y[%d] = %g (%#x), im2col gives %g (%#x)", threads, ep, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
							}
						}
					}
				}
			})
		}
	}
	if wide < 10 {
		t.Errorf("%d cases take wide columns; the table should keep at least 10", wide)
	}
}

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
	wide, shiftedCases := 0, 0
	for _, tc := range []struct{ c, m, ih, iw, kh, kw, s, d, p, pe int }{
		{3, 8, 7, 7, 3, 3, 1, 1, 1, -1}, {2, 5, 9, 40, 3, 3, 1, 1, 1, -1}, {4, 13, 16, 16, 3, 3, 2, 1, 1, -1},
		{3, 7, 15, 15, 7, 7, 2, 1, 3, -1}, {2, 4, 10, 33, 3, 3, 1, 2, 2, -1}, {30, 17, 8, 9, 3, 3, 1, 1, 1, -1},
		{5, 3, 12, 50, 1, 3, 3, 1, 0, -1}, {2, 6, 40, 40, 3, 1, 1, 1, 0, -1}, {1, 1, 2, 1, 3, 3, 1, 1, 2, -1},
		{64, 20, 6, 6, 1, 1, 2, 1, 0, -1}, {3, 9, 5, 70, 2, 2, 2, 1, 1, -1},
		{3, 24, 40, 40, 3, 3, 1, 1, 1, -1}, {2, 150, 6, 7, 3, 3, 1, 1, 1, -1}, {1, 16, 28, 28, 5, 5, 1, 1, 2, -1},
		{4, 12, 9, 11, 3, 3, 1, 1, 2, 0}, {3, 5, 8, 12, 3, 3, 1, 1, 0, 2}, {29, 36, 8, 8, 3, 3, 1, 1, 1, -1},
		{2, 8, 37, 25, 5, 5, 1, 1, 2, -1}, // two threads split the panels at a dropped column
		{2, 3, 4, 1, 3, 3, 1, 3, 3, -1},   // shifted copies whose taps lie wholly in the padding
	} {
		if tc.pe < 0 {
			tc.pe = tc.p
		}
		oh := (tc.ih+tc.p+tc.pe-(tc.kh-1)*tc.d-1)/tc.s + 1
		ow := (tc.iw+tc.p+tc.pe-(tc.kw-1)*tc.d-1)/tc.s + 1
		g := &ConvGeom{In: []int{tc.ih, tc.iw}, Kernel: []int{tc.kh, tc.kw}, Strides: []int{tc.s, tc.s}, Dilations: []int{tc.d, tc.d}, PadBegin: []int{tc.p, tc.p}, Out: []int{oh, ow}}
		if _, _, ok := wideLayout(g, tc.m, tc.c, 32); ok {
			wide++
		}
		if _, shifted, _ := wideLayout(g, tc.m, tc.c, 32); shifted {
			shiftedCases++
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
						// Layouts: the chosen one, then packed panels,
						// padded and shifted wide columns forced.
						for _, layout := range []int{0, -1, 1, 2} {
							if layout != 0 && !wideEligible(g) {
								break
							}
							wideLayoutOverride = layout
							SgemmConv(threads, pa, g, x, got, n, ep)
							wideLayoutOverride = 0
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("threads %d ep %+v layout %d: y[%d] = %g (%#x), im2col gives %g (%#x)", threads, ep, layout, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
								}
							}
							for i := range got {
								got[i] = math.Float32frombits(0x7fa5a5a5) // unwritten
							}
						}
					}
				}
			})
		}
	}
	if wide < 10 || shiftedCases < 3 {
		t.Errorf("%d cases take wide columns, %d of them shifted; the table should keep at least 10 and 3", wide, shiftedCases)
	}
}

// BenchmarkSgemmConv times the stride-1 convolutions of LeNet,
// digits_resnet and ResNet-18 on one thread, each computed the way
// wideLayout chooses and by every layout forced.
func BenchmarkSgemmConv(b *testing.B) {
	for _, bc := range []struct {
		name           string
		c, m, in, k, p int
	}{
		{"lenet1x28k5", 1, 16, 28, 5, 2},
		{"lenet16x14k5", 16, 32, 14, 5, 0},
		{"dres32x32", 32, 32, 32, 3, 1},
		{"dres64x16", 64, 64, 16, 3, 1},
		{"dres128x8", 128, 128, 8, 3, 1},
		{"resnet128x28", 128, 128, 28, 3, 1},
		{"resnet512x7", 512, 512, 7, 3, 1},
	} {
		out := bc.in + 2*bc.p - bc.k + 1
		g := &ConvGeom{In: []int{bc.in, bc.in}, Kernel: []int{bc.k, bc.k}, Strides: []int{1, 1}, Dilations: []int{1, 1},
			PadBegin: []int{bc.p, bc.p}, Out: []int{out, out}}
		r := rand.New(rand.NewPCG(1, 2))
		k := bc.c * bc.k * bc.k
		x, w := randSlice(r, bc.c*bc.in*bc.in), randSlice(r, bc.m*k)
		y := make([]float32, bc.m*out*out)
		pa := PackA(false, bc.m, k, 1, w, k)
		for layout, name := range map[int]string{0: "chosen", -1: "packed", 1: "padded", 2: "shifted"} {
			b.Run(bc.name+"/"+name, func(b *testing.B) {
				wideLayoutOverride = layout
				defer func() { wideLayoutOverride = 0 }()
				for b.Loop() {
					SgemmConv(1, pa, g, x, y, out*out, nil)
				}
				b.ReportMetric(float64(2*bc.m*k*out*out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
			})
		}
	}
}

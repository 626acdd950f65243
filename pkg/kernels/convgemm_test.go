package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestSgemmConvBitIdentical checks SgemmConv, whose B panels are gathered
// from the image or read in place by wide columns (sgemmWide), against
// Im2col followed by SgemmPacked, bit for bit, on every micro-kernel
// family and 1-3 threads: strides 1-3, dilations, pads (pe is the end
// padding, −1 for p), output rows shorter and longer than a panel, several
// k blocks (k > kc), column blocks (n > nc) and wide chunks, more rows than
// a row block (m > mc), threads splitting the output channels or the
// wide columns, row tiles of every width, channel blocks of 32 and less,
// with no epilogue, a row epilogue and a residual, each case computed the
// way PlanConv chooses and every other way it can be.
func TestSgemmConvBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	// The ways are counted as the AVX-512 kernels would choose them.
	countArch := *goArch
	countArch.nr, countArch.mr = 32, 12
	countArch.convRow = func(int, int, int, *float32, *int, *float32, *float32, bool) {}
	ways := map[ConvWay]int{}
	for _, tc := range []struct{ c, m, ih, iw, kh, kw, s, d, p, pe int }{
		{3, 8, 7, 7, 3, 3, 1, 1, 1, -1}, {2, 5, 9, 40, 3, 3, 1, 1, 1, -1}, {4, 13, 16, 16, 3, 3, 2, 1, 1, -1},
		{3, 7, 15, 15, 7, 7, 2, 1, 3, -1}, {2, 4, 10, 33, 3, 3, 1, 2, 2, -1}, {30, 17, 8, 9, 3, 3, 1, 1, 1, -1},
		{5, 3, 12, 50, 1, 3, 3, 1, 0, -1}, {2, 6, 40, 40, 3, 1, 1, 1, 0, -1}, {1, 1, 2, 1, 3, 3, 1, 1, 2, -1},
		{64, 20, 6, 6, 1, 1, 2, 1, 0, -1}, {3, 9, 5, 70, 2, 2, 2, 1, 1, -1},
		{3, 24, 40, 40, 3, 3, 1, 1, 1, -1}, {2, 150, 6, 7, 3, 3, 1, 1, 1, -1}, {1, 16, 28, 28, 5, 5, 1, 1, 2, -1},
		{4, 12, 9, 11, 3, 3, 1, 1, 2, 0}, {3, 5, 8, 12, 3, 3, 1, 1, 0, 2}, {29, 36, 8, 8, 3, 3, 1, 1, 1, -1},
		{2, 8, 37, 25, 5, 5, 1, 1, 2, -1}, // two threads split the panels at a dropped column
		{2, 3, 4, 1, 3, 3, 1, 3, 3, -1},   // shifted copies whose taps lie wholly in the padding
		{1, 32, 32, 32, 3, 3, 1, 1, 1, -1}, {16, 32, 14, 14, 5, 5, 1, 1, 0, -1}, {3, 40, 17, 23, 3, 3, 2, 1, 1, -1},
	} {
		if tc.pe < 0 {
			tc.pe = tc.p
		}
		oh := (tc.ih+tc.p+tc.pe-(tc.kh-1)*tc.d-1)/tc.s + 1
		ow := (tc.iw+tc.p+tc.pe-(tc.kw-1)*tc.d-1)/tc.s + 1
		g := &ConvGeom{In: []int{tc.ih, tc.iw}, Kernel: []int{tc.kh, tc.kw}, Strides: []int{tc.s, tc.s}, Dilations: []int{tc.d, tc.d}, PadBegin: []int{tc.p, tc.p}, Out: []int{oh, ow}}
		ways[PlanConv(&PackedA{arch: &countArch, m: tc.m, k: tc.c * tc.kh * tc.kw}, g, ConvAuto).Way]++
		for _, arch := range gemmArches() {
			t.Run(fmt.Sprintf("%s/%+v", arch.name, tc), func(t *testing.T) {
				k, n := tc.c*tc.kh*tc.kw, oh*ow
				x, w := randSlice(r, tc.c*tc.ih*tc.iw), randSlice(r, tc.m*k)
				for i := range x {
					if r.IntN(32) == 0 {
						x[i] = dwSpecials[r.IntN(len(dwSpecials))]
					}
				}
				pa := packAFor(arch, false, tc.m, k, 1, w, k)
				col := randSlice(r, k*n) // overwritten
				Im2col(g, tc.c, x, col)
				bias, scale, shift, res := randSlice(r, tc.m), randSlice(r, tc.m), randSlice(r, tc.m), randSlice(r, tc.m*n)
				for _, ep := range []*Epilogue{nil, {RowBias: bias, Act: ActRelu}, {RowScale: scale, RowShift: shift},
					{RowBias: bias, Residual: res, Act: ActRelu}} {
					for threads := 1; threads <= 3; threads++ {
						want, got := randSlice(r, tc.m*n), randSlice(r, tc.m*n) // overwritten
						SgemmPacked(threads, pa, n, false, col, n, 0, want, n, ep)
						// The chosen way, then every way forced.
						for _, layout := range []ConvWay{ConvAuto, ConvPacked, ConvPadded, ConvShifted, ConvRows} {
							plan := PlanConv(pa, g, layout)
							if layout != ConvAuto && plan.Way != layout {
								continue
							}
							SgemmConv(threads, pa, g, plan, x, got, n, ep)
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("threads %d ep %+v layout %s: y[%d] = %g (%#x), im2col gives %g (%#x)", threads, ep, layout, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
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
	if ways[ConvPadded]+ways[ConvShifted] < 10 || ways[ConvShifted] < 3 || ways[ConvRows] < 3 {
		t.Errorf("ways chosen %v: the table should keep at least 10 cases on wide columns, 3 of them shifted, and 3 on row tiles", ways)
	}
}

// BenchmarkSgemmConv times convolutions of LeNet, digits_resnet,
// ResNet-18 and SqueezeNet on one and two threads, each computed the way
// PlanConv chooses and by every way forced.
func BenchmarkSgemmConv(b *testing.B) {
	for _, bc := range []struct {
		name              string
		c, m, in, k, p, s int
	}{
		{"lenet1x28k5", 1, 16, 28, 5, 2, 1},
		{"lenet16x14k5", 16, 32, 14, 5, 0, 1},
		{"dres1x32", 1, 32, 32, 3, 1, 1},
		{"dres32x32", 32, 32, 32, 3, 1, 1},
		{"dres32x32k1s2", 32, 64, 32, 1, 0, 2},
		{"dres64x16", 64, 64, 16, 3, 1, 1},
		{"dres128x8", 128, 128, 8, 3, 1, 1},
		{"dres64x16s2", 64, 128, 16, 3, 1, 2},
		{"resnet3x224k7s2", 3, 64, 224, 7, 3, 2},
		{"resnet64x56", 64, 64, 56, 3, 1, 1},
		{"resnet64x56s2", 64, 128, 56, 3, 1, 2},
		{"resnet128x28", 128, 128, 28, 3, 1, 1},
		{"resnet256x14", 256, 256, 14, 3, 1, 1},
		{"resnet512x7", 512, 512, 7, 3, 1, 1},
		{"resnet256x14k1s2", 256, 512, 14, 1, 0, 2},
		{"squeeze16x55", 16, 64, 55, 3, 1, 1},
		{"squeeze48x13", 48, 192, 13, 3, 1, 1},
		{"squeeze3x224s2", 3, 64, 224, 3, 0, 2},
	} {
		out := (bc.in+2*bc.p-bc.k)/bc.s + 1
		g := &ConvGeom{In: []int{bc.in, bc.in}, Kernel: []int{bc.k, bc.k}, Strides: []int{bc.s, bc.s}, Dilations: []int{1, 1},
			PadBegin: []int{bc.p, bc.p}, Out: []int{out, out}}
		r := rand.New(rand.NewPCG(1, 2))
		k := bc.c * bc.k * bc.k
		x, w := randSlice(r, bc.c*bc.in*bc.in), randSlice(r, bc.m*k)
		y := make([]float32, bc.m*out*out)
		pa := PackA(false, bc.m, k, 1, w, k)
		for _, threads := range []int{1, 2} {
			for _, layout := range []ConvWay{ConvAuto, ConvPacked, ConvPadded, ConvShifted, ConvRows} {
				plan, name := PlanConv(pa, g, layout), layout.String()
				if layout == ConvAuto {
					name = "chosen"
				} else if plan.Way != layout {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/t%d", bc.name, name, threads), func(b *testing.B) {
					for b.Loop() {
						SgemmConv(threads, pa, g, plan, x, y, out*out, nil)
					}
					b.ReportMetric(float64(2*bc.m*k*out*out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
			}
		}
	}
}

// TestConvRowsWidths checks the row tiles of every width and both column
// strides against Im2col followed by SgemmPacked, bit for bit: output rows
// of 1 to 30 pixels are one tile or two of every width up to
// convRowPixels, over one and two k blocks.
func TestConvRowsWidths(t *testing.T) {
	if !convRowsEligible(activeGemm, &ConvGeom{In: []int{1, 1}, Strides: []int{1, 1}}) {
		t.Skipf("the %s kernels have no row tiles", activeGemm.name)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range []int{1, 2} {
		for ow := 1; ow <= 30; ow++ {
			for _, tc := range []struct{ c, m int }{{3, 37}, {40, 32}} {
				iw := (ow-1)*s + 3
				g := &ConvGeom{In: []int{4, iw}, Kernel: []int{3, 3}, Strides: []int{1, s}, Dilations: []int{1, 1}, PadBegin: []int{0, 0}, Out: []int{2, ow}}
				k, n := tc.c*9, 2*ow
				x, w := randSlice(r, tc.c*4*iw), randSlice(r, tc.m*k)
				pa := PackA(false, tc.m, k, 1, w, k)
				col := make([]float32, k*n)
				Im2col(g, tc.c, x, col)
				ep := &Epilogue{RowBias: randSlice(r, tc.m), Act: ActRelu}
				want, got := make([]float32, tc.m*n), make([]float32, tc.m*n)
				SgemmPacked(1, pa, n, false, col, n, 0, want, n, ep)
				SgemmConv(1, pa, g, PlanConv(pa, g, ConvRows), x, got, n, ep)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("stride %d, %d outputs a row, %+v: y[%d] = %g, im2col gives %g", s, ow, tc, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestConvRowStoreMatchesReference checks the arch's row tile store
// against convRowStoreGo bit for bit: every tile width and channel count,
// with no epilogue, the row epilogue, a residual either side of the
// addition and a Relu, on special values.
func TestConvRowStoreMatchesReference(t *testing.T) {
	store := activeGemm.convRowStore
	if store == nil {
		t.Skipf("the %s kernels have no row tiles", activeGemm.name)
	}
	r := rand.New(rand.NewPCG(7, 8))
	special := func(s []float32) []float32 {
		for i := range s {
			if r.IntN(8) == 0 {
				s[i] = dwSpecials[r.IntN(len(dwSpecials))]
			}
		}
		return s
	}
	tile := special(randSlice(r, 16*convRowChannels))
	ep := randSlice(r, 3*convRowChannels)
	const ldc = 37
	res := special(randSlice(r, convRowChannels*ldc))
	for pixels := 1; pixels <= convRowPixels; pixels++ {
		for channels := 1; channels <= convRowChannels; channels++ {
			for mode := range 16 {
				var e, rp *float32
				if mode&1 != 0 {
					e = &ep[0]
				}
				if mode&2 != 0 {
					rp = &res[0]
				}
				relu, first := mode&4 != 0, mode&8 != 0
				want, got := randSlice(r, convRowChannels*ldc), randSlice(r, convRowChannels*ldc)
				copy(got, want)
				convRowStoreGo(&tile[0], pixels, &want[0], ldc, channels, e, rp, relu, first)
				store(&tile[0], pixels, &got[0], ldc, channels, e, rp, relu, first)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("pixels %d channels %d mode %d: c[%d] = %g (%#x), want %g (%#x)", pixels, channels, mode, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// convRowStoreGo is the reference of the convRowStore kernels: the
// pixel-major tile (rows 32 floats apart) goes to the first pixels
// columns of channels rows of c, ldc apart, through Epilogue.apply's steps
// with its roundings and operand orders: each value v of channel j becomes
// ((v + b[j])·s[j]) + t[j] when ep (b, s and t, 32 floats each) is not
// nil, then res + v (resFirst) or v + res when res (laid out as c) is not
// nil, then 0 if relu and ≤ 0.
func convRowStoreGo(tile *float32, pixels int, c *float32, ldc, channels int, ep, res *float32, relu, resFirst bool) {
	ts := unsafe.Slice(tile, pixels*convRowChannels)
	cs := unsafe.Slice(c, (channels-1)*ldc+pixels)
	var eps, rs []float32
	if ep != nil {
		eps = unsafe.Slice(ep, 3*convRowChannels)
	}
	if res != nil {
		rs = unsafe.Slice(res, (channels-1)*ldc+pixels)
	}
	for j := range channels {
		dst := cs[j*ldc : j*ldc+pixels]
		for r := range dst {
			v := ts[r*convRowChannels+j]
			if eps != nil {
				v = float32(float32(v+eps[j])*eps[convRowChannels+j]) + eps[2*convRowChannels+j]
			}
			switch {
			case rs != nil && resFirst:
				v = rs[j*ldc+r] + v
			case rs != nil:
				v += rs[j*ldc+r]
			}
			if relu && v <= 0 {
				v = 0
			}
			dst[r] = v
		}
	}
}

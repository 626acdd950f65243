package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

// naiveGemm is the textbook triple loop in float64.
func naiveGemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if ta {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if tb {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = float64(alpha)*s + float64(beta)*float64(c[i*ldc+j])
		}
	}
	return out
}

func TestSgemmRef(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		m, n, k     int
		ta, tb      bool
		alpha, beta float32
	}{
		{1, 1, 1, false, false, 1, 0}, {3, 5, 7, false, false, 1, 0}, {4, 6, 5, true, false, 0.5, 1},
		{7, 3, 9, false, true, 2, 0.25}, {8, 8, 8, true, true, 1, 1}, {65, 70, 33, false, false, 1, 0},
	} {
		lda, ldb := tc.k, tc.n
		if tc.ta {
			lda = tc.m
		}
		if tc.tb {
			ldb = tc.k
		}
		a, b := randSlice(r, tc.m*tc.k), randSlice(r, tc.k*tc.n)
		c0 := randSlice(r, tc.m*tc.n)
		want := naiveGemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c0, tc.n)
		c := append([]float32(nil), c0...)
		SgemmRef(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, tc.n)
		for i := range c {
			if math.Abs(float64(c[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
				t.Fatalf("%+v: C[%d] = %g, want %g", tc, i, c[i], want[i])
			}
		}
	}
}

func TestSgemmBetaZeroIgnoresNaN(t *testing.T) {
	c := []float32{float32(math.NaN())}
	Sgemm(false, false, 1, 1, 1, 1, []float32{2}, 1, []float32{3}, 1, 0, c, 1)
	if c[0] != 6 {
		t.Errorf("C = %g, want 6", c[0])
	}
}

// directConv2D is a convolution by its definition, for checking Im2col.
func directConv2D(x []float32, c, h, w int, wt []float32, m, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow int) []float32 {
	y := make([]float32, m*oh*ow)
	for o := 0; o < m; o++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				var s float32
				for ch := 0; ch < c; ch++ {
					for ky := 0; ky < kh; ky++ {
						for kx := 0; kx < kw; kx++ {
							iy, ix := oy*sh-ph+ky*dh, ox*sw-pw+kx*dw
							if iy < 0 || iy >= h || ix < 0 || ix >= w {
								continue
							}
							s += x[(ch*h+iy)*w+ix] * wt[((o*c+ch)*kh+ky)*kw+kx]
						}
					}
				}
				y[(o*oh+oy)*ow+ox] = s
			}
		}
	}
	return y
}

func TestIm2colConv(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c, h, w, m := 3, 7, 6, 4
	kh, kw, sh, sw, ph, pw, dh, dw := 3, 2, 2, 1, 1, 0, 1, 2
	oh := (h+2*ph-((kh-1)*dh+1))/sh + 1
	ow := (w+2*pw-((kw-1)*dw+1))/sw + 1
	x, wt := randSlice(r, c*h*w), randSlice(r, m*c*kh*kw)
	want := directConv2D(x, c, h, w, wt, m, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
	for _, nd3 := range []bool{false, true} {
		g := &ConvGeom{In: []int{h, w}, Kernel: []int{kh, kw}, Strides: []int{sh, sw}, Dilations: []int{dh, dw}, PadBegin: []int{ph, pw}, Out: []int{oh, ow}}
		if nd3 {
			// The same problem as 3-D with a unit leading axis takes the generic path.
			g = &ConvGeom{In: []int{1, h, w}, Kernel: []int{1, kh, kw}, Strides: []int{1, sh, sw}, Dilations: []int{1, dh, dw}, PadBegin: []int{0, ph, pw}, Out: []int{1, oh, ow}}
		}
		col := make([]float32, c*g.KernelSize()*g.OutSize())
		Im2col(g, c, x, col)
		y := make([]float32, m*oh*ow)
		Sgemm(false, false, m, g.OutSize(), c*g.KernelSize(), 1, wt, c*g.KernelSize(), col, g.OutSize(), 0, y, g.OutSize())
		for i := range y {
			if math.Abs(float64(y[i]-want[i])) > 1e-5 {
				t.Fatalf("3-D %v: y[%d] = %g, want %g", nd3, i, y[i], want[i])
			}
		}
	}
}

// TestCol2im2D checks the 2-D Col2im, on one thread and split over two
// and three, bit for bit against the generic walk of the column matrix
// (the reference loop of Col2im's comment), for strides, dilations and
// paddings wide enough that whole kernel rows and columns fall outside.
func TestCol2im2D(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	for _, tc := range []struct{ c, h, w, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw int }{
		{3, 7, 6, 3, 2, 2, 1, 1, 0, 1, 0, 1, 2},
		{2, 5, 5, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
		{4, 8, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
		{2, 6, 7, 4, 4, 2, 3, 3, 2, 1, 3, 1, 1},
		{1, 3, 4, 3, 3, 1, 2, 4, 5, 4, 5, 2, 2},
		{3, 9, 4, 5, 1, 3, 1, 2, 0, 2, 0, 2, 1},
	} {
		oh := (tc.h+tc.pt+tc.pb-((tc.kh-1)*tc.dh+1))/tc.sh + 1
		ow := (tc.w+tc.pl+tc.pr-((tc.kw-1)*tc.dw+1))/tc.sw + 1
		g := &ConvGeom{In: []int{tc.h, tc.w}, Kernel: []int{tc.kh, tc.kw}, Strides: []int{tc.sh, tc.sw}, Dilations: []int{tc.dh, tc.dw}, PadBegin: []int{tc.pt, tc.pl}, Out: []int{oh, ow}}
		col := randSlice(r, tc.c*g.KernelSize()*g.OutSize())
		init := randSlice(r, tc.c*g.InSize())
		want := slices.Clone(init)
		colWalk(g, tc.c, func(ci, xi int) {
			if xi >= 0 {
				want[xi] += col[ci]
			}
		})
		for threads := 1; threads <= 3; threads++ {
			got := slices.Clone(init)
			Col2imParallel(threads, g, tc.c, col, got)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v threads %d: x[%d] = %g, the generic walk gives %g", tc, threads, i, got[i], want[i])
				}
			}
		}
	}
}

func TestPool(t *testing.T) {
	// 1×4×4 plane 0..15, 2×2 window stride 2.
	x := make([]float32, 16)
	for i := range x {
		x[i] = float32(i)
	}
	g := &ConvGeom{In: []int{4, 4}, Kernel: []int{2, 2}, Strides: []int{2, 2}, Dilations: []int{1, 1}, PadBegin: []int{0, 0}, Out: []int{2, 2}}
	y := make([]float32, 4)
	idx := make([]int64, 4)
	Pool(g, 1, x, y, true, false, []int{0, 0}, idx)
	if want := []float32{5, 7, 13, 15}; !equalF(y, want) {
		t.Errorf("max pool = %v, want %v", y, want)
	}
	if idx[3] != 15 {
		t.Errorf("argmax = %v", idx)
	}
	Pool(g, 1, x, y, false, false, []int{0, 0}, nil)
	if want := []float32{2.5, 4.5, 10.5, 12.5}; !equalF(y, want) {
		t.Errorf("average pool = %v, want %v", y, want)
	}
	// Padding: a 3×3 window with pad 1 at the corner sees 4 values; with
	// count_include_pad it divides by 9.
	g = &ConvGeom{In: []int{4, 4}, Kernel: []int{3, 3}, Strides: []int{1, 1}, Dilations: []int{1, 1}, PadBegin: []int{1, 1}, Out: []int{4, 4}}
	y = make([]float32, 16)
	Pool(g, 1, x, y, false, false, []int{1, 1}, nil)
	if y[0] != (0+1+4+5)/4.0 {
		t.Errorf("corner average = %g", y[0])
	}
	Pool(g, 1, x, y, false, true, []int{1, 1}, nil)
	if y[0] != (0+1+4+5)/9.0 {
		t.Errorf("corner average with pads = %g", y[0])
	}
}

func equalF(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSoftmaxAndLayerNorm(t *testing.T) {
	x := []float32{1, 2, 3, 1000, 1000, 1000}
	y := make([]float32, 6)
	Softmax(x, y, 2, 3, false)
	e := []float64{math.Exp(-2), math.Exp(-1), 1}
	s := e[0] + e[1] + e[2]
	for j := 0; j < 3; j++ {
		if math.Abs(float64(y[j])-e[j]/s) > 1e-6 || math.Abs(float64(y[3+j])-1.0/3) > 1e-6 {
			t.Fatalf("softmax = %v", y)
		}
	}
	Softmax(x, y, 2, 3, true)
	if math.Abs(float64(y[2])-math.Log(1/s)) > 1e-6 {
		t.Errorf("log-softmax = %v", y)
	}
	mean, inv := make([]float32, 1), make([]float32, 1)
	LayerNorm([]float32{1, 2, 3, 4}, y[:4], 1, 4, []float32{1, 1, 2, 2}, []float32{0, 0, 0, 1}, 0, mean, inv)
	sd := math.Sqrt(1.25)
	want := []float64{-1.5 / sd, -0.5 / sd, 2 * 0.5 / sd, 2*1.5/sd + 1}
	for i, w := range want {
		if math.Abs(float64(y[i])-w) > 1e-6 {
			t.Fatalf("layer norm = %v, want %v", y[:4], want)
		}
	}
	if mean[0] != 2.5 || math.Abs(float64(inv[0])-1/sd) > 1e-6 {
		t.Errorf("mean %g inv std %g", mean[0], inv[0])
	}
}

// TestSum checks Sum against the float64 sum in order, within float64
// rounding of the magnitudes summed (the lanes reorder the sum), over
// lengths around whole vectors, and that it is exact on integers.
func TestSum(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 6400} {
		x := randSlice(r, n)
		var want, mag float64
		for _, v := range x {
			want += float64(v)
			mag += math.Abs(float64(v))
		}
		if got := Sum(x); math.Abs(got-want) > 1e-14*mag+1e-300 {
			t.Errorf("n=%d: Sum = %.17g, in-order sum %.17g", n, got, want)
		}
		for i := range x {
			x[i] = float32(i%7 - 3)
		}
		want = 0
		for _, v := range x {
			want += float64(v)
		}
		if got := Sum(x); got != want {
			t.Errorf("n=%d integers: Sum = %g, want %g", n, got, want)
		}
	}
}

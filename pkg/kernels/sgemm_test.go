package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmArches checks every micro-kernel family this CPU runs against a
// float64 product over odd sizes, transposes, leading dimensions wider
// than the matrices, alpha and beta. The tolerance is 1e-5·√k·(1+|C|):
// float32 rounding of a k-term sum with fused or separate multiply-adds.
func TestSgemmArches(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type tcase struct {
		m, n, k     int
		ta, tb      bool
		alpha, beta float32
		pad         int // extra leading-dimension elements
	}
	cases := []tcase{
		{1, 1, 1, false, false, 1, 0, 0}, {3, 5, 7, false, false, 1, 0, 0}, {4, 6, 5, true, false, 0.5, 1, 3},
		{7, 3, 9, false, true, 2, 0.25, 1}, {8, 8, 8, true, true, 1, 1, 0}, {65, 70, 33, false, false, 1, 0, 0},
		{13, 33, 257, false, false, 1, 0, 5}, {12, 32, 256, false, false, 1, 0, 0}, {25, 97, 300, true, true, -1, 2, 2},
		{1, 300, 77, false, false, 1, 0, 0}, {300, 1, 77, false, true, 1, 0, 0}, {150, 1100, 40, false, false, 1, 0.5, 0},
		{200, 49, 600, false, false, 1, 0, 0}, {37, 64, 513, true, false, 1, 0, 7},
	}
	for _, arch := range gemmArches() {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%dx%dx%d/ta=%v/tb=%v/beta=%g/pad=%d", arch.name, tc.m, tc.n, tc.k, tc.ta, tc.tb, tc.beta, tc.pad), func(t *testing.T) {
				lda, ldb, ldc := tc.k+tc.pad, tc.n+tc.pad, tc.n+tc.pad
				arows, brows := tc.m, tc.k
				if tc.ta {
					lda, arows = tc.m+tc.pad, tc.k
				}
				if tc.tb {
					ldb, brows = tc.k+tc.pad, tc.n
				}
				a, b := randSlice(r, arows*lda), randSlice(r, brows*ldb)
				c0 := randSlice(r, tc.m*ldc)
				want := naiveGemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c0, ldc)
				c := append([]float32(nil), c0...)
				gemmBlocked(arch, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
				tol := 1e-5 * math.Sqrt(float64(tc.k))
				for i := 0; i < tc.m; i++ {
					for j := 0; j < ldc; j++ {
						got := c[i*ldc+j]
						if j >= tc.n {
							if got != c0[i*ldc+j] {
								t.Fatalf("C[%d,%d] outside the matrix changed: %g, was %g", i, j, got, c0[i*ldc+j])
							}
							continue
						}
						w := want[i*tc.n+j]
						if math.Abs(float64(got)-w) > tol*(1+math.Abs(w)) {
							t.Fatalf("C[%d,%d] = %g, want %g", i, j, got, w)
						}
					}
				}
			})
		}
	}
}

// TestSgemmParallelBitIdentical checks that the thread count does not
// change a single bit of the result.
func TestSgemmParallelBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sz := range [][3]int{{65, 70, 33}, {300, 64, 700}, {40, 3000, 100}, {700, 20, 50}, {3, 5, 7}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b, c0 := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, m*n)
		c1 := append([]float32(nil), c0...)
		Sgemm(false, false, m, n, k, 1, a, k, b, n, 0.5, c1, n)
		for _, threads := range []int{2, 3, 8} {
			cp := append([]float32(nil), c0...)
			SgemmParallel(threads, false, false, m, n, k, 1, a, k, b, n, 0.5, cp, n)
			for i := range cp {
				if math.Float32bits(cp[i]) != math.Float32bits(c1[i]) {
					t.Fatalf("%v threads %d: C[%d] = %g, one thread gives %g", sz, threads, i, cp[i], c1[i])
				}
			}
		}
	}
}

func TestSgemmZeroK(t *testing.T) {
	c := []float32{1, 2, float32(math.NaN()), 4}
	Sgemm(false, false, 2, 2, 0, 1, nil, 0, nil, 2, 0, c, 2)
	for i, v := range c {
		if v != 0 {
			t.Fatalf("C[%d] = %g, want 0 (beta 0 clears C)", i, v)
		}
	}
}

func BenchmarkSgemm(b *testing.B) {
	for _, arch := range gemmArches() {
		for _, n := range []int{64, 128, 256, 512, 1024, 2048} {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%d/threads=%d", arch.name, n, threads), func(b *testing.B) {
					if arch == goArch && n > 512 {
						b.Skip("the portable kernel is too slow for large sizes")
					}
					r := rand.New(rand.NewPCG(1, 1))
					x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
					for b.Loop() {
						sgemmParallel(arch, threads, false, false, n, n, n, 1, x, n, y, n, 0, z, n)
					}
					b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
			}
		}
	}
}

// TestSgemmPackedBBitIdentical checks products with a prepacked B against
// the unpacked product, bit for bit, over transposes, alpha, beta and
// thread counts (row and column splits).
func TestSgemmPackedBBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, sz := range [][3]int{{1, 1, 1}, {2, 1024, 256}, {65, 70, 33}, {300, 64, 700}, {40, 3000, 100}, {700, 20, 50}, {3, 5, 7}, {8, 96, 300}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			m, n, k := sz[0], sz[1], sz[2]
			ta, tb := tr[0], tr[1]
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			a, b, c0 := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, m*n)
			pb := PackB(tb, k, n, b, ldb)
			for _, threads := range []int{1, 2, 3} {
				for _, ab := range [][2]float32{{1, 0}, {0.5, 1.5}} {
					want := append([]float32(nil), c0...)
					got := append([]float32(nil), c0...)
					SgemmParallel(threads, ta, tb, m, n, k, ab[0], a, lda, b, ldb, ab[1], want, n)
					SgemmPackedB(threads, ta, m, ab[0], a, lda, pb, ab[1], got, n, nil)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v ta=%v tb=%v threads %d alpha,beta %v: C[%d] = %g, unpacked gives %g", sz, ta, tb, threads, ab, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkPack measures packing a 256×256 row-major operand into the
// active kernel's A and B panels, per element.
func BenchmarkPack(b *testing.B) {
	const n = 256
	arch := activeGemm
	src := make([]float32, n*n)
	dst := make([]float32, (n+arch.mr)*(n+arch.nr))
	b.Run("A", func(b *testing.B) {
		b.SetBytes(4 * n * n)
		for b.Loop() {
			for ic := 0; ic < n; ic += arch.mc {
				packA(false, src, n, ic, 0, min(arch.mc, n-ic), n, arch.mr, arch.mr, 1, dst)
			}
		}
	})
	b.Run("B", func(b *testing.B) {
		b.SetBytes(4 * n * n)
		for b.Loop() {
			packB(false, src, n, 0, 0, n, n, arch.nr, dst)
		}
	})
}

// TestUnpackedBMatchesPacked checks products that read a row-major B in
// place (tileS) bit for bit against the same products with B packed, over
// row counts with and without an exact micro-kernel, short last panels, k
// past one cache block, epilogues and thread counts.
func TestUnpackedBMatchesPacked(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 14))
	packing := activeGemm.packing(true, false)
	for _, sz := range [][3]int{{12, 32, 8}, {16, 3136, 24}, {3, 70, 300}, {29, 96, 513}, {144, 1030, 40}, {7, 33, 1}, {150, 64, 260}, {300, 45, 270}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b := randSlice(r, m*k), randSlice(r, k*n)
		for i := range b {
			if r.IntN(64) == 0 {
				b[i] = dwSpecials[r.IntN(len(dwSpecials))]
			}
		}
		inPlace, packed := packAFor(activeGemm, false, m, k, 1, a, k), packAFor(packing, false, m, k, 1, a, k)
		bias, scale, shift := randSlice(r, m), randSlice(r, m), randSlice(r, m)
		for _, ep := range []*Epilogue{nil, {RowBias: bias, RowScale: scale, RowShift: shift, Act: ActRelu}, {ColBias: randSlice(r, n)}} {
			for threads := 1; threads <= 3; threads++ {
				c0 := randSlice(r, m*n)
				want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
				SgemmPacked(threads, packed, n, false, b, n, 0.5, want, n, ep)
				SgemmPacked(threads, inPlace, n, false, b, n, 0.5, got, n, ep)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
						t.Fatalf("%v threads %d ep %v: C[%d] = %g, packed B gives %g", sz, threads, ep != nil, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestOneRowInPlaceMatchesPacked checks one-row products that read their
// row of A in place (tileA1) bit for bit against the same products with A
// packed: B packed per call, read in place and prepacked, short last
// panels, k past one cache block, beta and thread counts.
func TestOneRowInPlaceMatchesPacked(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 16))
	packing := activeGemm.packing(false, true)
	for _, sz := range [][2]int{{32, 8}, {70, 300}, {800, 128}, {1030, 40}, {33, 1}, {128, 513}} {
		n, k := sz[0], sz[1]
		a, b := randSlice(r, k), randSlice(r, k*n)
		for i := range a {
			if r.IntN(16) == 0 {
				a[i] = dwSpecials[r.IntN(len(dwSpecials))]
			}
		}
		inPlace, packed := packBFor(activeGemm, false, k, n, b, n), packBFor(packing, false, k, n, b, n)
		for _, beta := range []float32{0, 0.5} {
			for threads := 1; threads <= 3; threads++ {
				c0 := randSlice(r, n)
				for _, tb := range []bool{false, true} {
					ldb := n
					if tb {
						ldb = k
					}
					want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
					sgemmParallel(packing, threads, false, tb, 1, n, k, 1, a, k, b, ldb, beta, want, n)
					sgemmParallel(activeGemm, threads, false, tb, 1, n, k, 1, a, k, b, ldb, beta, got, n)
					requireSameBits(t, fmt.Sprintf("n %d k %d tb %v beta %g threads %d", n, k, tb, beta, threads), got, want)
				}
				want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
				SgemmPackedB(threads, false, 1, 1, a, k, packed, beta, want, n, nil)
				SgemmPackedB(threads, false, 1, 1, a, k, inPlace, beta, got, n, nil)
				requireSameBits(t, fmt.Sprintf("prepacked n %d k %d beta %g threads %d", n, k, beta, threads), got, want)
			}
		}
	}
}

func requireSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: C[%d] = %g (%#x), want %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// BenchmarkSgemmPackedCold times 1×1 convolutions as products with A
// prepacked, B read in place and a Relu epilogue, each run writing
// another of several outputs that together exceed the caches, as a
// network's layers do: MobileNetV2's expansions at 122×122 and 61×61,
// SqueezeNet's classifier at 13×13.
func BenchmarkSgemmPackedCold(b *testing.B) {
	for _, sz := range [][3]int{{96, 14884, 16}, {16, 14884, 32}, {144, 3721, 24}, {24, 3721, 144}, {1000, 169, 512}} {
		m, n, k := sz[0], sz[1], sz[2]
		b.Run(fmt.Sprintf("m%dn%dk%d", m, n, k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			pa := PackA(false, m, k, 1, randSlice(r, m*k), k)
			ep := &Epilogue{RowBias: randSlice(r, m), Act: ActRelu}
			bufs := max(2, (64<<20)/(4*m*n))
			xs, ys := make([][]float32, bufs), make([][]float32, bufs)
			for i := range bufs {
				xs[i], ys[i] = randSlice(r, k*n), make([]float32, m*n)
			}
			i := 0
			for b.Loop() {
				SgemmPacked(1, pa, n, false, xs[i], n, 0, ys[i], n, ep)
				i = (i + 1) % bufs
			}
			b.ReportMetric(float64(2*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}

// TestNarrowTileMatchesWide checks products whose last column panel is
// short enough for the narrow kernel (tileNarrow) bit for bit against the
// full-width kernel on the same panel: B in place, transposed and
// gathered from an image, over one and two k blocks, with and without an
// epilogue, on one and two threads.
func TestNarrowTileMatchesWide(t *testing.T) {
	if activeGemm.tileNarrow == nil {
		t.Skipf("the %s kernels have no narrow tile", activeGemm.name)
	}
	wide := *activeGemm
	wide.tileNarrow = nil
	r := rand.New(rand.NewPCG(15, 16))
	for _, sz := range [][3]int{{1000, 169, 512}, {24, 9, 40}, {36, 48, 300}, {13, 80, 7}, {40, 16, 257}} {
		m, n, k := sz[0], sz[1], sz[2]
		a := randSlice(r, m*k)
		for _, transB := range []bool{false, true} {
			b := randSlice(r, k*n)
			for i := range b {
				if r.IntN(64) == 0 {
					b[i] = dwSpecials[r.IntN(len(dwSpecials))]
				}
			}
			ldb := n
			if transB {
				ldb = k
			}
			for _, ep := range []*Epilogue{nil, {RowBias: randSlice(r, m), Act: ActRelu}} {
				for threads := 1; threads <= 2; threads++ {
					want, got := make([]float32, m*n), make([]float32, m*n)
					SgemmPacked(threads, packAFor(&wide, false, m, k, 1, a, k), n, transB, b, ldb, 0, want, n, ep)
					SgemmPacked(threads, packAFor(activeGemm, false, m, k, 1, a, k), n, transB, b, ldb, 0, got, n, ep)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
							t.Fatalf("%v transB=%v ep=%v threads %d: C[%d] = %g, the full-width kernel gives %g", sz, transB, ep != nil, threads, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
	// A convolution whose B panels are gathered from the image: 13×13
	// outputs end in a panel of 9 columns.
	g := &ConvGeom{In: []int{13, 13}, Kernel: []int{3, 3}, Strides: []int{1, 1}, Dilations: []int{1, 1}, PadBegin: []int{1, 1}, Out: []int{13, 13}}
	x, w := randSlice(r, 8*169), randSlice(r, 24*72)
	want, got := make([]float32, 24*169), make([]float32, 24*169)
	SgemmConv(1, packAFor(&wide, false, 24, 72, 1, w, 72), g, ConvPlan{Way: ConvPacked}, x, want, 169, nil)
	SgemmConv(1, packAFor(activeGemm, false, 24, 72, 1, w, 72), g, ConvPlan{Way: ConvPacked}, x, got, 169, nil)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("convolution: y[%d] = %g, the full-width kernel gives %g", i, got[i], want[i])
		}
	}
}

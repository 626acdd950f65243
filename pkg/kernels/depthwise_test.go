package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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

// TestDwRowMatchesReference checks dwRow (assembly where the build has
// it) and dwRowPortable against dwRowGo bit for bit (any NaN matching
// any NaN) on every length up to 67, both strides, 3×3 kernels over one
// to three rows and 5×5 kernels over five, with specials in the inputs
// and the weights.
func TestDwRowMatchesReference(t *testing.T) {
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
	for _, sr := range []struct{ size, nr int }{{3, 1}, {3, 2}, {3, 3}, {5, 5}} {
		for _, stride := range []int{1, 2} {
			for n := 0; n <= 67; n++ {
				// The rows' exact extent: the kernels must not need more.
				ldx := stride*max(n-1, 0) + sr.size
				x, w := draw(sr.nr*ldx), draw(sr.size*sr.nr)
				if n%5 == 0 {
					special := []float32{0.5, -2, 0, 1e-39, 3e38, -1, 7, float32(math.Copysign(0, -1)), 1}
					for i := range w {
						w[i] = special[i%len(special)]
					}
				}
				want := make([]float32, n)
				dwRowGo(want, x, ldx, sr.nr, sr.size, stride, w)
				for _, row := range []struct {
					name string
					f    func(out, x []float32, ldx, nr, size, stride int, w []float32)
				}{{"dwRow", dwRow}, {"dwRowPortable", dwRowPortable}} {
					got := draw(n)
					row.f(got, x, ldx, sr.nr, sr.size, stride, w)
					for i := range got {
						if !sameResultBits(got[i], want[i]) {
							t.Fatalf("%s, %d×%d, stride %d, %d rows, n=%d: [%d] = %g, reference %g", row.name, sr.size, sr.size, stride, sr.nr, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestDepthwiseSquareMatchesGeneric checks Depthwise2D's 3×3 and 5×5
// kernels against depthwise2DGeneric bit for bit (NaN payloads aside) over
// widths on both sides of the 8- and 16-output vectors, both strides,
// heights odd and even, pads zero to four and asymmetric, with NaN and Inf inputs, a
// channel with a non-finite weight, and every kind of epilogue. Channels
// outside [c0, c1) and the elements after the output must stay untouched,
// every output element must be written; half the cases run all channels,
// whose taps reach the first and last elements of x.
func TestDepthwiseSquareMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 17))
	const c = 5
	negZero := float32(math.Copysign(0, -1))
	// Each makes an epilogue for c channels of n outputs.
	epilogues := []func(n int) *Epilogue{
		func(n int) *Epilogue { return nil },
		func(n int) *Epilogue { return &Epilogue{RowBias: randSlice(r, c)} },
		func(n int) *Epilogue { return &Epilogue{RowBias: randSlice(r, c), Act: ActRelu} },
		func(n int) *Epilogue {
			return &Epilogue{RowBias: randSlice(r, c), RowScale: randSlice(r, c), RowShift: randSlice(r, c), Act: ActRelu}
		},
		func(n int) *Epilogue { return &Epilogue{RowScale: randSlice(r, c), RowShift: randSlice(r, c)} },
		func(n int) *Epilogue { return &Epilogue{Act: ActRelu} },
		// Not per row: applied in a second pass.
		func(n int) *Epilogue { return &Epilogue{RowBias: randSlice(r, c), Act: ActClip, Min: -0.25, Max: 0.5} },
		func(n int) *Epilogue { return &Epilogue{ColBias: randSlice(r, n), Act: ActRelu} },
		func(n int) *Epilogue {
			return &Epilogue{RowBias: randSlice(r, c), Residual: randSlice(r, c*n), Act: ActRelu}
		},
	}
	type geom struct{ k, ih, iw, sh, sw, pt, pl, pb, pr int }
	var cases []geom
	pads := [][4]int{{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 0, 1, 1}, {1, 1, 0, 0}, {2, 2, 2, 2}, {1, 0, 2, 1}, {0, 2, 1, 0}, {2, 1, 0, 2}, {4, 4, 4, 4}, {3, 2, 1, 4}}
	for _, k := range []int{3, 5} {
		for _, s := range []int{1, 2} {
			for _, iw := range []int{1, 2, 3, 4, 5, 7, 8, 9, 10, 13, 14, 15, 16, 17, 18, 19, 20, 23, 28, 31, 32, 33, 34, 35, 40, 47, 56, 64, 65, 80, 112} {
				for i := 0; i < 3; i++ {
					p := pads[r.IntN(len(pads))]
					ih := 1 + r.IntN(13)
					if i == 0 {
						ih = iw // square, as the models have
					}
					cases = append(cases, geom{k, ih, iw, s, s, p[0], p[1], p[2], p[3]})
				}
			}
		}
		// Row and column strides that differ.
		cases = append(cases, geom{k, 9, 20, 1, 2, 1, 1, 1, 1}, geom{k, 9, 20, 2, 1, 1, 1, 1, 1})
	}
	for n, tc := range cases {
		oh := (tc.ih+tc.pt+tc.pb-tc.k)/tc.sh + 1
		ow := (tc.iw+tc.pl+tc.pr-tc.k)/tc.sw + 1
		if oh < 1 || ow < 1 {
			continue
		}
		mkEp := epilogues[n%len(epilogues)]
		c0, c1 := 0, c
		if n%2 == 1 {
			c0, c1 = 1, c-1
		}
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			ks := tc.k * tc.k
			g := &ConvGeom{In: []int{tc.ih, tc.iw}, Kernel: []int{tc.k, tc.k}, Strides: []int{tc.sh, tc.sw}, Dilations: []int{1, 1}, PadBegin: []int{tc.pt, tc.pl}, Out: []int{oh, ow}}
			x, w := randSlice(r, c*tc.ih*tc.iw), randSlice(r, c*ks)
			for i := range x {
				if r.IntN(16) == 0 {
					x[i] = dwSpecials[r.IntN(len(dwSpecials))]
				}
			}
			w[2*ks+r.IntN(ks)] = []float32{float32(math.Inf(-1)), float32(math.NaN())}[n%2]
			w[3*ks+r.IntN(ks)] = negZero
			ep := mkEp(oh * ow)
			const tail = 40
			got := randSlice(r, c*oh*ow+tail)
			for i := range got {
				if r.IntN(4) == 0 {
					got[i] = float32(math.NaN())
				}
			}
			want := slices.Clone(got)
			Depthwise2D(g, x, w, got, c0, c1, ep)
			depthwise2DGeneric(g, x, w, want, c0, c1, ep)
			for i := range got {
				if v, u := got[i], want[i]; math.Float32bits(v) != math.Float32bits(u) && (v == v || u == u) {
					ch, p := i/(oh*ow), i%(oh*ow)
					t.Fatalf("y[%d,%d,%d] = %g, generic loop gives %g (epilogue %+v)", ch, p/ow, p%ow, v, u, ep)
				}
			}
		})
	}
}

// TestDepthwiseManyChannels checks Depthwise2D against depthwise2DGeneric
// bit for bit over more channels than one plane-kernel call takes, with a
// non-finite weight splitting the finite runs and per-channel epilogues,
// so that every channel's planes, weights and epilogue are its own.
func TestDepthwiseManyChannels(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 19))
	const c = 150
	for _, tc := range []struct{ k, hw, s int }{{3, 9, 1}, {3, 12, 2}, {5, 7, 1}, {5, 20, 2}} {
		p := tc.k / 2
		o := (tc.hw+2*p-tc.k)/tc.s + 1
		g := &ConvGeom{In: []int{tc.hw, tc.hw}, Kernel: []int{tc.k, tc.k}, Strides: []int{tc.s, tc.s}, Dilations: []int{1, 1}, PadBegin: []int{p, p}, Out: []int{o, o}}
		x, w := randSlice(r, c*tc.hw*tc.hw), randSlice(r, c*tc.k*tc.k)
		w[100*tc.k*tc.k+1] = float32(math.Inf(1))
		ep := &Epilogue{RowBias: randSlice(r, c), RowScale: randSlice(r, c), RowShift: randSlice(r, c), Act: ActRelu}
		got, want := make([]float32, c*o*o), make([]float32, c*o*o)
		Depthwise2D(g, x, w, got, 3, c, ep)
		depthwise2DGeneric(g, x, w, want, 3, c, ep)
		for i := range got {
			if v, u := got[i], want[i]; math.Float32bits(v) != math.Float32bits(u) && (v == v || u == u) {
				t.Fatalf("%+v: y[%d,%d] = %g, generic loop gives %g", tc, i/(o*o), i%(o*o), v, u)
			}
		}
	}
}

// BenchmarkDepthwise runs the 3×3 depthwise convolutions of MobileNetV2
// (pad 1, one image) and the 5×5 ones of PP-OCRv3's detector backbone
// (pad 2, 320×320 input) with a bias, scale, shift and Relu epilogue, on
// one thread.
func BenchmarkDepthwise(b *testing.B) {
	for _, sh := range []struct{ k, c, hw, s int }{
		{3, 32, 112, 1}, {3, 96, 112, 2}, {3, 144, 56, 1}, {3, 144, 56, 2}, {3, 192, 28, 1}, {3, 384, 14, 1}, {3, 576, 14, 2}, {3, 960, 7, 1},
		{5, 40, 80, 2}, {5, 64, 40, 1}, {5, 336, 20, 2}, {5, 480, 10, 1},
	} {
		p := sh.k / 2
		o := (sh.hw-1)/sh.s + 1
		g := &ConvGeom{In: []int{sh.hw, sh.hw}, Kernel: []int{sh.k, sh.k}, Strides: []int{sh.s, sh.s}, Dilations: []int{1, 1}, PadBegin: []int{p, p}, Out: []int{o, o}}
		r := rand.New(rand.NewPCG(1, 2))
		x, w := randSlice(r, sh.c*sh.hw*sh.hw), randSlice(r, sh.c*sh.k*sh.k)
		ep := &Epilogue{RowBias: randSlice(r, sh.c), RowScale: randSlice(r, sh.c), RowShift: randSlice(r, sh.c), Act: ActRelu}
		y := make([]float32, sh.c*o*o)
		b.Run(fmt.Sprintf("%dx%d_c%d_%dx%d_s%d", sh.k, sh.k, sh.c, sh.hw, sh.hw, sh.s), func(b *testing.B) {
			b.SetBytes(int64(4 * (len(x) + len(y))))
			for b.Loop() {
				Depthwise2D(g, x, w, y, 0, sh.c, ep)
			}
		})
	}
}

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPool2DMatchesND checks the 2-D pooling fast path bit for bit against
// the rank-generic definition, with padding, strides, dilations, ceil-mode
// style end padding, count_include_pad and argmax.
func TestPool2DMatchesND(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		in, k, s, d, pb, pe []int
	}{
		{[]int{7, 9}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{8, 8}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{10, 6}, []int{3, 2}, []int{1, 3}, []int{2, 1}, []int{2, 0}, []int{1, 2}},
		{[]int{5, 5}, []int{5, 5}, []int{1, 1}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
	} {
		g := &ConvGeom{In: tc.in, Kernel: tc.k, Strides: tc.s, Dilations: tc.d, PadBegin: tc.pb, Out: make([]int, 2)}
		for d := range g.Out {
			g.Out[d] = (tc.in[d]+tc.pb[d]+tc.pe[d]-((tc.k[d]-1)*tc.d[d]+1))/tc.s[d] + 1
		}
		const c = 3
		x := randSlice(r, c*g.InSize())
		x[5] = float32(math.NaN())
		for _, isMax := range []bool{true, false} {
			for _, countPad := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/max=%v/pad=%v", tc.in, isMax, countPad), func(t *testing.T) {
					want, wantIdx := make([]float32, c*g.OutSize()), make([]int64, c*g.OutSize())
					poolND(g, c, x, want, isMax, countPad, tc.pe, wantIdx)
					for _, threads := range []int{1, 2} {
						got, gotIdx := make([]float32, len(want)), make([]int64, len(want))
						PoolParallel(threads, g, c, x, got, isMax, countPad, tc.pe, gotIdx)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) || (isMax && gotIdx[i] != wantIdx[i]) {
								t.Fatalf("threads %d: y[%d] = %g (index %d), want %g (index %d)", threads, i, got[i], gotIdx[i], want[i], wantIdx[i])
							}
						}
					}
				})
			}
		}
	}
}

// TestMaxPool2DRows checks max pooling without argmax (the row-folding
// path, AVX2 gather for strides above 1) bit for bit against the
// rank-generic definition on rows wide enough for whole vectors, with NaN
// at window starts and inside windows and signed zeros.
func TestMaxPool2DRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		in, k, s, d, pb, pe []int
	}{
		{[]int{20, 41}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{111, 111}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{1, 1}},
		{[]int{13, 37}, []int{3, 3}, []int{1, 1}, []int{1, 2}, []int{0, 2}, []int{0, 2}},
		{[]int{30, 64}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{11, 50}, []int{3, 4}, []int{3, 3}, []int{1, 1}, []int{1, 2}, []int{2, 1}},
		{[]int{9, 9}, []int{9, 9}, []int{1, 1}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
	} {
		t.Run(fmt.Sprint(tc.in, tc.k, tc.s, tc.d), func(t *testing.T) {
			g := &ConvGeom{In: tc.in, Kernel: tc.k, Strides: tc.s, Dilations: tc.d, PadBegin: tc.pb, Out: make([]int, 2)}
			for d := range g.Out {
				g.Out[d] = (tc.in[d]+tc.pb[d]+tc.pe[d]-((tc.k[d]-1)*tc.d[d]+1))/tc.s[d] + 1
			}
			const c = 3
			x := randSlice(r, c*g.InSize())
			for i := range x {
				switch r.IntN(40) {
				case 0:
					x[i] = float32(math.NaN())
				case 1:
					x[i] = float32(math.Copysign(0, -1))
				case 2:
					x[i] = 0
				}
			}
			want := make([]float32, c*g.OutSize())
			poolND(g, c, x, want, true, false, tc.pe, nil)
			for _, threads := range []int{1, 2} {
				got := make([]float32, len(want))
				PoolParallel(threads, g, c, x, got, true, false, tc.pe, nil)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("threads %d: y[%d] = %g, want %g", threads, i, got[i], want[i])
					}
				}
			}
		})
	}
}

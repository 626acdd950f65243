package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/kernels"
)

// TestBinaryLoopPar checks the threaded elementwise loop bit for bit
// against binaryLoop over broadcasts on the split dimension, lower-rank
// operands and scalars.
func TestBinaryLoopPar(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct{ as, bs []int }{
		{[]int{64, 1024}, []int{64, 1024}},
		{[]int{64, 1024}, []int{1024}},
		{[]int{1, 64, 1024}, []int{8, 64, 1}},
		{[]int{8, 4, 128, 128}, []int{8, 1, 1, 128}},
		{[]int{40000}, []int{1}},
		{[]int{3, 30000}, []int{3, 1}},
	} {
		t.Run(fmt.Sprintf("%v_%v", tc.as, tc.bs), func(t *testing.T) {
			os, err := broadcastShape(tc.as, tc.bs)
			if err != nil {
				t.Fatal(err)
			}
			a, b := make([]float32, prodInts(tc.as)), make([]float32, prodInts(tc.bs))
			for i := range a {
				a[i] = r.Float32()
			}
			for i := range b {
				b[i] = r.Float32()
			}
			f := func(x, y float32) float32 { return x*1.5 - y }
			want, got := make([]float32, prodInts(os)), make([]float32, prodInts(os))
			binaryLoop(a, tc.as, b, tc.bs, want, os, f)
			for _, threads := range []int{2, 3} {
				clear(got)
				binaryLoopPar(threads, a, slices.Clone(tc.as), b, slices.Clone(tc.bs), got, os, f)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("threads %d: o[%d] = %g, want %g", threads, i, got[i], want[i])
					}
				}
			}
		})
	}
}

func prodInts(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// TestBinaryF32 checks the coalescing float32 arithmetic loop bit for bit
// against binaryLoop with the same operation, on every op and on shapes
// that exercise each row kind (both span, one broadcasts, both broadcast),
// merged and unmerged dims, size-1 dims, scalars and the threaded split.
func TestBinaryF32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := []struct{ as, bs []int }{
		{[]int{5, 7}, []int{5, 7}},
		{[]int{5, 7}, []int{1}},
		{[]int{1}, []int{5, 7}},
		{[]int{}, []int{3}},
		{[]int{1}, []int{1}},
		{[]int{2, 3, 4, 5}, []int{1, 3, 1, 1}},
		{[]int{2, 3, 4, 5}, []int{5}},
		{[]int{2, 1, 4, 5}, []int{1, 3, 1, 5}},
		{[]int{2, 3, 1}, []int{1, 1, 6}},
		{[]int{1, 3, 1, 4}, []int{2, 1, 5, 1}},
		{[]int{4, 1}, []int{1, 4}},
		{[]int{2, 1, 3, 1, 2}, []int{2, 2, 3, 2, 1}},
		{[]int{1, 2, 1, 1, 1, 2, 1, 1, 3}, []int{2, 1, 1, 1, 1, 1, 2, 1, 1}},
		{[]int{64, 1024}, []int{64, 1}},
		{[]int{8, 4, 128, 128}, []int{8, 1, 1, 128}},
		{[]int{3, 30000}, []int{3, 1}},
	}
	ops := []kernels.BinOp{kernels.BinAdd, kernels.BinSub, kernels.BinMul, kernels.BinDiv}
	for _, tc := range shapes {
		for _, op := range ops {
			t.Run(fmt.Sprintf("%v_%v_op%d", tc.as, tc.bs, op), func(t *testing.T) {
				os, err := broadcastShape(tc.as, tc.bs)
				if err != nil {
					t.Fatal(err)
				}
				a, b := make([]float32, prodInts(tc.as)), make([]float32, prodInts(tc.bs))
				for i := range a {
					a[i] = r.Float32()*4 - 2
				}
				for i := range b {
					b[i] = r.Float32()*4 - 2
				}
				want, got := make([]float32, prodInts(os)), make([]float32, prodInts(os))
				binaryLoop(a, tc.as, b, tc.bs, want, os, op.Apply)
				for _, threads := range []int{1, 2} {
					for i := range got {
						got[i] = float32(math.NaN())
					}
					binaryF32Par(threads, op, a, tc.as, b, tc.bs, got, os)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("threads %d: o[%d] = %g, want %g", threads, i, got[i], want[i])
						}
					}
				}
			})
		}
	}
}

// TestWhereF32Threads checks the threaded float Where against a reference
// that indexes each operand by division, over broadcasts of every operand
// and outputs large enough to split.
func TestWhereF32Threads(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct{ cs, xs, ys []int }{
		{[]int{1, 1, 128, 128}, []int{}, []int{2, 4, 128, 128}},
		{[]int{2, 4, 128, 128}, []int{2, 4, 128, 128}, []int{1}},
		{[]int{3, 1, 70, 1}, []int{1, 5, 1, 90}, []int{3, 5, 70, 90}},
		{[]int{40000}, []int{40000}, []int{40000}},
		{[]int{1}, []int{7, 33}, []int{33}},
		{[]int{}, []int{1}, []int{5, 3}},
		{[]int{6, 1}, []int{6, 1}, []int{1}},
	} {
		t.Run(fmt.Sprintf("%v_%v_%v", tc.cs, tc.xs, tc.ys), func(t *testing.T) {
			os, err := broadcastShape(tc.cs, tc.xs, tc.ys)
			if err != nil {
				t.Fatal(err)
			}
			cond := make([]bool, prodInts(tc.cs))
			for i := range cond {
				cond[i] = r.IntN(2) == 0
			}
			x, y := make([]float32, prodInts(tc.xs)), make([]float32, prodInts(tc.ys))
			for i := range x {
				x[i] = r.Float32()
			}
			for i := range y {
				y[i] = -r.Float32()
			}
			ci, xi, yi := bcastIndex(tc.cs, os), bcastIndex(tc.xs, os), bcastIndex(tc.ys, os)
			want := make([]float32, prodInts(os))
			for i := range want {
				want[i] = y[yi[i]]
				if cond[ci[i]] {
					want[i] = x[xi[i]]
				}
			}
			for _, threads := range []int{1, 2, 3} {
				got := make([]float32, len(want))
				whereF32(threads, cond, tc.cs, x, tc.xs, y, tc.ys, got, os)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("threads %d: o[%d] = %g, want %g", threads, i, got[i], want[i])
					}
				}
			}
		})
	}
}

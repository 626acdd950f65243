package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
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

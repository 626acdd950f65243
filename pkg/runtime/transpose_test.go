package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestTransposeF32MatchesGeneric checks the float32 odometer transpose
// against the index-array transpose every dtype uses, over ranks 0-5,
// every permutation of ranks up to 4, unit and empty dimensions, with and
// without an arena.
func TestTransposeF32MatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := [][]int{{}, {7}, {3, 5}, {1, 4}, {2, 3, 4}, {4, 1, 3}, {2, 0, 3}, {2, 3, 4, 5}, {1, 2, 1, 3}, {2, 2, 3, 1, 2},
		{37, 21}, {2, 17, 40}, {3, 18, 2, 33}} // tiles with partial edges
	for _, shape := range shapes {
		for _, perm := range perms(len(shape)) {
			t.Run(fmt.Sprintf("%v/%v", shape, perm), func(t *testing.T) {
				n := tensor.NumElements(shape)
				x := make([]float32, n)
				for i := range x {
					x[i] = r.Float32()
				}
				in := &tensor.Tensor{DType: tensor.Float, Shape: shape, Data: x}
				want := transpose(in, perm)
				for _, rc := range []*runCtx{nil, {arena: &arena{free: map[int][][]float32{}}}} {
					got := transposeF32(rc, in, perm)
					if !slices.Equal(got.Shape, want.Shape) || !slices.Equal(got.Float32s(), want.Float32s()) {
						t.Fatalf("arena %v: got %v %v, want %v %v", rc != nil, got.Shape, got.Float32s(), want.Shape, want.Float32s())
					}
				}
			})
		}
	}
}

// perms lists the permutations of 0..n-1 (n ≤ 4), or for larger n the
// reversal and one rotation.
func perms(n int) [][]int {
	id := make([]int, n)
	for i := range id {
		id[i] = i
	}
	if n > 4 {
		rev := slices.Clone(id)
		slices.Reverse(rev)
		return [][]int{rev, append(slices.Clone(id[1:]), 0)}
	}
	var out [][]int
	var rec func(p []int, used []bool)
	rec = func(p []int, used []bool) {
		if len(p) == n {
			out = append(out, slices.Clone(p))
			return
		}
		for i := 0; i < n; i++ {
			if !used[i] {
				used[i] = true
				rec(append(p, i), used)
				used[i] = false
			}
		}
	}
	rec(nil, make([]bool, n))
	return out
}

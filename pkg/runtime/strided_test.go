package runtime

import (
	"fmt"
	"slices"
	"testing"
)

// TestStridedGather checks the row-copy path (int64, float32) and the
// index path (int8, through stridedIndex) against positions computed by
// division:
// transposed, broadcast (stride 0, also along the last axis), reversed
// (negative stride) and scalar layouts.
func TestStridedGather(t *testing.T) {
	for _, c := range []struct {
		os, st []int
		base   int
	}{
		{[]int{3, 4}, []int{1, 3}, 0},       // transpose of 4×3
		{[]int{2, 3, 5}, []int{0, 5, 1}, 0}, // broadcast on the outer axis
		{[]int{4, 6}, []int{1, 0}, 0},       // broadcast along the last axis
		{[]int{3, 4}, []int{4, -1}, 3},      // each row reversed
		{[]int{}, []int{}, 7},               // scalar
		{[]int{2, 0, 3}, []int{0, 3, 1}, 0}, // empty
	} {
		t.Run(fmt.Sprint(c.os, c.st), func(t *testing.T) {
			src := make([]int64, 40)
			for i := range src {
				src[i] = int64(i*7 + 1)
			}
			// The expected element of each position, by division rather
			// than the odometer under test.
			n := 1
			for _, d := range c.os {
				n *= d
			}
			want := make([]int64, n)
			for i := range want {
				off, rest := c.base, i
				for d := len(c.os) - 1; d >= 0; d-- {
					off += rest % c.os[d] * c.st[d]
					rest /= c.os[d]
				}
				want[i] = src[off]
			}
			if idx := stridedIndex(c.os, c.st, c.base); len(idx) != n {
				t.Fatalf("stridedIndex: %d indices, want %d", len(idx), n)
			}
			check := func(name string, got []int64) {
				t.Helper()
				if !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", name, got, want)
				}
			}
			gotI := make([]int64, len(want))
			stridedGather(gotI, src, c.os, c.st, c.base)
			check("int64", gotI)
			f32 := make([]float32, len(src))
			i8 := make([]int8, len(src))
			for i, v := range src {
				f32[i], i8[i] = float32(v), int8(v)
			}
			gotF := make([]float32, len(want))
			stridedGather(gotF, f32, c.os, c.st, c.base)
			gotB := make([]int8, len(want))
			stridedGather(gotB, i8, c.os, c.st, c.base) // index path
			for i := range want {
				if gotF[i] != float32(want[i]) || gotB[i] != int8(want[i]) {
					t.Fatalf("[%d]: float32 %v, int8 %v, want %v", i, gotF[i], gotB[i], want[i])
				}
			}
		})
	}
}

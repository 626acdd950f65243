package quant

import (
	"sync/atomic"
	"testing"
)

type layoutCase struct {
	shape       []int
	axis, block int
}

var layoutCases = []layoutCase{
	{[]int{3, 5, 7}, -1, 0}, {[]int{600, 700}, -1, 0}, {[]int{600, 700}, 0, 0}, {[]int{600, 700}, 1, 0},
	{[]int{700, 600}, 0, 32}, {[]int{600, 700}, 1, 32}, {[]int{4, 300, 301}, 1, 16}, {[]int{5, 3, 4}, 2, 3},
	{[]int{3, 1000, 100}, 1, 0}, {[]int{7}, 0, 0},
}

// layout is the case's Layout and its element count.
func (c layoutCase) layout(t *testing.T) (Layout, int) {
	t.Helper()
	l, err := NewLayout(c.shape, c.axis, c.block)
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for _, d := range c.shape {
		n *= d
	}
	return l, n
}

// TestEachParallelVisitsAsEach: for every layout, EachParallel calls fn
// once per element with Each's group, at any worker count, above and
// below the size from which it shares the work.
func TestEachParallelVisitsAsEach(t *testing.T) {
	for _, c := range layoutCases {
		l, n := c.layout(t)
		want := make([]int32, n)
		l.Each(n, func(i, g int) { want[i] = int32(g) })
		for _, workers := range []int{1, 2, 3, 8} {
			got, seen := make([]int32, n), make([]int32, n)
			l.EachParallel(n, workers, func(i, g int) { got[i] = int32(g); atomic.AddInt32(&seen[i], 1) })
			for i := range n {
				if seen[i] != 1 || got[i] != want[i] {
					t.Fatalf("shape %v axis %d block %d, %d workers: element %d seen %d times with group %d, want once with %d",
						c.shape, c.axis, c.block, workers, i, seen[i], got[i], want[i])
				}
			}
		}
	}
}

// TestRunsParallelCoversAsRuns: for every layout, RunsParallel's runs
// cover each element once, with Runs's group, at any worker count; a run
// is never longer than Runs's (a per-tensor run may be cut).
func TestRunsParallelCoversAsRuns(t *testing.T) {
	for _, c := range layoutCases {
		l, n := c.layout(t)
		want, runOf := make([]int32, n), make([]int32, n)
		runs := int32(0)
		l.Runs(n, func(s, e, g int) {
			for i := s; i < e; i++ {
				want[i], runOf[i] = int32(g), runs
			}
			runs++
		})
		for _, workers := range []int{1, 2, 3, 8} {
			got, seen := make([]int32, n), make([]int32, n)
			l.RunsParallel(n, workers, func(s, e, g int) {
				for i := s; i < e; i++ {
					got[i] = int32(g)
					atomic.AddInt32(&seen[i], 1)
					if runOf[i] != runOf[s] {
						t.Errorf("shape %v axis %d block %d: run %d..%d crosses Runs's runs", c.shape, c.axis, c.block, s, e)
					}
				}
			})
			for i := range n {
				if seen[i] != 1 || got[i] != want[i] {
					t.Fatalf("shape %v axis %d block %d, %d workers: element %d seen %d times with group %d, want once with %d",
						c.shape, c.axis, c.block, workers, i, seen[i], got[i], want[i])
				}
			}
		}
	}
}

// TestRowsCoverLastAxis: a last-axis layout's rows cover each element
// once, row by row, at any worker count, above and below the size from
// which they are shared out.
func TestRowsCoverLastAxis(t *testing.T) {
	for _, c := range []layoutCase{{[]int{3000, 100}, 1, 0}, {[]int{5, 7}, 1, 0}, {[]int{4, 300, 301}, 2, 0}} {
		l, n := c.layout(t)
		if !l.lastAxis() {
			t.Fatalf("shape %v axis %d: not a last-axis layout", c.shape, c.axis)
		}
		for _, workers := range []int{1, 2, 3} {
			seen := make([]int32, n)
			l.rows(n, workers, func(s, e int) {
				if s%l.dim != 0 || e-s != l.dim {
					t.Errorf("row %d..%d is not a row of %d", s, e, l.dim)
				}
				for i := s; i < e; i++ {
					atomic.AddInt32(&seen[i], 1)
				}
			})
			for i, k := range seen {
				if k != 1 {
					t.Fatalf("shape %v, %d workers: element %d seen %d times", c.shape, workers, i, k)
				}
			}
		}
	}
}

package kernels

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestParallelCoversOnce checks that Parallel calls fn on a partition of
// [0, n) into the chunks its doc comment states, each exactly once, also
// with nested and concurrent calls.
func TestParallelCoversOnce(t *testing.T) {
	for _, tc := range []struct{ threads, n, grain int }{
		{1, 10, 1}, {2, 1, 1}, {2, 2, 1}, {2, 7, 1}, {3, 10, 4}, {4, 100, 1}, {8, 5, 1}, {2, 100, 60},
	} {
		hits := make([]atomic.Int32, tc.n)
		var calls atomic.Int32
		Parallel(tc.threads, tc.n, tc.grain, func(lo, hi int) {
			calls.Add(1)
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("%+v: element %d covered %d times", tc, i, h)
			}
		}
		chunks := min(tc.threads, (tc.n+tc.grain-1)/tc.grain)
		size := (tc.n + chunks - 1) / chunks
		if want := (tc.n + size - 1) / size; int(calls.Load()) != want {
			t.Fatalf("%+v: %d chunks, want %d", tc, calls.Load(), want)
		}
	}
	// Nested and concurrent calls finish and cover everything.
	var wg sync.WaitGroup
	var total atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				Parallel(2, 8, 1, func(lo, hi int) {
					Parallel(2, 4, 1, func(lo2, hi2 int) { total.Add(int64((hi - lo) * (hi2 - lo2))) })
				})
			}
		}()
	}
	wg.Wait()
	if got, want := total.Load(), int64(4*200*8*4); got != want {
		t.Fatalf("nested and concurrent calls covered %d, want %d", got, want)
	}
}

// BenchmarkParallelHandoff measures the cost of one two-chunk step with
// almost no work: the hand-off to a worker and back.
func BenchmarkParallelHandoff(b *testing.B) {
	var sink atomic.Int64
	for b.Loop() {
		Parallel(2, 2, 1, func(lo, hi int) { sink.Add(int64(hi - lo)) })
	}
}

package kernels

import (
	"runtime"
	"sync"
)

// The worker pool is shared by every kernel and session in the process:
// starting a goroutine per task costs little, but reusing parked workers
// keeps their stacks warm and bounds the number of goroutines to the
// number of CPUs whatever the number of concurrent callers.
var (
	poolOnce  sync.Once
	poolTasks chan func()
)

func startPool() {
	n := max(runtime.NumCPU(), 1)
	poolTasks = make(chan func(), 4*n)
	for range n {
		go func() {
			for f := range poolTasks {
				f()
			}
		}()
	}
}

// Parallel calls fn(lo, hi) over a partition of [0, n) into at most threads
// contiguous chunks of at least grain elements, running the first chunk on
// the caller and the others on the shared worker pool, and returns when all
// are done. Chunk boundaries depend only on n, threads and grain.
func Parallel(threads, n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	chunks := min(threads, (n+grain-1)/grain)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	poolOnce.Do(startPool)
	var wg sync.WaitGroup
	size := (n + chunks - 1) / chunks
	for lo := size; lo < n; lo += size {
		hi := min(lo+size, n)
		wg.Add(1)
		task := func() {
			defer wg.Done()
			fn(lo, hi)
		}
		select {
		case poolTasks <- task:
		default:
			// Every worker is busy (nested or concurrent calls): run the
			// chunk on its own goroutine rather than wait for a worker.
			go task()
		}
	}
	fn(0, min(size, n))
	wg.Wait()
}

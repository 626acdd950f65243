package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The worker pool is shared by every kernel and session in the process.
// A model runs hundreds of parallel steps of tens of microseconds each, so
// what matters is the hand-off: a parked goroutine takes a futex wake-up
// and a trip through the scheduler (tens of microseconds on a loaded
// machine) before it starts, which made two threads slower than one on
// small models. Workers therefore spin for a while after their last chunk
// before they park, the caller polls for the outstanding chunks without
// parking, and chunks are claimed from a counter by whoever is
// free first (the caller included), so a step never waits for a worker to
// wake up when the caller could have run the chunk itself. Which goroutine
// runs a chunk never changes what the chunk computes.
var pool struct {
	once sync.Once
	mu   sync.Mutex
	cond *sync.Cond
	// jobs are the steps with chunks left to claim, oldest first;
	// pending mirrors len(jobs) for spinning workers, which read it
	// without the lock.
	jobs    []*job
	pending atomic.Int32
	parked  int
}

const (
	// workerSpin is how long an idle worker polls for a new step before
	// it parks: longer than the serial gap between two parallel steps of
	// a model, short enough not to burn a core between runs.
	workerSpin = 50 * time.Microsecond
)

// job is one Parallel call: chunks of size elements of [0, n).
type job struct {
	fn             func(lo, hi int)
	n, size, count int
	next           atomic.Int64 // next chunk to claim
	left           atomic.Int64 // chunks not yet finished
}

func startPool() {
	pool.cond = sync.NewCond(&pool.mu)
	// The caller of Parallel runs chunks too, so one worker fewer than
	// the CPUs keeps every CPU busy without a worker waiting for a P.
	for range max(runtime.NumCPU()-1, 1) {
		go worker()
	}
}

func worker() {
	for {
		if j := firstJob(); j != nil {
			j.run()
			continue
		}
		if spinUntil(workerSpin, func() bool { return pool.pending.Load() > 0 }) {
			continue
		}
		pool.mu.Lock()
		for len(pool.jobs) == 0 {
			pool.parked++
			pool.cond.Wait()
			pool.parked--
		}
		pool.mu.Unlock()
	}
}

// spinUntil polls cond for up to d and reports whether it became true.
func spinUntil(d time.Duration, cond func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i&63 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > d {
				return false
			}
		}
	}
}

func firstJob() *job {
	if pool.pending.Load() == 0 {
		return nil
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.jobs) == 0 {
		return nil
	}
	return pool.jobs[0]
}

// run claims and runs chunks of j until none is left, then takes j off
// the list.
func (j *job) run() {
	for {
		c := int(j.next.Add(1)) - 1
		if c >= j.count {
			j.retire()
			return
		}
		lo := c * j.size
		j.fn(lo, min(lo+j.size, j.n))
		j.left.Add(-1)
	}
}

func (j *job) retire() {
	pool.mu.Lock()
	for i, o := range pool.jobs {
		if o == j {
			pool.jobs = append(pool.jobs[:i], pool.jobs[i+1:]...)
			pool.pending.Store(int32(len(pool.jobs)))
			break
		}
	}
	pool.mu.Unlock()
}

// Parallel calls fn(lo, hi) over a partition of [0, n) into at most threads
// contiguous chunks of at least grain elements, running them on the caller
// and the shared worker pool, and returns when all are done. Chunk
// boundaries depend only on n, threads and grain.
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
	pool.once.Do(startPool)
	size := (n + chunks - 1) / chunks
	j := &job{fn: fn, n: n, size: size, count: (n + size - 1) / size}
	j.left.Store(int64(j.count))
	pool.mu.Lock()
	pool.jobs = append(pool.jobs, j)
	pool.pending.Store(int32(len(pool.jobs)))
	for range min(pool.parked, j.count-1) {
		pool.cond.Signal()
	}
	pool.mu.Unlock()
	j.run()
	// Every chunk is claimed; the ones left are running on workers. The
	// caller waits for them without parking: a parked goroutine is woken
	// onto the P of the worker that finishes last, which keeps spinning
	// for its next step, so the caller waited for another P to steal it —
	// tens to hundreds of microseconds on a virtual CPU that had gone
	// idle, at every step whose chunks ended unevenly. Yielding now and
	// then lets a worker that shares this P run.
	for i := 0; j.left.Load() != 0; i++ {
		if i&255 == 255 {
			runtime.Gosched()
		}
	}
}

//go:build linux

package cli

import (
	goruntime "runtime"
	"testing"
	"time"
)

// TestThreadCPUIsTheCallingThreads: the clock bench reads for ONNX Runtime
// on one thread counts the calling thread's work and not another
// thread's.
func TestThreadCPUIsTheCallingThreads(t *testing.T) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	busy := func(clock func() (time.Duration, bool), d time.Duration) {
		c0, _ := clock()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if c, _ := clock(); c-c0 >= d {
				return
			}
		}
	}
	c0, ok := threadCPU()
	if !ok {
		t.Fatal("CLOCK_THREAD_CPUTIME_ID not read")
	}
	// Another goroutine, on its own locked thread, works 100 ms of its
	// own thread's CPU while this one waits.
	done := make(chan struct{})
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		busy(threadCPU, 100*time.Millisecond)
		close(done)
	}()
	<-done
	c1, _ := threadCPU()
	if c1-c0 >= 50*time.Millisecond {
		t.Errorf("waiting thread counted %v of another thread's 100 ms", c1-c0)
	}
	busy(threadCPU, 50*time.Millisecond)
	c2, _ := threadCPU()
	if c2-c1 < 50*time.Millisecond {
		t.Errorf("working thread counted %v, want at least 50 ms", c2-c1)
	}
}

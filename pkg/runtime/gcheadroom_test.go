package runtime

import (
	"runtime/debug"
	"testing"
)

// TestBatchGC checks that BatchGC narrows a wider headroom to
// batchGCPercent and restores it, and leaves a narrower one and GOGC=off
// alone.
func TestBatchGC(t *testing.T) {
	saved := debug.SetGCPercent(100)
	defer debug.SetGCPercent(saved)
	for _, tc := range []struct{ before, during int }{{100, batchGCPercent}, {400, batchGCPercent}, {10, 10}, {batchGCPercent, batchGCPercent}, {-1, -1}} {
		debug.SetGCPercent(tc.before)
		restore := BatchGC()
		if got := debug.SetGCPercent(tc.during); got != tc.during {
			t.Errorf("GOGC %d: %d during BatchGC, want %d", tc.before, got, tc.during)
		}
		restore()
		if got := debug.SetGCPercent(100); got != tc.before {
			t.Errorf("GOGC %d: %d after restore", tc.before, got)
		}
	}
}

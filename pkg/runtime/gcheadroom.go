package runtime

import "runtime/debug"

// batchGCPercent is the garbage collector's headroom over the live heap,
// in percent, while BatchGC is in force.
const batchGCPercent = 25

// BatchGC narrows the garbage collector's headroom to batchGCPercent of
// the live heap for the batch runs that follow, and returns the function
// that restores the previous setting. A session's arena keeps the
// activations of a large batch live between runs (about 285 MB for
// resnet18 at batch 32, next to the model's weights and their packed
// panels), and the default headroom (GOGC=100) let the heap grow to twice
// all of that between collections: quantizing resnet18 at batch 32 on 128
// samples peaked at 1.0–1.2 GB of RSS with about 520 MB live. The runs
// themselves allocate little beside the arena, so collecting at a quarter
// of the live heap instead costs few extra collections. The pipeline's
// passes (passes.Run) run under it too, for the same reason: their garbage
// is large and pointer-free. The limit follows
// the live heap as it grows; a lower setting (GOGC, debug.SetGCPercent)
// and GOGC=off are left as they are.
func BatchGC() (restore func()) {
	prev := debug.SetGCPercent(batchGCPercent)
	if prev < 0 || prev <= batchGCPercent {
		debug.SetGCPercent(prev)
		return func() {}
	}
	return func() { debug.SetGCPercent(prev) }
}

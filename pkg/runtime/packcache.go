package runtime

import (
	"sync"
	"sync/atomic"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// packCache keeps the right-hand GEMM operands of one node packed across
// runs. A tensor seen again by pointer is a constant (initializers and
// folded values are the same tensor at every run; computed values are new
// tensors), so it is packed on its second use and reused from then on,
// while the session's packBudget lasts; computed operands, and constants
// past the budget, take the kernel's per-call packing. Packed products
// are bit-identical to unpacked ones, so the cache never changes a result.
type packCache struct {
	mu     sync.Mutex
	budget *packBudget // nil: no bound
	seen   *tensor.Tensor
	src    *tensor.Tensor
	packs  []*kernels.PackedB
	bytes  int64
}

// get returns the packs of t built by pack (floats values in all), or nil
// when t is not known to be constant yet or the budget has no room for
// them.
func (c *packCache) get(t *tensor.Tensor, floats int, pack func() []*kernels.PackedB) []*kernels.PackedB {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == t {
		return c.packs
	}
	if c.seen != t {
		c.seen = t
		return nil
	}
	// Another operand replaced the one packed: its packs are stale.
	c.budget.give(c.bytes)
	c.src, c.packs, c.bytes = nil, nil, 0
	bytes := int64(floats) * 4
	if !c.budget.take(bytes) {
		return nil
	}
	c.src, c.packs, c.bytes = t, pack(), bytes
	return c.packs
}

// packBudgetBytes bounds the bytes of packed operands one session keeps.
// A packed operand is a second copy of its weight: on a small model it
// makes a run a few percent faster (bert_encoder: 5.85 against 6.04 ms a
// run, one thread), while on a large one it doubles the weights in memory
// and the fresh pages cost more than the packing saves (a 168 M-parameter
// decoder calibrated on 16 sequences of 64 tokens: 3.7 s at 1.6 GB with
// every weight packed, 3.55 s at 0.94 GB with none).
const packBudgetBytes = 256 << 20

// packBudget is what a session's pack caches may still hold, in bytes.
type packBudget struct{ left atomic.Int64 }

func newPackBudget(bytes int64) *packBudget {
	b := &packBudget{}
	b.left.Store(bytes)
	return b
}

// take reserves n bytes, reporting whether there was room (always on a
// nil budget).
func (b *packBudget) take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		left := b.left.Load()
		if left < n {
			return false
		}
		if b.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *packBudget) give(n int64) {
	if b != nil && n != 0 {
		b.left.Add(n)
	}
}

// packedAGroups keeps a weight's packed left-hand panels, one per group,
// while the weight tensor is the same: constant weights are the same tensor
// at every run, so they are packed once.
type packedAGroups struct {
	mu     sync.Mutex
	of     *tensor.Tensor
	packed []*kernels.PackedA
}

// get returns the panels of w's grp groups, made by pack from w's data the
// first time w is seen.
func (c *packedAGroups) get(w *tensor.Tensor, grp int, pack func(wd []float32, group int) *kernels.PackedA) []*kernels.PackedA {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.of == w {
		return c.packed
	}
	wd := w.Float32s()
	ps := make([]*kernels.PackedA, grp)
	for gi := range ps {
		ps[gi] = pack(wd, gi)
	}
	c.of, c.packed = w, ps
	return ps
}

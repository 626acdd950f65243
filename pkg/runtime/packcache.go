package runtime

import (
	"sync"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// packCache keeps the right-hand GEMM operands of one node packed across
// runs. A tensor seen again by pointer is a constant (initializers and
// folded values are the same tensor at every run; computed values are new
// tensors), so it is packed on its second use and reused from then on;
// computed operands take the kernel's per-call packing. Packed products
// are bit-identical to unpacked ones, so the cache never changes a result.
type packCache struct {
	mu    sync.Mutex
	seen  *tensor.Tensor
	src   *tensor.Tensor
	packs []*kernels.PackedB
}

// get returns the packs of t built by pack, or nil when t is not known to
// be constant yet.
func (c *packCache) get(t *tensor.Tensor, pack func() []*kernels.PackedB) []*kernels.PackedB {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == t {
		return c.packs
	}
	if c.seen != t {
		c.seen = t
		return nil
	}
	c.src, c.packs = t, pack()
	return c.packs
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

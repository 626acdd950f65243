package runtime

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestPackBudget: a pack cache packs a constant on its second use while
// the session's budget has room, holds what it packed against the budget
// (given back when another operand replaces it) and leaves operands past
// the budget to the per-call packing.
func TestPackBudget(t *testing.T) {
	packs := 0
	pack := func() []*kernels.PackedB {
		packs++
		return []*kernels.PackedB{kernels.PackB(false, 2, 3, make([]float32, 6), 3)}
	}
	budget := newPackBudget(100)
	a, b := &packCache{budget: budget}, &packCache{budget: budget}
	wa, wb, wc := tensor.New(tensor.Float, 2, 3), tensor.New(tensor.Float, 2, 3), tensor.New(tensor.Float, 2, 3)
	steps := []struct {
		name   string
		cache  *packCache
		w      *tensor.Tensor
		floats int
		packed bool
		left   int64
	}{
		{"first use: not known constant", a, wa, 20, false, 100},
		{"second use: packed", a, wa, 20, true, 20},
		{"third use: from the cache", a, wa, 20, true, 20},
		{"another node, first use", b, wb, 20, false, 20},
		{"another node, no room left", b, wb, 20, false, 20},
		{"another node, small enough", b, wb, 5, true, 0},
		{"a new operand: not known constant", a, wc, 5, false, 0},
		{"a new operand replaces the old", a, wc, 5, true, 60},
	}
	for _, st := range steps {
		got := st.cache.get(st.w, st.floats, pack) != nil
		if got != st.packed || budget.left.Load() != st.left {
			t.Fatalf("%s: packed %v with %d bytes left, want %v with %d", st.name, got, budget.left.Load(), st.packed, st.left)
		}
	}
	if packs != 3 {
		t.Errorf("packed %d times, want 3", packs)
	}
	var unbounded packCache
	unbounded.get(wa, 1<<40, pack)
	if unbounded.get(wa, 1<<40, pack) == nil {
		t.Error("a cache without a budget did not pack")
	}
}

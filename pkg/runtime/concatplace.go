package runtime

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// A Concat whose inputs are each computed by a Conv step and read by
// nothing else is computed in place: the Conv steps write their outputs
// back to back into one buffer, and the Concat's output is that buffer,
// with nothing copied. SqueezeNet's fire modules end in such a Concat of
// two expansions; copying them moved megabytes per run.
//
// The Convs must know where their part lies before the Concat runs, so a
// plan keeps the part shapes of the run before: a model's runs see the
// same shapes every time. The first run (or one whose shapes changed)
// copies as a plain Concat does and records the shapes for the next.

// concatPlan is one in-place Concat.
type concatPlan struct {
	// shapes are the part shapes the Concat saw last; nil before its
	// first run.
	shapes atomic.Pointer[[][]int]
}

// placement is a step's role in a concatPlan: producer of part index, or
// the Concat itself (index −1).
type placement struct {
	plan  *concatPlan
	index int
}

// planConcats marks the Concat steps of p whose float inputs can be
// written in place, and the Conv steps that produce them.
func planConcats(p *program) {
	producer := map[int]int{} // slot → index of the step computing it
	for i, st := range p.steps {
		for _, s := range st.out {
			if s >= 0 {
				producer[s] = i
			}
		}
	}
	for ci := range p.steps {
		st := &p.steps[ci]
		n := st.node
		if n.OpType != "Concat" || n.Domain != "" || len(st.in) < 2 || len(n.Outputs) != 1 {
			continue
		}
		var parts []int
		for j, s := range st.in {
			v := n.Inputs[j]
			pi, ok := producer[s]
			if s < 0 || !ok || v.IsGraphOutput || len(v.Consumers) != 1 || slices.Contains(st.in[:j], s) {
				parts = nil
				break
			}
			if ps := &p.steps[pi]; ps.node.OpType != "Conv" || ps.place != nil || len(ps.out) != 1 || ps.out[0] != s {
				parts = nil
				break
			}
			parts = append(parts, pi)
		}
		if parts == nil {
			continue
		}
		plan := &concatPlan{}
		st.place = &placement{plan: plan, index: -1}
		for j, pi := range parts {
			p.steps[pi].place = &placement{plan: plan, index: j}
		}
	}
}

// floatOutPart returns the output of the running step, of the given
// shape: its part of an in-place Concat's buffer when the step produces
// one and the shapes are those planned, else a buffer of its own. Only
// the kernel computing the step's output may call it, once.
func (rc *runCtx) floatOutPart(shape []int) *tensor.Tensor {
	pl := rc.place
	rc.place = nil
	if pl == nil || pl.index < 0 || rc.arena == nil || len(shape) < 2 || shape[0] != 1 {
		return rc.newFloatOut(shape...)
	}
	sp := pl.plan.shapes.Load()
	if sp == nil || len(*sp) <= pl.index || !slices.Equal((*sp)[pl.index], shape) {
		return rc.newFloatOut(shape...)
	}
	off, total := 0, 0
	for j, s := range *sp {
		if j < pl.index {
			off += tensor.NumElements(s)
		}
		total += tensor.NumElements(s)
	}
	buf, ok := rc.placed[pl.plan]
	if !ok {
		buf = rc.arena.allocBuf(total, false)
		if rc.placed == nil {
			rc.placed = map[*concatPlan][]float32{}
		}
		rc.placed[pl.plan] = buf
	}
	n := tensor.NumElements(shape)
	return &tensor.Tensor{DType: tensor.Float, Shape: slices.Clone(shape), Data: buf[off : off+n]}
}

// concatInPlace returns the Concat of parts along axis 1 when they lie
// back to back in one buffer, as their Conv steps wrote them, and records
// the part shapes for the next run. It returns nil when the Concat must
// copy.
func (rc *runCtx) concatInPlace(parts []*tensor.Tensor, axis int64) *tensor.Tensor {
	if rc == nil || rc.place == nil || rc.place.index >= 0 {
		return nil
	}
	pl := rc.place
	rc.place = nil
	delete(rc.placed, pl.plan)
	shapes := make([][]int, len(parts))
	for j, p := range parts {
		if p == nil || p.DType != tensor.Float || len(p.Shape) < 2 || p.Shape[0] != 1 {
			return nil
		}
		shapes[j] = p.Shape
	}
	if ax, err := normAxis(axis, len(parts[0].Shape)); err != nil || ax != 1 {
		return nil
	}
	if old := pl.plan.shapes.Load(); old == nil || !slices.EqualFunc(*old, shapes, slices.Equal) {
		pl.plan.shapes.Store(&shapes)
	}
	first := parts[0].Data.([]float32)
	buf := first[:cap(first)]
	os := slices.Clone(parts[0].Shape)
	os[1] = 0
	at := 0
	for _, p := range parts {
		d := p.Data.([]float32)
		if len(p.Shape) != len(os) || !slices.Equal(p.Shape[2:], os[2:]) || len(d) == 0 || len(buf) < at+len(d) ||
			unsafe.SliceData(d) != unsafe.SliceData(buf[at:]) {
			return nil
		}
		os[1] += p.Shape[1]
		at += len(d)
	}
	return &tensor.Tensor{DType: tensor.Float, Shape: os, Data: buf[:at]}
}

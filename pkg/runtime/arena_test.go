package runtime

import (
	"context"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestArenaKeepsResults checks that buffer reuse never touches what Run
// returned: the outputs of a first run, kept, are bit for bit unchanged
// after two more runs on the same session, and equal to those runs'.
func TestArenaKeepsResults(t *testing.T) {
	for _, c := range detCases(t) {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewGoSession(c.model, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			first, err := s.Run(context.Background(), c.inputs, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			kept := map[string]*tensor.Tensor{}
			for k, v := range first {
				kept[k] = v.Clone()
			}
			for range 2 {
				again, err := s.Run(context.Background(), c.inputs, RunOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range sortedKeys(kept) {
					arenaSameBits(t, name+" (first run, kept)", first[name], kept[name])
					arenaSameBits(t, name+" (later run)", again[name], kept[name])
				}
			}
		})
	}
}

func arenaSameBits(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	g, ok1 := got.Data.([]float32)
	w, ok2 := want.Data.([]float32)
	if !ok1 || !ok2 {
		return
	}
	for i := range w {
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
			t.Fatalf("%s: element %d = %g, want %g", what, i, g[i], w[i])
		}
	}
}

// TestBufferPool checks that sessions sharing a BufferPool compute what a
// session of their own computes, bit for bit, on buffers a closed session
// left (poisoned with NaN where not zeroed, as TestArenaPoison does), that
// the outputs a closed session returned are not lent out, and that a
// later session does take the closed one's buffers.
func TestBufferPool(t *testing.T) {
	for _, c := range detCases(t) {
		t.Run(c.name, func(t *testing.T) {
			own, err := NewGoSession(c.model, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			want := runCopy(t, own, c.inputs, false, nil)
			pool := NewBufferPool()
			first, err := NewGoSession(c.model, Options{Threads: 2, Buffers: pool, poisonArena: true})
			if err != nil {
				t.Fatal(err)
			}
			kept, err := first.Run(context.Background(), c.inputs, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := sameBits(want, copyOutputs(kept)); err != nil {
				t.Fatalf("first session: %v", err)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			lent := pool.count()
			for i := range 2 {
				next, err := NewGoSession(c.model, Options{Threads: 2, Buffers: pool, poisonArena: true})
				if err != nil {
					t.Fatal(err)
				}
				if err := sameBits(want, runCopy(t, next, c.inputs, false, nil)); err != nil {
					t.Fatalf("session %d on the pool's buffers: %v", i+2, err)
				}
				if err := next.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := sameBits(want, copyOutputs(kept)); err != nil {
				t.Fatalf("the first session's outputs after later sessions ran: %v", err)
			}
			if lent > 0 && pool.count() > lent {
				t.Fatalf("the pool grew from %d to %d buffers: the later sessions did not take the first one's", lent, pool.count())
			}
		})
	}
}

// copyOutputs is a run's outputs as runCopy keys them.
func copyOutputs(outs map[string]*tensor.Tensor) detRun {
	c := detRun{}
	for k, v := range outs {
		c["out:"+k] = v.Clone()
	}
	return c
}

// count is the number of buffers in the pool.
func (p *BufferPool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.free {
		n += len(l)
	}
	return n
}

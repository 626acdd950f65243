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

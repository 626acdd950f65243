package runtime

import (
	"context"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestGiven checks that a run handed the values the model's first nodes
// computed (RunOptions.Given, taken from a whole run) returns the whole
// run's outputs bit for bit while running fewer steps, on every
// generated and shared model, for cuts at a quarter, half and three
// quarters of the steps.
func TestGiven(t *testing.T) {
	for _, c := range detCases(t) {
		t.Run(c.name, func(t *testing.T) {
			prof := NewProfile()
			s, err := NewGoSession(c.model, Options{Threads: 2, Profile: prof})
			if err != nil {
				t.Fatal(err)
			}
			all := map[string]*tensor.Tensor{}
			outs, err := s.Run(context.Background(), c.inputs, RunOptions{Tap: func(name string, v *tensor.Tensor) { all[name] = v.Clone() }})
			if err != nil {
				t.Fatal(err)
			}
			want := copyOutputs(outs)
			whole := stepsRun(prof)
			steps := s.prog.steps
			for _, frac := range []int{1, 2, 3} {
				k := len(steps) * frac / 4
				given := map[string]*tensor.Tensor{}
				for i := range steps[:k] {
					for _, slot := range steps[i].out {
						if name := s.prog.names[max(slot, 0)]; slot >= 0 && all[name] != nil {
							given[name] = all[name]
						}
					}
				}
				prof.Reset()
				got, err := s.Run(context.Background(), c.inputs, RunOptions{Given: given})
				if err != nil {
					t.Fatal(err)
				}
				if err := sameBits(want, copyOutputs(got)); err != nil {
					t.Fatalf("given the first %d of %d steps' values: %v", k, len(steps), err)
				}
				if ran := stepsRun(prof); ran > whole-k {
					t.Errorf("given the first %d of %d steps' values: %d steps ran, want at most %d", k, len(steps), ran, whole-k)
				}
			}
		})
	}
}

// stepsRun is the number of steps the profile saw run.
func stepsRun(prof *Profile) int {
	n := 0
	for _, s := range prof.Nodes() {
		if s.Node != tapsNode {
			n += s.Count
		}
	}
	return n
}

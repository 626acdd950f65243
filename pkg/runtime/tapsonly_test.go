package runtime

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestTapsOnly checks that a TapsOnly run taps every value as a whole run
// does, bit for bit, returns no outputs, and runs only the steps the
// tapped values need: fused steps' inner values included, and the steps
// after them left out.
func TestTapsOnly(t *testing.T) {
	tail := func(b *testmodels.Builder, from string) {
		b.Node("Exp", "exp", []string{from}, []string{"e"})
		b.Node("Neg", "neg", []string{"e"}, []string{"z"})
		b.Output("z", tensor.Float, 2, 8, 5, 6)
	}
	conv := convBNReluModel(1)
	tail(conv, "y")
	for _, tc := range []struct {
		name  string
		model *testmodels.Builder
		taps  []string
		// ran are the steps a TapsOnly run of taps computes (the profile's
		// node names: a fused step is its first node's).
		ran []string
	}{
		{"inner value of a fused step", conv, []string{"n1"}, []string{"conv1"}},
		{"middle", conv, []string{"y"}, []string{"conv1", "conv2"}},
		{"two taps", conv, []string{"r1", "e"}, []string{"conv1", "conv2", "exp"}},
		{"the input", conv, []string{"x"}, nil},
		{"the output", conv, []string{"z"}, []string{"conv1", "conv2", "exp", "neg"}},
		{"residual, fused Add", residualModel(false, false, false, false), []string{"a"}, []string{"conv1", "skip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := onnxgraph.LoadBytes(tc.model.Bytes(), "")
			if err != nil {
				t.Fatal(err)
			}
			prof := NewProfile()
			s, err := NewGoSession(m, Options{Threads: 2, Profile: prof})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(3, 4))
			x := tensor.New(tensor.Float, 2, 4, 9, 11)
			for i := range x.Float32s() {
				x.Float32s()[i] = r.Float32()*4 - 2
			}
			in := map[string]*tensor.Tensor{"x": x}
			run := func(only bool) (map[string][]uint32, map[string]*tensor.Tensor) {
				got := map[string][]uint32{}
				outs, err := s.Run(context.Background(), in, RunOptions{TapValues: tc.taps, TapsOnly: only, Tap: func(name string, v *tensor.Tensor) {
					for _, f := range v.Float32s() {
						got[name] = append(got[name], math.Float32bits(f))
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
				return got, outs
			}
			want, full := run(false)
			if len(full) == 0 {
				t.Fatal("a whole run returned no outputs")
			}
			prof.Reset()
			got, outs := run(true)
			if len(outs) != 0 {
				t.Errorf("a TapsOnly run returned outputs %v", outs)
			}
			for _, name := range tc.taps {
				if len(want[name]) == 0 || !slices.Equal(got[name], want[name]) {
					t.Errorf("tap %q: %d values, want the whole run's %d, bit for bit", name, len(got[name]), len(want[name]))
				}
			}
			var ran []string
			for _, n := range prof.Nodes() {
				if n.Node != tapsNode {
					ran = append(ran, n.Node)
				}
			}
			slices.Sort(ran)
			if !slices.Equal(ran, tc.ran) {
				t.Errorf("ran %v, want %v", ran, tc.ran)
			}
		})
	}
}

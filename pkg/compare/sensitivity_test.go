package compare

import (
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/plan"
)

// TestSubPlan checks that a subset of a plan keeps only points that can be
// written without the dropped ones.
func TestSubPlan(t *testing.T) {
	plan := &plan.Plan{Tensors: []*plan.TensorPlan{
		{Value: "x", Role: plan.Activation, Nodes: []string{"conv"}},
		{Value: "w", Role: plan.Weight, Nodes: []string{"conv"}},
		{Value: "b", Role: plan.Bias, Nodes: []string{"conv"}, Input: "x", Weight: "w"},
		{Value: "cat", Role: plan.Activation, Nodes: []string{"concat"}},
		{Value: "a", Role: plan.Activation, Nodes: []string{"concat"}, SharedWith: "cat"},
		{Value: "a2", Role: plan.Activation, Nodes: []string{"concat"}, SharedWith: "a"},
	}, Palettes: []*plan.PalettePlan{{Value: "lut", Nodes: []string{"gemm"}, Report: &plan.PaletteReport{}}}}
	tests := []struct {
		name string
		keep []string
		want []string
	}{
		{name: "everything", keep: []string{"x", "w", "b", "cat", "a", "a2", "lut"}, want: []string{"x", "w", "b", "cat", "a", "a2", "lut"}},
		{name: "bias without its input", keep: []string{"w", "b"}, want: []string{"w"}},
		{name: "bias without its weight", keep: []string{"x", "b"}, want: []string{"x"}},
		{name: "sharing chain without its root", keep: []string{"x", "a", "a2"}, want: []string{"x"}},
		{name: "sharing chain with its root", keep: []string{"cat", "a", "a2"}, want: []string{"cat", "a", "a2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := SubPlan(plan, func(v string) bool { return slices.Contains(tt.keep, v) })
			var got []string
			for _, p := range sub.Tensors {
				got = append(got, p.Value)
			}
			for _, p := range sub.Palettes {
				got = append(got, p.Value)
				if p.Report != nil || p == plan.Palettes[0] {
					t.Errorf("palette %q is the source plan's, with its report", p.Value)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
			if len(plan.Tensors) != 6 {
				t.Fatalf("the source plan changed: %d tensors", len(plan.Tensors))
			}
		})
	}
}

// TestGroups checks that a bias goes with its weight's node and a point
// sharing qparams with its root's, whichever node they are planned for.
func TestGroups(t *testing.T) {
	plan := &plan.Plan{Tensors: []*plan.TensorPlan{
		{Value: "x", Role: plan.Activation, Nodes: []string{"conv0", "conv1"}},
		{Value: "w1", Role: plan.Weight, Nodes: []string{"conv1"}},
		{Value: "b1", Role: plan.Bias, Nodes: []string{"conv1"}, Input: "x", Weight: "w1"},
		{Value: "cat", Role: plan.Activation, Nodes: []string{"concat"}},
		{Value: "y", Role: plan.Activation, Nodes: []string{"conv2"}, SharedWith: "cat"},
		{Value: "loose", Role: plan.Activation},
	}, Palettes: []*plan.PalettePlan{{Value: "lut", Nodes: []string{"conv1"}}}}
	got := Groups(nil, plan, GroupByNode)
	want := []Group{
		{Name: "concat", Values: []string{"cat", "y"}},
		{Name: "conv0", Values: []string{"x"}},
		{Name: "conv1", Values: []string{"b1", "lut", "w1"}},
		{Name: "loose", Values: []string{"loose"}},
	}
	if !slices.EqualFunc(got, want, func(a, b Group) bool { return a.Name == b.Name && slices.Equal(a.Values, b.Values) }) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

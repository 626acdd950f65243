package passes

import (
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// infStats are range statistics that also count infinities.
type infStats struct {
	RangeStats
	inf map[string]int64
}

func (s infStats) Infinities(v string) int64 { return s.inf[v] }

// TestKeepInfinitiesFloat: a masked score tensor that held −Inf in
// calibration leaves the plan with the tensors sharing its qparams and the
// int32 bias that needed its scale; the rest stays quantized.
func TestKeepInfinitiesFloat(t *testing.T) {
	b := testmodels.New("masked", 17)
	b.Input("x", tensor.Float, 2, 4).Input("mask", tensor.Float, 2, 4).Output("y", tensor.Float, 2, 3).Output("p", tensor.Float, 4, 2)
	b.RandomInit("w", 1, 3, 4).RandomInit("bias", 1, 3)
	b.Node("Add", "add_mask", []string{"x", "mask"}, []string{"s"})
	b.Node("Transpose", "tr", []string{"s"}, []string{"st"})
	b.Node("Softmax", "softmax", []string{"st"}, []string{"p"})
	b.Node("Gemm", "fc", []string{"s", "w", "bias"}, []string{"y"}, testmodels.AttrInt("transB", 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		inf  map[string]int64
		gone []string
	}{
		{"no infinities", nil, nil},
		{"masked scores", map[string]int64{"s": 3}, []string{"s", "st", "bias"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := preparePreset(t, m, "w8a8", PrepareOptions{})
			for _, v := range []string{"s", "st", "bias", "x", "mask", "p", "y", "w"} {
				if plan.Tensor(v) == nil {
					t.Fatalf("value %q is not planned before calibration", v)
				}
			}
			KeepInfinitiesFloat(plan, infStats{inf: c.inf})
			gone := map[string]bool{}
			for _, v := range c.gone {
				gone[v] = true
			}
			for _, v := range []string{"s", "st", "bias", "x", "mask", "p", "y", "w"} {
				if got := plan.Tensor(v) == nil; got != gone[v] {
					t.Errorf("value %q: removed %v, want %v", v, got, gone[v])
				}
			}
			notes := strings.Join(plan.Notes, "\n")
			if len(c.gone) > 0 && !strings.Contains(notes, `value "s": held 3 ±Inf values`) {
				t.Errorf("no note for the masked scores in:\n%s", notes)
			}
			if len(c.gone) == 0 && strings.Contains(notes, "±Inf") {
				t.Errorf("infinity note without infinities:\n%s", notes)
			}
		})
	}
	// Statistics without infinity counts (RangeStats) leave the plan alone.
	plan := preparePreset(t, m, "w8a8", PrepareOptions{})
	n := len(plan.Tensors)
	KeepInfinitiesFloat(plan, RangeStats{})
	if len(plan.Tensors) != n {
		t.Errorf("RangeStats removed %d tensors", n-len(plan.Tensors))
	}
}

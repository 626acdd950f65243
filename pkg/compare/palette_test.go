package compare

import (
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestPalettizedWeights: the per-layer report finds each palettized weight
// of a written model with the writer's figures, an exact one as inf.
func TestPalettizedWeights(t *testing.T) {
	b := testmodels.New("pal", 17)
	b.Input("x", tensor.Float, 2, 8).Output("y", tensor.Float, 2, 4).Output("z", tensor.Float, 2, 4)
	w := make([]float32, 32)
	for i := range w {
		w[i] = float32(i%7) - 3 // 7 values: a 3-bit LUT is exact
	}
	v := make([]float32, 32)
	for i := range v {
		v[i] = float32(math.Sin(float64(i)))
	}
	b.Init("W", []int64{8, 4}, w).Init("V", []int64{8, 4}, v)
	b.Node("MatMul", "mm", []string{"x", "W"}, []string{"y"})
	b.Node("MatMul", "mv", []string{"x", "V"}, []string{"z"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	p3 := &config.Palettization{NBits: 3, ClusterDim: 1}
	p2 := &config.Palettization{NBits: 2, ClusterDim: 1}
	plan := &plan.Plan{Stage: plan.Calibrated, Palettes: []*plan.PalettePlan{
		{Value: "W", Nodes: []string{"mm"}, Palette: p3, Shape: []int{8, 4}, Axis: 1, ScaleAxis: 1, InputAxis: 0},
		{Value: "V", Nodes: []string{"mv"}, Palette: p2, Shape: []int{8, 4}, Axis: 1, ScaleAxis: 1, InputAxis: 0},
	}}
	r, err := finalize.Write(m, plan, finalize.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := PalettizedWeights(r.Model)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("found %d palettized weights, want 2: %+v", len(got), got)
	}
	byName := map[string]PaletteWeight{}
	for _, g := range got {
		byName[g.Weight] = g
	}
	if g := byName["W"]; !math.IsInf(float64(g.SQNR), 1) || g.Entries != 8 || g.LUTs != 1 || len(g.Consumers) != 1 || g.Consumers[0] != "mm" {
		t.Errorf("W: %+v", g)
	}
	for _, p := range r.Palettes {
		if p.Value == "V" {
			if g := byName["V"]; math.Abs(float64(g.SQNR)-p.Report.SQNR) > 1e-4 || g.BitsPerWeight != p.Report.BitsPerWeight || g.Entries != 4 {
				t.Errorf("V: %+v, writer reported %+v", g, *p.Report)
			}
		}
	}
}

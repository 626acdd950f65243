package finalize

import (
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func TestParseFormat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Format
		err  bool
	}{{"", FormatQDQ, false}, {"qdq", FormatQDQ, false}, {"ort-nbits", FormatORTNBits, false}, {"nbits", 0, true}} {
		f, err := ParseFormat(c.in)
		if (err != nil) != c.err || (!c.err && f != c.want) {
			t.Errorf("ParseFormat(%q) = %v, %v", c.in, f, err)
		}
	}
}

// TestNBitsLayout writes one MatMul weight [K=20, N=2] blocked by 16 along
// K as MatMulNBits and checks the packed bytes by hand: K padded to 32 with
// the zero point, low nibble first, symmetric int4 as uint4 + 8 with no
// zero_points input; and that weights MatMulNBits cannot take stay QDQ
// with a note naming why.
func TestNBitsLayout(t *testing.T) {
	b := testmodels.New("nbits", 17)
	b.Input("a", tensor.Float, 1, 20).Input("c", tensor.Float, 1, 20).Output("y", tensor.Float, 1, 2).Output("z", tensor.Float, 1, 2)
	w := make([]float32, 40)
	for k := range 20 {
		w[k*2] = float32(k%8) - 4 // column 0: codes -4..3 at scale 1
		w[k*2+1] = 1              // column 1: code 1 at scale 1
	}
	b.Init("W", []int64{20, 2}, w).Init("V", []int64{2, 20}, make([]float32, 40))
	b.Node("MatMul", "mm", []string{"a", "W"}, []string{"y"})
	b.Node("Gemm", "gemm", []string{"c", "V"}, []string{"z"}, testmodels.AttrInt("transB", 1), testmodels.AttrFloat("alpha", 2))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	s := &spec.QuantizationSpec{DType: spec.Int4, QScheme: spec.Symmetric, ScaleDType: spec.Float32,
		Granularity: spec.Granularity{Type: spec.PerBlock, Axis: intPtr(0), BlockSize: 16}}
	p := &plan.Plan{Stage: plan.Calibrated}
	for _, tp := range []*plan.TensorPlan{
		{Value: "W", Role: plan.Weight, Spec: s, Nodes: []string{"mm"}, Axis: 0, BlockSize: 16, Shape: []int{20, 2},
			Params: &plan.Params{Scales: []float32{1, 1, 1, 1}, ZeroPoints: []int32{0, 0, 0, 0}}},
		{Value: "V", Role: plan.Weight, Spec: s, Nodes: []string{"gemm"}, Axis: 1, BlockSize: 16, Shape: []int{2, 20},
			Params: &plan.Params{Scales: []float32{1, 1, 1, 1}, ZeroPoints: []int32{0, 0, 0, 0}}},
	} {
		if err := p.Add(tp); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Write(m, p, Options{Format: FormatORTNBits})
	if err != nil {
		t.Fatal(err)
	}
	n := r.Model.Graph.Node("mm")
	if n == nil || n.OpType != "MatMulNBits" || n.Domain != "com.microsoft" {
		t.Fatalf("mm is %v, want com.microsoft MatMulNBits", n)
	}
	if len(n.Inputs) != 3 {
		t.Errorf("MatMulNBits inputs %d, want 3 (no zero points for symmetric int4)", len(n.Inputs))
	}
	for _, a := range []struct {
		name string
		want int64
	}{{"K", 20}, {"N", 2}, {"bits", 4}, {"block_size", 16}} {
		if at := n.Attr(a.name); at == nil || at.GetI() != a.want {
			t.Errorf("attribute %s = %v, want %d", a.name, at, a.want)
		}
	}
	bt := initData(t, r.Model, n.Inputs[1].Name)
	if want := []int{2, 2, 8}; len(bt.Shape) != 3 || bt.Shape[0] != want[0] || bt.Shape[1] != want[1] || bt.Shape[2] != want[2] {
		t.Fatalf("B shape %v, want %v", bt.Shape, want)
	}
	bd := bt.Data.([]uint8)
	// Row 0, block 0: k = 0, 1 → codes -4, -3 → uint 4, 5 → byte 0x54.
	// Row 0, block 1: k = 16..19 → 16%8-4 = -4.. → 4, 5, 6, 7; k = 20..31 padding 8.
	// Row 1: every code 1 → 9 → 0x99; padding 8 → 0x88.
	for _, c := range []struct {
		at   int
		want uint8
	}{{0, 0x54}, {1, 0x76}, {8, 0x54}, {9, 0x76}, {10, 0x88}, {15, 0x88}, {16, 0x99}, {24, 0x99}, {25, 0x99}, {26, 0x88}} {
		if bd[c.at] != c.want {
			t.Errorf("B byte %d = %#x, want %#x", c.at, bd[c.at], c.want)
		}
	}
	if g := r.Model.Graph.Node("gemm"); g == nil || g.OpType != "Gemm" {
		t.Errorf("the alpha = 2 Gemm was rewritten: %v", g)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, `weight "V": written as QDQ, not MatMulNBits`) || !strings.Contains(notes, "alpha 2") {
		t.Errorf("notes do not explain the QDQ fallback:\n%s", notes)
	}
}

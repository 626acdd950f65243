package finalize

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// tiedModel builds ids [4] → Gather(E [10, 6]) → x [4, 6] → head → logits
// [4, 10], the head reading E in the form given: "transpose" MatMul(x,
// Transpose(E)), "ir 3" the same in IR version 3, "identity" the same
// through an Identity copy of E, "gemm" Gemm(x, E, transB=1); "transpose
// twice" adds a second reader of the Transpose's output, "gather axis 1"
// gathers columns instead.
func tiedModel(t *testing.T, form string) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("tied", 17)
	b.Input("ids", tensor.Int64, 4).Output("logits", tensor.Float, 4, 10)
	b.RandomInit("E", 0.5, 10, 6)
	if form == "ir 3" {
		// Before IR 4 every initializer is a graph input too.
		b.Model.IrVersion = proto.Int64(3)
		b.Input("E", tensor.Float, 10, 6)
	}
	gatherAxis := int64(0)
	if form == "gather axis 1" {
		gatherAxis = 1
	}
	b.Node("Gather", "/embed/Gather", []string{"E", "ids"}, []string{"x"}, testmodels.AttrInt("axis", gatherAxis))
	table := "E"
	if form == "identity" {
		b.Node("Identity", "/lm_head/Identity", []string{"E"}, []string{"E_copy"})
		table = "E_copy"
	}
	switch form {
	case "gemm":
		b.Node("Gemm", "/lm_head/Gemm", []string{"x", "E"}, []string{"logits"}, testmodels.AttrInt("transB", 1))
	default:
		b.Node("Transpose", "/lm_head/Transpose", []string{table}, []string{"Et"}, testmodels.AttrInts("perm", 1, 0))
		b.Node("MatMul", "/lm_head/MatMul", []string{"x", "Et"}, []string{"logits"})
		if form == "transpose twice" {
			b.Output("Et", tensor.Float, 6, 10)
		}
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUntie: TiedTables finds the tie in each form an exporter writes and
// nothing where the head's weight is read elsewhere too or the Gather is
// no embedding lookup; Untie gives the head a weight of its own, named
// after the weight input it read (a Gemm's after its module), drops the
// Transpose (and the Identity copy that fed it), leaves the Gather on the table, and the untied model computes
// the same logits, bit for bit, in the built-in engine.
func TestUntie(t *testing.T) {
	ids := tensor.FromInt64([]int64{3, 0, 9, 3}, 4)
	for _, tc := range []struct {
		form, weight string
	}{
		{"transpose", "Et"},
		{"ir 3", "Et"},
		{"identity", "Et"},
		{"gemm", "lm_head.weight"},
		{"transpose twice", ""},
		{"gather axis 1", ""},
	} {
		t.Run(tc.form, func(t *testing.T) {
			m := tiedModel(t, tc.form)
			ties := TiedTables(m)
			if tc.weight == "" {
				if len(ties) != 0 {
					t.Fatalf("found %d ties, want none", len(ties))
				}
				return
			}
			if len(ties) != 1 || ties[0].Weight != tc.weight || ties[0].Table.Name != "E" || len(ties[0].Gathers) != 1 {
				t.Fatalf("ties %+v: want one, E read by the Gather and by the head as %q", ties, tc.weight)
			}
			for _, shapeOnly := range []bool{true, false} {
				um, err := Untie(m, ties, UntieOptions{ShapeOnly: shapeOnly})
				if err != nil {
					t.Fatal(err)
				}
				head := um.Graph.Nodes[len(um.Graph.Nodes)-1]
				w := head.Inputs[1]
				if w.Name != tc.weight || !w.IsInitializer || w.Const == nil {
					t.Fatalf("shapeOnly=%v: %s reads %q (initializer %v), want its own initializer %q", shapeOnly, head, w.Name, w.IsInitializer, tc.weight)
				}
				wantDims := []int64{6, 10}
				if tc.form == "gemm" {
					wantDims = []int64{10, 6}
				}
				if !slices.Equal(w.Const.GetDims(), wantDims) {
					t.Errorf("shapeOnly=%v: weight dims %v, want %v", shapeOnly, w.Const.GetDims(), wantDims)
				}
				for _, n := range um.Graph.Nodes {
					if n.OpType == "Transpose" || n.OpType == "Identity" {
						t.Errorf("shapeOnly=%v: %s is still there", shapeOnly, n)
					}
					if n.OpType == "Gather" && initializerOf(n.Inputs[0]).Name != "E" {
						t.Errorf("shapeOnly=%v: the Gather reads %q, want the table", shapeOnly, n.Inputs[0].Name)
					}
				}
				if tc.form == "ir 3" && !slices.ContainsFunc(um.Proto.Graph.Input, func(v *onnxpb.ValueInfoProto) bool { return v.GetName() == tc.weight }) {
					t.Errorf("shapeOnly=%v: IR 3 and %q is no graph input", shapeOnly, tc.weight)
				}
				if shapeOnly {
					continue
				}
				want, got := runTied(t, m, ids), runTied(t, um, ids)
				if !slices.Equal(want, got) {
					t.Errorf("untied logits %v, want the tied model's %v", got, want)
				}
			}
		})
	}
}

func runTied(t *testing.T, m *onnxgraph.Model, ids *tensor.Tensor) []float32 {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"ids": ids}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out["logits"].Float32s()
}

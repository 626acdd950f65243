package compare

import (
	"bytes"
	"math"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
)

// syntheticReport has every kind of row the table prints, with figures
// fixed in the test so the golden file does not depend on engine rounding.
func syntheticReport() *Report {
	top1, top5, ra, ca := 98.4375, 100.0, 99.21875, 98.4375
	lo, hi := -4.982, 4.943
	r := &Report{Reference: "model.onnx", Candidate: "model.int8.onnx", Engine: "go", Samples: 128, Batches: 16,
		Outputs: []OutputReport{
			{Name: "logits", Shape: []int{8, 10}, SQNR: 24.2113, Cosine: 0.998489, MaxAbsError: 9.9346, MeanAbsError: 0.2011,
				Top1Agreement: &top1, Top5Agreement: &top5, ReferenceAccuracy: &ra, CandidateAccuracy: &ca},
			{Name: "features", CandidateName: "features_q", Shape: []int{8, 1, 64}, SQNR: DB(math.Inf(1)), Cosine: 1},
		},
		Layers: []LayerReport{
			{Pair: Pair{Tensor: "/fc/Gemm_output_0", Node: "/fc/Gemm", OpType: "Gemm", Module: "fc", DType: "int8", Rule: "cfg.yaml:12 (op_type_config.Gemm)", ClipMin: &lo, ClipMax: &hi},
				SQNR: 21.5, LocalSQNR: 26.25},
			{Pair: Pair{Tensor: "/relu/Relu_output_0", Node: "/relu/Relu", OpType: "Relu", DType: "uint8"}, SQNR: 30.17, LocalSQNR: DB(math.Inf(1))},
			{Pair: Pair{Tensor: "input", OpType: "graph input", DType: "int8"}, SQNR: 46.56, LocalSQNR: 46.56},
		},
		Unpaired:           []Unpaired{{Value: "y_dq", Reason: "the input \"y_q\" of DequantizeLinear \"dq\" is not produced by a QuantizeLinear"}},
		WeightDequantizers: 4,
	}
	return r
}

func TestWriteTableGolden(t *testing.T) {
	cases := []struct {
		name  string
		gates Gates
	}{
		{"no_gates", Gates{}},
		{"gates_fail", Gates{MinSQNR: ptr(30.0), MinTop1Agreement: ptr(99.0)}},
		{"gates_pass", Gates{MinSQNR: ptr(20.0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := syntheticReport()
			if _, err := r.Check(c.gates); err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := r.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, filepath.Join("testdata", "table_"+c.name+".txt"), b.Bytes())
			var j bytes.Buffer
			if err := r.WriteJSON(&j); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, filepath.Join("testdata", "report_"+c.name+".json"), j.Bytes())
		})
	}
}

func TestWriteLayersLimit(t *testing.T) {
	var b bytes.Buffer
	if err := syntheticReport().WriteLayers(&b, 2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte("… 1 more")) || bytes.Contains(b.Bytes(), []byte("46.56")) {
		t.Errorf("limit 2 of 3 rows:\n%s", b.String())
	}
}

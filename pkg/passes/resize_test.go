package passes

import (
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// resizeNet is x [batch,4,8,8] → Conv 3×3 → Resize (scales {1, 1, k, k},
// the given coordinate transformation, nearest_mode floor) → Conv 1×1 →
// output [batch,4,8k,8k]; batch is "N" or a number.
func resizeNet(t *testing.T, batch any, k float32, coords string) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("upsample", 13)
	side := int(8 * k)
	b.Input("x", tensor.Float, batch, 4, 8, 8).Output("output", tensor.Float, batch, 4, side, side)
	b.RandomInit("conv1.weight", 0.6, 8, 4, 3, 3).RandomInit("conv1.bias", 0.3, 8)
	b.RandomInit("conv2.weight", 0.4, 4, 8, 1, 1).RandomInit("conv2.bias", 0.1, 4)
	b.Init("roi", []int64{0}, nil).Init("scales", []int64{4}, []float32{1, 1, k, k})
	b.Node("Conv", "conv1", []string{"x", "conv1.weight", "conv1.bias"}, []string{"h"},
		testmodels.AttrInts("kernel_shape", 3, 3), testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Resize", "upsample", []string{"h", "roi", "scales"}, []string{"u"}, testmodels.AttrString("mode", "nearest"),
		testmodels.AttrString("coordinate_transformation_mode", coords), testmodels.AttrString("nearest_mode", "floor"))
	b.Node("Conv", "conv2", []string{"u", "conv2.weight", "conv2.bias"}, []string{"output"},
		testmodels.AttrInts("kernel_shape", 1, 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// resizeCases are the nearest Resizes finalize writes on channel planes
// for ONNX Runtime targets (steps 2× Resizes between two Reshapes), and
// those it leaves (3×, and half_pixel coordinates: ONNX Runtime has no
// fast loop for them). A fixed batch lets ONNX Runtime know every shape
// (it removes a Reshape that keeps one).
var resizeCases = []struct {
	name   string
	batch  any
	k      float32
	coords string
	steps  int // 0: not rewritten
}{
	{"2x", "N", 2, "asymmetric", 1},
	{"2x fixed batch", 8, 2, "asymmetric", 1},
	{"4x", "N", 4, "asymmetric", 2},
	{"8x fixed batch", 8, 8, "asymmetric", 3},
	{"3x", "N", 3, "asymmetric", 0},
	{"2x half_pixel", "N", 2, "half_pixel", 0},
}

// TestNearestResizeChannelsFirst checks the written form of each Resize
// (Reshapes of 8-bit values around steps 2× Resizes, or the Resize as
// prepare placed it) and that the built-in engine gives exactly the
// outputs of the plan written without the rewrites.
// TestORTNearestResizeChannelsFirst checks the same models in ONNX
// Runtime.
func TestNearestResizeChannelsFirst(t *testing.T) {
	in := integerChainInput(t)
	for _, tc := range resizeCases {
		t.Run(tc.name, func(t *testing.T) {
			u, plain := quantizeChain(t, resizeNet(t, tc.batch, tc.k, tc.coords), in)
			counts := map[string]int{}
			for _, n := range u.Result.Model.Graph.Nodes {
				counts[n.OpType]++
			}
			wantResizes, wantReshapes := max(tc.steps, 1), 2*min(tc.steps, 1)
			if counts["Resize"] != wantResizes || counts["Reshape"] != wantReshapes {
				t.Errorf("%d Resize and %d Reshape nodes, want %d and %d", counts["Resize"], counts["Reshape"], wantResizes, wantReshapes)
			}
			for _, n := range u.Result.Model.Graph.Nodes {
				if n.OpType == "Reshape" && (n.Inputs[0].Producer == nil || n.Inputs[0].Producer.OpType != "QuantizeLinear" || n.Outputs[0].Consumers[0].OpType != "DequantizeLinear") {
					t.Errorf("%s reads %s and feeds %s, want a QuantizeLinear's output for a DequantizeLinear", n, n.Inputs[0].Producer, n.Outputs[0].Consumers[0])
				}
			}
			noted := slices.ContainsFunc(u.Result.Notes, func(s string) bool {
				return strings.Contains(s, `"upsample"`) && strings.Contains(s, "Reshape")
			})
			if noted != (tc.steps > 0) {
				t.Errorf("a note on the Resize: %v, want %v (notes %q)", noted, tc.steps > 0, u.Result.Notes)
			}
			want := runGo(t, plain.Model, in)
			got := runGo(t, u.Result.Model, in)
			if !slices.Equal(want, got) {
				t.Errorf("outputs differ from the model written without the rewrite (SQNR %.1f dB)", sqnr(want, got))
			}
		})
	}
}

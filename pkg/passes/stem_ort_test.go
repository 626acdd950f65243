//go:build ort

package passes

import (
	"slices"
	"testing"
)

// TestORTStemChannelsPadded checks in ONNX Runtime's optimized graph
// that every Conv runs on integers (no float Conv left; the padded stem
// as a QLinearConv of 4 channels), and that the outputs are exactly those
// of the plan written without the rewrite.
func TestORTStemChannelsPadded(t *testing.T) {
	lib := ortLibrary(t)
	for _, tc := range stemCases {
		t.Run(tc.name, func(t *testing.T) {
			in := stemInput(t, tc.c)
			u, plain := quantizeChain(t, stemNet(t, tc.c, tc.k), in)
			om := ortOptimized(t, lib, u.Result.Model)
			qconvs, stemIn := 0, int64(0)
			for _, n := range om.Graph.Nodes {
				switch n.OpType {
				case "Conv", "FusedConv":
					t.Errorf("%s runs in float", n)
				case "QLinearConv":
					qconvs++
					w := n.Inputs[3]
					if !w.IsConst() {
						t.Fatalf("%s: weight %s is not a constant", n, w.Name)
					}
					if dims := w.Const.GetDims(); dims[0] == 8 {
						stemIn = dims[1]
					}
				}
			}
			if qconvs != 2 {
				t.Errorf("ONNX Runtime runs %d QLinearConv nodes, want 2", qconvs)
			}
			if want := map[bool]int64{true: 4, false: int64(tc.c)}[tc.padded]; stemIn != want {
				t.Errorf("the stem's QLinearConv reads %d channels, want %d", stemIn, want)
			}
			want, got := ortOutputs(t, lib, plain.Model, u.Result.Model, in)
			if !slices.Equal(want, got) {
				t.Errorf("outputs differ from the model written without the rewrite (SQNR %.1f dB)", sqnr(want, got))
			}
		})
	}
}

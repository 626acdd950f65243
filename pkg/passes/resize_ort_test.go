//go:build ort

package passes

import (
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestORTNearestResizeChannelsFirst checks in ONNX Runtime's optimized
// graph that every rewritten Resize runs channels-first by 2 (scales
// {1, 1, 2, 2}, the fast loop's) on integers (no float Resize, no
// DequantizeLinear left before it), and that the outputs are exactly those
// of the plan written without the rewrite.
func TestORTNearestResizeChannelsFirst(t *testing.T) {
	lib := ortLibrary(t)
	in := integerChainInput(t)
	for _, tc := range resizeCases {
		if tc.steps == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			u, plain := quantizeChain(t, resizeNet(t, tc.batch, tc.k, tc.coords), in)
			om := ortOptimized(t, lib, u.Result.Model)
			resizes := 0
			for _, n := range om.Graph.Nodes {
				if n.OpType != "Resize" {
					continue
				}
				resizes++
				if p := n.Inputs[0].Producer; p != nil && p.OpType == "DequantizeLinear" {
					t.Errorf("%s runs in float after %s", n, p)
				}
				if len(n.Inputs) < 3 || n.Inputs[2] == nil || !n.Inputs[2].IsConst() {
					t.Errorf("%s has no constant scales", n)
					continue
				}
				sc, err := tensor.FromProto(n.Inputs[2].Const, om)
				if err != nil {
					t.Fatal(err)
				}
				if s := sc.Float32s(); !slices.Equal(s, []float32{1, 1, 2, 2}) {
					t.Errorf("%s runs with scales %v, want [1 1 2 2] (channels-first, by 2)", n, s)
				}
			}
			if resizes != tc.steps {
				t.Errorf("ONNX Runtime runs %d Resize nodes, want %d", resizes, tc.steps)
			}
			want, got := ortOutputs(t, lib, plain.Model, u.Result.Model, in)
			if !slices.Equal(want, got) {
				t.Errorf("outputs differ from the model written without the rewrite (SQNR %.1f dB)", sqnr(want, got))
			}
		})
	}
}

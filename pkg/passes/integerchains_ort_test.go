//go:build ort

package passes

import (
	"testing"
)

// TestORTIntegerChains writes HardSwish, HardSigmoid and SiLU chains and
// scalar factors for target ort-x86 and checks in ONNX Runtime's
// optimized graph that none of their float ops is left, and that the
// outputs stay those of the same plan written without the rewrites (ONNX
// Runtime runs both): the rewrites change scales, not values, but for
// the rounding of the Clip's or Sigmoid's output to 8 bits, which the
// integer Mul needs.
func TestORTIntegerChains(t *testing.T) {
	lib := ortLibrary(t)
	in := integerChainInput(t)
	for _, tc := range integerChainCases {
		t.Run(tc.name, func(t *testing.T) {
			u, plain := quantizeChain(t, chainNet(t, tc.chain), in)
			allowed := map[string]bool{}
			for _, op := range tc.float {
				allowed[op] = true
			}
			om := ortOptimized(t, lib, u.Result.Model)
			for op, n := range opCounts(om) {
				switch op {
				case "Add", "Clip", "Mul", "Div", "Erf", "Sigmoid", "Conv":
					if !allowed[op] {
						t.Errorf("ONNX Runtime runs %d %s in float", n, op)
					}
				}
			}
			want, got := ortOutputs(t, lib, plain.Model, u.Result.Model, in)
			if db := sqnr(want, got); db < tc.minSQNR {
				t.Errorf("output SQNR against the model written without the rewrites: %.1f dB, want at least %.0f", db, tc.minSQNR)
			} else {
				t.Logf("output SQNR against the model written without the rewrites: %.1f dB", db)
			}
		})
	}
}

//go:build ort

package passes

import (
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestFloat16AlgorithmsInORT: a float16 model quantized with equalization
// (through gated activations: the float16 Muls it inserts), SmoothQuant's
// float16 constants and bias correction loads in ONNX Runtime 1.23 and
// gives, unfused and fused, an output within 1 dB (unfused) and 3 dB
// (fused) of the built-in engine's SQNR against the float model, on
// gatedModel and smoothModel in float16 (fixed seeds). quantizeWith
// calibrates on random inputs, not on the samples run here, so the figures
// are low (5–9 dB, as in float32); the check is the engines' agreement.
func TestFloat16AlgorithmsInORT(t *testing.T) {
	lib := ortLibrary(t)
	for _, tc := range []struct {
		name       string
		model      func(*testing.T) *onnxgraph.Model
		src        *sampleSource
		algorithms string
	}{
		{"gated", gatedModel, newSampleSource(3, 8, 3, 8, 8), "  cross_layer_equalization: {gated_min_gain: 0.01}\n  bias_correction: true\n"},
		{"smooth", smoothModel, newSampleSource(61, 40, smoothFeatures), "  smoothquant: true\n  bias_correction: true\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(smoothConfig+"algorithms:\n"+tc.algorithms), "f16.yaml")
			if err != nil {
				t.Fatal(err)
			}
			tc.src.half = true
			u := quantizeWith(t, toFloat16(t, tc.model(t)), "", cfg.Algorithms, tc.src, cfg.Quant)
			in, err := tc.src.Batch(0, tc.src.n)
			if err != nil {
				t.Fatal(err)
			}
			ref := enginetest.Run(t, toFloat16(t, tc.model(t)), in)
			goOut := enginetest.Run(t, u.Result.Model, in)
			exact := runORT(t, lib, u.Result.Model, in, ortOptions("w8a8", ort.OptimizeNone))
			fused := runORT(t, lib, u.Result.Model, in, ortOptions("w8a8", ort.OptimizeAll))
			for n, r := range ref {
				f := func(m map[string]*tensor.Tensor) []float32 {
					x, err := m[n].AsFloat32()
					if err != nil {
						t.Fatalf("output %q: %v", n, err)
					}
					return x
				}
				rf := f(ref)
				sGo, sExact, sFused := sqnr(rf, f(goOut)), sqnr(rf, f(exact)), sqnr(rf, f(fused))
				t.Logf("%s %v: SQNR built-in %.1f dB, ORT unfused %.1f, fused %.1f", n, r.Shape, sGo, sExact, sFused)
				if sExact < sGo-1 || sFused < sGo-3 {
					t.Errorf("output %q: SQNR %.1f dB built-in, %.1f ORT unfused, %.1f ORT fused", n, sGo, sExact, sFused)
				}
			}
		})
	}
}

//go:build ort

package passes

import (
	"context"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// TestBiasCorrectionEngines: bias correction measured with ONNX Runtime
// (one error model of every layer, run after each batch on copies of the
// layers' inputs) corrects the biases the built-in engine corrects
// (each layer's error model run in the tap, on the input as computed), to
// float rounding: the two ways see the same inputs and weight errors.
func TestBiasCorrectionEngines(t *testing.T) {
	runtime.RegisterEngine(ort.EngineName, ort.Open)
	cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  bias_correction: true\n"), "int4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	biases := func(engine string) map[string][]float32 {
		u := &Unit{Model: cleModel(t), Config: cfg.Quant, Algorithms: cfg.Algorithms,
			Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
				return observe(t, m, plan), nil
			},
			Data: &AlgorithmData{Engine: engine, Runtime: runtime.Options{Threads: 1}, Source: newSampleSource(4, 12, 3, 8, 8), BatchSize: 5}}
		if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for w, b := range u.UncorrectedBiases {
			v := u.Model.Graph.Value(b.Bias)
			data, _, err := constFloats(u.Model, v)
			if err != nil {
				t.Fatal(err)
			}
			out[w] = data
		}
		return out
	}
	goBiases, ortBiases := biases("go"), biases(ort.EngineName)
	if len(goBiases) == 0 {
		t.Fatal("no bias corrected: the test proves nothing")
	}
	if len(ortBiases) != len(goBiases) {
		t.Fatalf("ONNX Runtime corrected %d biases, the built-in engine %d", len(ortBiases), len(goBiases))
	}
	for w, want := range goBiases {
		got := ortBiases[w]
		for c := range want {
			if d := math.Abs(float64(got[c] - want[c])); d > 1e-5*(1+math.Abs(float64(want[c]))) {
				t.Errorf("weight %q channel %d: bias %g with ONNX Runtime, %g with the built-in engine", w, c, got[c], want[c])
			}
		}
	}
}

//go:build ort

package passes

import (
	"context"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestORTControlFlow runs the models quantized inside If, Loop and Scan
// under every preset but mxfp4 in ONNX Runtime, unfused and fused, and
// applies TestORTOracle's checks:
// ORT's SQNR against the float model within 1 dB of the built-in engine's
// (unfused) and no more than 3 dB below it (fused). The If model runs on
// an input and its negation, one per branch.
func TestORTControlFlow(t *testing.T) {
	lib := ortLibrary(t)
	for _, c := range controlCases {
		for _, preset := range config.PresetNames() {
			if preset == "mxfp4" {
				continue // float4 has no ONNX Runtime kernel (TestORTOracle)
			}
			t.Run(c.name+"/"+preset, func(t *testing.T) {
				m := loadControl(t, c)
				u := quantizeControl(t, m, preset, signSource{m})
				controlAgreesInORT(t, lib, m, u.Result.Model, preset)
			})
		}
	}
}

// controlAgreesInORT applies TestORTOracle's checks to qm, the quantized
// m, on the first two batches of signSource (one per branch of the If).
func controlAgreesInORT(t *testing.T, lib *ort.Library, m, qm *onnxgraph.Model, preset string) {
	t.Helper()
	f32 := func(n string, x *tensor.Tensor) []float32 {
		if x == nil {
			t.Fatalf("output %q: missing", n)
		}
		f, err := x.AsFloat32()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, input := range []map[string]*tensor.Tensor{mustBatch(t, signSource{m}, 0), mustBatch(t, signSource{m}, 1)} {
		ref := enginetest.Run(t, m, input)
		goOut := enginetest.Run(t, qm, input)
		exact := runORT(t, lib, qm, input, ortOptions(preset, ort.OptimizeNone))
		fused := runORT(t, lib, qm, input, ortOptions(preset, ort.OptimizeAll))
		names := make([]string, 0, len(ref))
		for n := range ref {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			rf, gf, ef, ff := f32(n, ref[n]), f32(n, goOut[n]), f32(n, exact[n]), f32(n, fused[n])
			sGo, sExact, sFused := sqnr(rf, gf), sqnr(rf, ef), sqnr(rf, ff)
			t.Logf("%s: SQNR vs float: built-in %.1f dB, ORT unfused %.1f dB, ORT fused %.1f dB", n, sGo, sExact, sFused)
			if math.Abs(sExact-sGo) > 1 && min(sExact, sGo) < 40 {
				t.Errorf("output %q: SQNR against the float model %.1f dB in onnxruntime (unfused), %.1f dB in the built-in engine", n, sExact, sGo)
			}
			if preset != "fp8" && sFused < min(sGo-3, 40) { // fp8: no fused kernels (ortOptions)
				t.Errorf("output %q: onnxruntime's fused execution has SQNR %.1f dB against the float model, the built-in engine's %.1f dB", n, sFused, sGo)
			}
		}
	}
}

func mustBatch(t *testing.T, s calibrate.Source, i int) map[string]*tensor.Tensor {
	t.Helper()
	b, err := s.Batch(i, i+1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestORTCalibrateControlFlow: ONNX Runtime outputs only main-graph values,
// so calibrating through it cannot observe the values inside a subgraph;
// it says so, naming the value and the engine that can.
func TestORTCalibrateControlFlow(t *testing.T) {
	m := loadControl(t, controlCases[1])
	pc, err := config.PresetConfig("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	ortGo := func(ctx context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
		s, err := ort.Open(m, runtime.Options{Threads: 1})
		if err != nil {
			return nil, err
		}
		defer s.Close()
		st, err := calibrate.Calibrate(ctx, s, markConditional(m, ToObserve(plan)), signSource{m}, calibrate.Options{BatchSize: 1})
		if err != nil {
			return nil, err
		}
		return StatsOf(st), nil
	}
	u := &Unit{Model: m, Config: pc.Quant, Calibrate: ortGo}
	_, err = Run(context.Background(), u, RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "inside the subgraph") || !strings.Contains(err.Error(), "--engine go") {
		t.Fatalf("err = %v, want an error naming the subgraph value and --engine go", err)
	}
}

package passes

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// loadTestModel builds a catalog model in memory.
func loadTestModel(t *testing.T, name string) *onnxgraph.Model {
	t.Helper()
	b, ok := testmodels.Catalog[name]
	if !ok {
		t.Fatalf("no test model %q", name)
	}
	m, err := onnxgraph.LoadBytes(b().Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomInputs draws deterministic inputs in [-1, 1] for every graph
// input, symbolic dimensions set to 2.
func randomInputs(m *onnxgraph.Model, seed uint64) map[string]*tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 7))
	in := map[string]*tensor.Tensor{}
	for _, v := range m.Graph.Inputs {
		dims, _ := v.Shape()
		shape := make([]int, len(dims))
		for i, d := range dims {
			shape[i] = int(d.Size)
			if d.Size < 0 {
				shape[i] = 2
			}
		}
		data := make([]float32, tensor.NumElements(shape))
		for i := range data {
			data[i] = rng.Float32()*2 - 1
		}
		x := tensor.FromFloat32(data, shape...)
		if dt := v.DType(); dt == tensor.Float16 || dt == tensor.BFloat16 || dt == tensor.Double {
			// A half-precision model takes its inputs in its type.
			x, _ = tensor.Cast(x, dt)
		}
		in[v.Name] = x
	}
	return in
}

// observe runs the float model on a few batches and records the min/max of
// every planned activation: a minimal calibration for tests.
func observe(t *testing.T, m *onnxgraph.Model, plan *Plan) RangeStats {
	t.Helper()
	var inputs []map[string]*tensor.Tensor
	for seed := range uint64(4) {
		inputs = append(inputs, randomInputs(m, seed))
	}
	return observeOn(t, m, plan, inputs)
}

// observeOn is the min/max of every observed activation over the given
// batches of m's inputs.
func observeOn(t *testing.T, m *onnxgraph.Model, plan *Plan, inputs []map[string]*tensor.Tensor) RangeStats {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stats := RangeStats{}
	var names []string
	for _, tp := range plan.Observed() {
		names = append(names, tp.Value)
	}
	tap := func(name string, x *tensor.Tensor) {
		f, err := x.AsFloat32()
		if err != nil {
			return
		}
		r, ok := stats[name]
		for _, v := range f {
			if !ok {
				r, ok = Range{Min: v, Max: v}, true
			}
			r.Min, r.Max = min(r.Min, v), max(r.Max, v)
		}
		stats[name] = r
	}
	for _, in := range inputs {
		for _, v := range m.Graph.Inputs {
			if slicesContain(names, v.Name) {
				tap(v.Name, in[v.Name])
			}
		}
		if _, err := s.Run(context.Background(), in, runtime.RunOptions{Tap: tap, TapValues: names}); err != nil {
			t.Fatal(err)
		}
	}
	return stats
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// syntheticStats gives the i-th observed activation (by name) the range
// [-(1 + i/4), 2 + i/2]: goldens of the written structure must not depend
// on the engine's floating-point results.
func syntheticStats(_ context.Context, _ *onnxgraph.Model, plan *Plan) (Stats, error) {
	st := RangeStats{}
	for i, t := range plan.Observed() {
		st[t.Value] = Range{Min: -(1 + float32(i)/4), Max: 2 + float32(i)/2}
	}
	return st, nil
}

// quantize runs the whole pipeline with a preset, calibrating with the
// built-in engine (or with synthetic ranges).
func quantize(t *testing.T, m *onnxgraph.Model, preset string, opts PrepareOptions, synthetic ...bool) *Unit {
	t.Helper()
	pc, err := config.PresetConfig(preset)
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: m, Config: pc.Quant, Algorithms: pc.Algorithms, Prepare: opts,
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			return observe(t, m, plan), nil
		}}
	if len(synthetic) > 0 && synthetic[0] {
		u.Calibrate = syntheticStats
	}
	if pc.Algorithms.Any() {
		u.Data = &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: randomSource{m}, BatchSize: 1}
	}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatalf("%s: %v", preset, err)
	}
	return u
}

// randomSource is calibration data for the data-aware algorithms of a
// preset: two batches of randomInputs (seeds 0 and 1), one per sample.
type randomSource struct{ m *onnxgraph.Model }

func (s randomSource) Samples() int { return 2 }
func (s randomSource) Random() bool { return true }
func (s randomSource) Close() error { return nil }
func (s randomSource) Batch(start, _ int) (map[string]*tensor.Tensor, error) {
	return randomInputs(s.m, uint64(start)), nil
}

var goldenModels = []string{"mlp.onnx", "cnn.onnx", "dynamo.onnx", "attention.onnx", "convtranspose.onnx"}

// TestQuantizeGolden pins the plan and the written QDQ structure (nodes,
// attributes, initializer types, shapes and sha256) of each test model
// under each preset.
func TestQuantizeGolden(t *testing.T) {
	for _, model := range goldenModels {
		for _, preset := range config.PresetNames() {
			t.Run(strings.TrimSuffix(model, ".onnx")+"/"+preset, func(t *testing.T) {
				u := quantize(t, loadTestModel(t, model), preset, PrepareOptions{}, true)
				var b bytes.Buffer
				if err := u.Plan.Dump(&b); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "--- model\n")
				if err := finalize.DumpModel(&b, u.Result.Model); err != nil {
					t.Fatal(err)
				}
				for _, n := range u.Result.Notes {
					fmt.Fprintf(&b, "write note %s\n", n)
				}
				testutil.Golden(t, filepath.Join("testdata", "quantize", strings.TrimSuffix(model, ".onnx")+"."+preset+".txt"), b.Bytes())
			})
		}
	}
}

// TestQuantizeDeterministic checks that quantizing twice gives
// byte-identical models.
func TestQuantizeDeterministic(t *testing.T) {
	for _, preset := range []string{"w8a8", "w4", "mxfp4", "accurate"} {
		t.Run(preset, func(t *testing.T) {
			var outs [][]byte
			for range 2 {
				u := quantize(t, loadTestModel(t, "attention.onnx"), preset, PrepareOptions{})
				path := filepath.Join(t.TempDir(), "q.onnx")
				if err := u.Result.Model.Save(path, onnxgraph.SaveOptions{}); err != nil {
					t.Fatal(err)
				}
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(u.Result.Model.Proto)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, b)
			}
			if !bytes.Equal(outs[0], outs[1]) {
				t.Fatalf("two runs wrote different models (%d and %d bytes)", len(outs[0]), len(outs[1]))
			}
		})
	}
}

// sqnr is the signal-to-quantization-noise ratio of got against ref in dB.
func sqnr(ref, got []float32) float64 {
	var sig, noise float64
	for i := range ref {
		sig += float64(ref[i]) * float64(ref[i])
		d := float64(ref[i]) - float64(got[i])
		noise += d * d
	}
	if noise == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(sig/noise)
}

// TestQuantizedModelRuns runs each written model with the built-in engine
// and checks that its outputs agree with the float model's within the
// quantization error: a minimum SQNR per preset, and a maximum one too,
// which proves the quantized model is not running in float.
func TestQuantizedModelRuns(t *testing.T) {
	// Bounds are loose on purpose: they catch broken scales, axes or
	// packing (which give SQNR near or below 0 dB), not small changes.
	minSQNR := map[string]float64{"w8a8": 30, "accurate": 30, "ort-x86": 30, "w8": 35, "w4a8": 10, "w4": 10, "w4-accurate": 10, "fp8": 18, "mxfp4": 7}
	for _, model := range goldenModels {
		for _, preset := range config.PresetNames() {
			want, ok := minSQNR[preset]
			if !ok {
				t.Fatalf("no SQNR bound for preset %q", preset)
			}
			t.Run(strings.TrimSuffix(model, ".onnx")+"/"+preset, func(t *testing.T) {
				m := loadTestModel(t, model)
				u := quantize(t, m, preset, PrepareOptions{})
				ref := runModel(t, m, 0) // a calibration batch: no clipping
				got := runModel(t, u.Result.Model, 0)
				names := make([]string, 0, len(ref))
				for n := range ref {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					s := sqnr(ref[n], got[n])
					t.Logf("%s: SQNR %.1f dB", n, s)
					if s < want {
						t.Errorf("output %q: SQNR %.1f dB, want ≥ %g dB", n, s, want)
					}
					if len(u.Plan.Tensors) > 0 && math.IsInf(s, 1) {
						t.Errorf("output %q: identical to the float model although %d tensors are quantized", n, len(u.Plan.Tensors))
					}
				}
			})
		}
	}
}

func runModel(t *testing.T, m *onnxgraph.Model, seed uint64) map[string][]float32 {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), randomInputs(m, seed), runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][]float32{}
	for n, x := range out {
		f, err := x.AsFloat32()
		if err != nil {
			t.Fatal(err)
		}
		res[n] = f
	}
	return res
}

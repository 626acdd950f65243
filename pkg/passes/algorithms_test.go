package passes

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// sampleSource is calibration data held in memory: samples of x, [n, c, h, w].
type sampleSource struct {
	x     []float32
	shape []int // per sample
	n     int
	// half gives the samples as float16, for a float16 model.
	half bool
}

func newSampleSource(seed uint64, n int, shape ...int) *sampleSource {
	rng := rand.New(rand.NewPCG(seed, 3))
	per := tensor.NumElements(shape)
	x := make([]float32, n*per)
	for i := range x {
		// Shifted away from zero, so that weight errors do not average out.
		x[i] = float32(rng.NormFloat64()*0.5 + 0.8)
	}
	return &sampleSource{x: x, shape: shape, n: n}
}

func (s *sampleSource) Samples() int { return s.n }
func (s *sampleSource) Random() bool { return false }
func (s *sampleSource) Close() error { return nil }
func (s *sampleSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	per := tensor.NumElements(s.shape)
	x := tensor.FromFloat32(append([]float32(nil), s.x[start*per:end*per]...), append([]int{end - start}, s.shape...)...)
	if s.half {
		var err error
		if x, err = tensor.Cast(x, tensor.Float16); err != nil {
			return nil, err
		}
	}
	return map[string]*tensor.Tensor{"x": x}, nil
}

// scaledConv adds a Conv weight whose output channels have very different
// magnitudes (channel c scaled by 4^(c mod 4 − 2)), as BatchNorm folding
// leaves them, and a bias.
func scaledConv(b *testmodels.Builder, rng *rand.Rand, name string, out, in, k int) {
	w := make([]float32, out*in*k*k)
	per := in * k * k
	for i := range w {
		s := math.Pow(4, float64((i/per)%4-2))
		w[i] = float32(rng.NormFloat64() * s)
	}
	b.Init(name, []int64{int64(out), int64(in), int64(k), int64(k)}, w)
	bias := make([]float32, out)
	for i := range bias {
		bias[i] = float32(rng.NormFloat64() * 0.1)
	}
	b.Init(name+"_b", []int64{int64(out)}, bias)
}

// cleModel is Conv 3→8 → Relu → depthwise Conv 8 → Relu → Conv 1×1 8→4:
// a plain pair and a depthwise pair.
func cleModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	b := testmodels.New("cle", 17)
	b.Input("x", tensor.Float, "n", 3, 8, 8).Output("y", tensor.Float, "n", 4, 8, 8)
	scaledConv(b, rng, "w1", 8, 3, 3)
	scaledConv(b, rng, "w2", 8, 1, 3)
	scaledConv(b, rng, "w3", 4, 8, 1)
	pads := testmodels.AttrInts("pads", 1, 1, 1, 1)
	b.Node("Conv", "conv1", []string{"x", "w1", "w1_b"}, []string{"c1"}, pads)
	b.Node("Relu", "relu1", []string{"c1"}, []string{"r1"})
	b.Node("Conv", "dw", []string{"r1", "w2", "w2_b"}, []string{"c2"}, pads, testmodels.AttrInt("group", 8))
	b.Node("Relu", "relu2", []string{"c2"}, []string{"r2"})
	b.Node("Conv", "conv3", []string{"r2", "w3", "w3_b"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func runX(t *testing.T, m *onnxgraph.Model, src *sampleSource) []float32 {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, _ := src.Batch(0, src.n)
	out, err := s.Run(context.Background(), in, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := out["y"].AsFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sameOutput is sameFunction for the outputs y of runX.
func sameOutput(t *testing.T, algorithm string, ref, got []float32) {
	t.Helper()
	sameFunction(t, algorithm, map[string]*tensor.Tensor{"y": tensor.FromFloat32(ref, len(ref))},
		map[string]*tensor.Tensor{"y": tensor.FromFloat32(got, len(got))}, "y")
}

func algorithms(t *testing.T, text string) *config.Algorithms {
	t.Helper()
	cfg, err := config.Parse([]byte(text), "algorithms.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Algorithms
}

// TestCrossLayerEqualization checks that equalizing keeps the float
// function (within 1e-5 of the output's magnitude), that each equalized
// channel ends with the same weight range in both layers of its pair, and
// that every planned weight is reported.
func TestCrossLayerEqualization(t *testing.T) {
	m := cleModel(t)
	src := newSampleSource(1, 4, 3, 8, 8)
	ref := runX(t, m, src)
	u := quantizeWith(t, cleModel(t), "w8a8", algorithms(t, "algorithms:\n  cross_layer_equalization: {iterations: 50}\n"), nil)
	sameOutput(t, "equalization", ref, runX(t, u.Model, src))
	w := func(name string) []float32 {
		f, _, err := constFloats(u.Model, u.Model.Graph.Value(name))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	w1, w2, w3 := w("w1"), w("w2"), w("w3")
	for c := range 8 {
		r1 := absMax(w1[c*27 : (c+1)*27])
		r2 := absMax(w2[c*9 : (c+1)*9])
		var r3 float32
		for o := range 4 {
			r3 = max(r3, float32(math.Abs(float64(w3[o*8+c]))))
		}
		// The depthwise layer is in two pairs: after the sweeps converge
		// its range sits between both neighbours' (it is their geometric
		// mean when both pairs are balanced).
		if d := math.Abs(float64(r2*r2-r1*r3)) / float64(r2*r2); d > 1e-2 {
			t.Errorf("channel %d: ranges %g, %g, %g not balanced (r2² vs r1·r3 off by %.3g)", c, r1, r2, r3, d)
		}
	}
	reported := map[string]bool{}
	for _, l := range u.Layers {
		if l.Algorithm == crossLayerEqualizationName && l.Skipped == "" {
			reported[l.Node] = true
		}
	}
	for _, n := range []string{"conv1", "dw", "conv3"} {
		if !reported[n] {
			t.Errorf("node %s not reported (reports %+v)", n, u.Layers)
		}
	}
}

// TestCrossLayerEqualizationStopsAtRelu6 checks that a Clip with an
// upper bound ends a chain, with a note.
func TestCrossLayerEqualizationStopsAtRelu6(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := testmodels.New("cle6", 17)
	b.Input("x", tensor.Float, "n", 3, 8, 8).Output("y", tensor.Float, "n", 4, 8, 8)
	scaledConv(b, rng, "w1", 8, 3, 1)
	scaledConv(b, rng, "w2", 4, 8, 1)
	b.Init("lo", []int64{}, []float32{0}).Init("hi", []int64{}, []float32{6})
	b.Node("Conv", "conv1", []string{"x", "w1", "w1_b"}, []string{"c1"})
	b.Node("Clip", "relu6", []string{"c1", "lo", "hi"}, []string{"r1"})
	b.Node("Conv", "conv2", []string{"r1", "w2", "w2_b"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := constFloats(m, m.Graph.Value("w1"))
	u := quantizeWith(t, m, "w8", algorithms(t, "algorithms:\n  cross_layer_equalization: true\n"), nil)
	after, _, _ := constFloats(u.Model, u.Model.Graph.Value("w1"))
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("weight w1 changed across a Relu6")
		}
	}
	if len(u.Layers) != 1 || u.Layers[0].Node != "conv1" || u.Layers[0].Skipped == "" {
		t.Errorf("want one note on conv1, got %+v", u.Layers)
	}
}

// int4Weights quantizes only weights, to int4 per channel: coarse enough
// that the weight error has a clear mean.
const int4Weights = `quantization_config:
  global_config:
    op_input_spec: null
    op_output_spec: null
    op_state_spec:
      weight: {dtype: int4, qscheme: symmetric, granularity: {type: per_channel, axis: 0}}
`

// TestBiasCorrection checks, on calibration data, that after bias
// correction the quantized model's output has no mean error per channel
// (its mean over the data equals the float model's), that it had one
// before, and that the reported local SQNR does not go down.
func TestBiasCorrection(t *testing.T) {
	src := newSampleSource(2, 16, 3, 8, 8)
	cfg, err := config.Parse([]byte(int4Weights), "int4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	meanErr := func(alg *config.Algorithms) ([]float64, float64, *Unit) {
		m := singleConv(t)
		ref := runX(t, m, src)
		u := quantizeWith(t, m, "", alg, src, cfg.Quant)
		got := runX(t, u.Result.Model, src)
		per := len(ref) / src.n / 4
		mean := make([]float64, 4)
		var rms float64
		for i := range ref {
			c := (i / per) % 4
			mean[c] += float64(ref[i]) - float64(got[i])
			rms += float64(ref[i]) * float64(ref[i])
		}
		for c := range mean {
			mean[c] /= float64(len(ref) / 4)
		}
		return mean, math.Sqrt(rms / float64(len(ref))), u
	}
	before, _, _ := meanErr(nil)
	after, rms, u := meanErr(algorithms(t, "algorithms:\n  bias_correction: {samples: 16}\n"))
	var worstBefore float64
	for c := range after {
		worstBefore = max(worstBefore, math.Abs(before[c]))
		// 1e-4 of the output's magnitude is float32 rounding.
		if math.Abs(after[c]) > 1e-4*rms {
			t.Errorf("channel %d: mean error %g after correction (output rms %g)", c, after[c], rms)
		}
	}
	if worstBefore < 1e-3*rms {
		t.Fatalf("the uncorrected model has no mean error to remove (%g): the test proves nothing", worstBefore)
	}
	n := 0
	for _, l := range u.Layers {
		if l.Algorithm != biasCorrectionName || l.Skipped != "" {
			continue
		}
		n++
		if l.After < l.Before {
			t.Errorf("%s: local SQNR went from %v to %v dB", l.Node, l.Before, l.After)
		}
	}
	if n != 1 {
		t.Errorf("%d layers reported, want 1: %+v", n, u.Layers)
	}
}

// singleConv is x → Conv 3→4 (3×3) → y.
func singleConv(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	b := testmodels.New("conv", 17)
	b.Input("x", tensor.Float, "n", 3, 8, 8).Output("y", tensor.Float, "n", 4, 8, 8)
	scaledConv(b, rng, "w", 4, 3, 3)
	b.Node("Conv", "conv", []string{"x", "w", "w_b"}, []string{"y"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// quantizeWith runs the pipeline with a preset (or the given quantization
// config) and algorithms, calibrating on src (or on random data).
func quantizeWith(t *testing.T, m *onnxgraph.Model, preset string, alg *config.Algorithms, src *sampleSource, quant ...*config.QuantizerConfig) *Unit {
	t.Helper()
	var cfg *config.QuantizerConfig
	if len(quant) > 0 {
		cfg = quant[0]
	} else {
		var err error
		if cfg, err = config.Preset(preset); err != nil {
			t.Fatal(err)
		}
	}
	u := &Unit{Model: m, Config: cfg, Algorithms: alg,
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			return observe(t, m, plan), nil
		}}
	if src != nil {
		u.Data = &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: src, BatchSize: 4}
	}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestAlgorithmsDeterministic checks that equalization (through Relu, and
// through gated activations with the Muls it inserts) and bias correction
// write byte-identical models across runs and engine thread counts.
func TestAlgorithmsDeterministic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model func(*testing.T) *onnxgraph.Model
		cle   string
	}{
		{"relu", cleModel, "true"},
		{"gated", gatedModel, "{gated_min_gain: 0.5}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  cross_layer_equalization: "+tc.cle+"\n  bias_correction: true\n"), "int4.yaml")
			if err != nil {
				t.Fatal(err)
			}
			sameModelAcrossThreads(t, func(threads int) *Unit {
				u := &Unit{Model: tc.model(t), Config: cfg.Quant, Algorithms: cfg.Algorithms,
					Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
						return observe(t, m, plan), nil
					},
					Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: newSampleSource(4, 12, 3, 8, 8), BatchSize: 5}}
				if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
					t.Fatal(err)
				}
				return u
			})
		})
	}
}

// TestAlgorithmsSkipFigures checks that equalization and bias correction
// write the same bytes without the report's figures, and report no
// figures then.
func TestAlgorithmsSkipFigures(t *testing.T) {
	cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  cross_layer_equalization: true\n  bias_correction: true\n"), "int4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var models [][]byte
	for _, skip := range []bool{false, true} {
		u := &Unit{Model: cleModel(t), Config: cfg.Quant, Algorithms: cfg.Algorithms, SkipFigures: skip,
			Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
				return observe(t, m, plan), nil
			},
			Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: newSampleSource(4, 12, 3, 8, 8), BatchSize: 5}}
		if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(u.Result.Model.Proto)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, b)
		figures := 0
		for _, l := range u.Layers {
			if l.Skipped == "" {
				figures++
			}
		}
		if skip && figures > 0 || !skip && figures == 0 {
			t.Fatalf("skip figures %v: %d layers with figures (%+v)", skip, figures, u.Layers)
		}
	}
	if !bytes.Equal(models[0], models[1]) {
		t.Fatal("the model differs with and without the figures")
	}
}

// sameModelAcrossThreads fails unless quantize writes byte-identical
// models at 1, 3 and again 1 engine threads.
func sameModelAcrossThreads(t *testing.T, quantize func(threads int) *Unit) {
	t.Helper()
	var outs [][]byte
	// 0 is the default, one thread per CPU.
	for _, threads := range []int{1, 3, 0, 1} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(quantize(threads).Result.Model.Proto)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
	}
	for i := 1; i < len(outs); i++ {
		if !bytes.Equal(outs[0], outs[i]) {
			t.Fatalf("run %d wrote a different model (%d and %d bytes)", i, len(outs[0]), len(outs[i]))
		}
	}
}

// TestAlgorithmsOnLeanLoadedModel runs every weight-changing algorithm on
// a model file large enough to be loaded lean (its weight left in the
// file until decoded): an algorithm that rebuilt the model without the
// loader's store could not read the weight back.
func TestAlgorithmsOnLeanLoadedModel(t *testing.T) {
	const k, n = 64, 65 << 10 // a 17 MB weight
	rng := rand.New(rand.NewPCG(9, 1))
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.1)
	}
	b := testmodels.New("lean", 17)
	b.Input("x", tensor.Float, "n", k).Output("y", tensor.Float, "n", n)
	b.Init("w", []int64{k, n}, w)
	b.Node("MatMul", "mm", []string{"x", "w"}, []string{"y"})
	path := filepath.Join(t.TempDir(), "lean.onnx")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, alg := range []string{"gptq: true", "adaround: {iterations: 2}", "bias_correction: true"} {
		t.Run(alg, func(t *testing.T) {
			m, err := onnxgraph.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if !m.InStore(m.Graph.Value("w").Const) {
				t.Fatal("the weight was not left in the model file: the test no longer covers lean loading")
			}
			cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  "+alg+"\n"), "int4.yaml")
			if err != nil {
				t.Fatal(err)
			}
			u := &Unit{Model: m, Config: cfg.Quant, Algorithms: cfg.Algorithms,
				Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
					return observe(t, m, plan), nil
				},
				Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: newSampleSource(4, 8, k), BatchSize: 4}}
			if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBiasCorrectionKeepsBiasShape: a Gemm bias written as [1, N] (as old
// exporters write it) is corrected in place and keeps its shape, which
// ONNX Runtime checks against the graph's declared inputs; a bias with a
// value per row is not one value per output channel and is left alone.
func TestBiasCorrectionKeepsBiasShape(t *testing.T) {
	const k, n = 8, 6
	rng := rand.New(rand.NewPCG(3, 4))
	randn := func(size int) []float32 {
		v := make([]float32, size)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, c := range []struct {
		name      string
		biasShape []int64
		corrected bool
	}{
		{"row", []int64{1, n}, true},
		{"per-row", []int64{4, n}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := testmodels.New("gemm", 13)
			b.Input("x", tensor.Float, 4, k).Output("y", tensor.Float, 4, n)
			b.Init("w", []int64{k, n}, randn(k*n))
			b.Init("c", c.biasShape, randn(int(c.biasShape[0]*c.biasShape[1])))
			b.Node("Gemm", "fc", []string{"x", "w", "c"}, []string{"y"})
			m, err := onnxgraph.LoadBytes(b.Bytes(), "")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  bias_correction: true\n"), "int4.yaml")
			if err != nil {
				t.Fatal(err)
			}
			u := &Unit{Model: m, Config: cfg.Quant, Algorithms: cfg.Algorithms,
				Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
					return observe(t, m, plan), nil
				},
				Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: newSampleSource(6, 16, k), BatchSize: 4}}
			if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
				t.Fatal(err)
			}
			var report *LayerReport
			for i, l := range u.Layers {
				if l.Algorithm == biasCorrectionName && l.Node == "fc" {
					report = &u.Layers[i]
				}
			}
			if report == nil {
				t.Fatal("no bias correction report for fc")
			}
			if corrected := report.Skipped == ""; corrected != c.corrected {
				t.Fatalf("corrected = %v (%+v), want %v", corrected, *report, c.corrected)
			}
			bias := u.Model.Graph.Value("c").Const
			if got := bias.GetDims(); len(got) != 2 || got[0] != c.biasShape[0] || got[1] != c.biasShape[1] {
				t.Errorf("bias dims %v, want %v", got, c.biasShape)
			}
		})
	}
}

// normalDraws returns a function that draws n values from rng's normal
// distribution times s, for the test models' weights.
func normalDraws(rng *rand.Rand) func(n int, s float64) []float32 {
	return func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
}

// sameFunction fails the test for each named output of want and got (runs
// of two models on the same data) that differs by more than 1e-5 of its
// largest magnitude: an algorithm that keeps the float function changed it.
func sameFunction(t *testing.T, algorithm string, want, got map[string]*tensor.Tensor, names ...string) {
	t.Helper()
	for _, name := range names {
		w, _ := want[name].AsFloat32()
		g, _ := got[name].AsFloat32()
		var scale, diff float64
		for i := range w {
			scale = max(scale, math.Abs(float64(w[i])))
			diff = max(diff, math.Abs(float64(w[i])-float64(g[i])))
		}
		if diff > 1e-5*scale {
			t.Errorf("%s: %s changed the float output by %g (magnitude %g)", name, algorithm, diff, scale)
		}
	}
}

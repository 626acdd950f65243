package passes

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"google.golang.org/protobuf/proto"
)

// smoothFeatures is the width of the smoothing test model.
const smoothFeatures = 16

// smoothModel is x [n, 16] → LayerNormalization (γ with two outlier
// features) → {MatMul 16→8, Gemm transB 16→8} → Add → Relu → y1, and a
// written-out LayerNorm tail x·γ₂ + β₂ → MatMul 16→4 → y2, and the Add's
// output → MatMul 8→4 → y3, an activation the Relu reads too.
func smoothModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(51, 52))
	normal := normalDraws(rng)
	k := smoothFeatures
	gamma := normal(k, 0.5)
	gamma[3], gamma[11] = 20, -30 // outlier features, as LayerNorm scales leave them in transformers
	b := testmodels.New("smooth", 17)
	b.Input("x", tensor.Float, "n", k).Output("y1", tensor.Float, "n", 8).Output("y2", tensor.Float, "n", 4).Output("y3", tensor.Float, "n", 4)
	b.Init("gamma", []int64{int64(k)}, gamma)
	b.Init("beta", []int64{int64(k)}, normal(k, 0.1))
	b.Init("wa", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("wb", []int64{8, int64(k)}, normal(k*8, 0.3))
	b.Init("wb_bias", []int64{8}, normal(8, 0.1))
	g2 := normal(k, 1)
	g2[5] = 15
	b.Init("gamma2", []int64{int64(k)}, g2)
	b.Init("beta2", []int64{int64(k)}, normal(k, 0.1))
	b.Init("wc", []int64{int64(k), 4}, normal(k*4, 0.3))
	b.Init("wd", []int64{8, 4}, normal(8*4, 0.3))
	b.Node("LayerNormalization", "ln", []string{"x", "gamma", "beta"}, []string{"h"})
	b.Node("MatMul", "fa", []string{"h", "wa"}, []string{"a"})
	b.Node("Gemm", "fb", []string{"h", "wb", "wb_bias"}, []string{"bb"}, testmodels.AttrInt("transB", 1))
	b.Node("Add", "sum", []string{"a", "bb"}, []string{"s"})
	b.Node("Relu", "relu", []string{"s"}, []string{"y1"})
	b.Node("Mul", "scale2", []string{"x", "gamma2"}, []string{"m2"})
	b.Node("Add", "shift2", []string{"m2", "beta2"}, []string{"h2"})
	b.Node("MatMul", "fc", []string{"h2", "wc"}, []string{"y2"})
	b.Node("MatMul", "fd", []string{"s", "wd"}, []string{"y3"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const smoothConfig = `quantization_config:
  global_config:
    op_input_spec: {"*": {dtype: int8, qscheme: symmetric, granularity: {type: per_tensor}, qparam_calculator: global_minmax}}
    op_output_spec: null
    op_state_spec: {weight: {dtype: int8, qscheme: symmetric, granularity: {type: per_channel}}}
`

func quantizeSmooth(t *testing.T, alg string, threads int) *Unit {
	t.Helper()
	return quantizeSmoothFigures(t, alg, threads, true)
}

// quantizeSmoothFigures is quantizeSmooth, computing the report's
// figures or not.
func quantizeSmoothFigures(t *testing.T, alg string, threads int, figures bool) *Unit {
	t.Helper()
	cfg, err := config.Parse([]byte(smoothConfig+alg), "smooth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: smoothModel(t), Config: cfg.Quant, Algorithms: cfg.Algorithms,
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			return observe(t, m, plan), nil
		},
		Data:        &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: newSampleSource(61, 40, smoothFeatures), BatchSize: 8},
		SkipFigures: !figures}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestSmoothQuant checks on the model above (fixed seeds) that smoothing
// keeps the float function (within 1e-5 of each output's magnitude), that
// with α = 0.5 every smoothed feature ends with the same range in the
// activation (measured here on the calibration data) as in the weights
// reading it, that the quantized products of the smoothed layers gain in
// the report, and that the activation the graph output also reads is
// reported as skipped.
func TestSmoothQuant(t *testing.T) {
	u := quantizeSmooth(t, "algorithms:\n  smoothquant: {alpha: 0.5}\n", 1)
	src := newSampleSource(61, 40, smoothFeatures)
	want := runValues(t, smoothModel(t), src, "y1", "y2", "y3", "h", "h2")
	got := runValues(t, u.Model, src, "y1", "y2", "y3", "h", "h2")
	sameFunction(t, "smoothing", want, got, "y1", "y2", "y3")
	for _, site := range []struct {
		x       string
		weights []string
		rowAxis []int // the axis of a weight that indexes input features
	}{{"h", []string{"wa", "wb"}, []int{0, 1}}, {"h2", []string{"wc"}, []int{0}}} {
		x, _ := got[site.x].AsFloat32()
		for j := range smoothFeatures {
			var xMax, wMax float64
			for r := range len(x) / smoothFeatures {
				xMax = max(xMax, math.Abs(float64(x[r*smoothFeatures+j])))
			}
			for i, name := range site.weights {
				w, shape, err := constFloats(u.Model, u.Model.Graph.Value(name))
				if err != nil {
					t.Fatal(err)
				}
				for idx, v := range w {
					if (site.rowAxis[i] == 0 && idx/shape[1] == j) || (site.rowAxis[i] == 1 && idx%shape[1] == j) {
						wMax = max(wMax, math.Abs(float64(v)))
					}
				}
			}
			if math.Abs(xMax-wMax) > 1e-4*max(xMax, wMax) {
				t.Errorf("%s feature %d: activation range %g, weight range %g; α = 0.5 equalizes them", site.x, j, xMax, wMax)
			}
		}
	}
	reported := map[string]LayerReport{}
	for _, l := range u.Layers {
		if l.Algorithm == smoothQuantName {
			reported[l.Node] = l
		}
	}
	for _, n := range []string{"fa", "fb", "fc"} {
		r := reported[n]
		if r.Skipped != "" || !(r.After > r.Before) {
			t.Errorf("%s: report %+v, want a quantized product that gained", n, r)
		}
		t.Logf("%s: %.2f → %.2f dB (%s)", n, float64(r.Before), float64(r.After), r.Note)
	}
	if r := reported["fd"]; !strings.Contains(r.Skipped, "also read by") {
		t.Errorf("fd: report %+v, want skipped: the Relu reads its input too", r)
	}
}

// TestSkipFigures checks that leaving out the report's figures changes
// nothing in the model and computes none: SmoothQuant's layers are not
// reported, the skipped one still is.
func TestSkipFigures(t *testing.T) {
	alg := "algorithms:\n  smoothquant: {alpha: 0.5}\n"
	with, without := quantizeSmoothFigures(t, alg, 1, true), quantizeSmoothFigures(t, alg, 1, false)
	a, err := proto.MarshalOptions{Deterministic: true}.Marshal(with.Result.Model.Proto)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(without.Result.Model.Proto)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the model differs with and without the figures")
	}
	var figures, skipped int
	for _, l := range without.Layers {
		switch {
		case l.Skipped != "":
			skipped++
		case l.Algorithm == smoothQuantName:
			figures++
		}
	}
	if figures != 0 || skipped != 1 {
		t.Fatalf("without figures: %d smoothed layers reported, %d skipped; want 0 and 1 (%+v)", figures, skipped, without.Layers)
	}
	if len(with.Layers) != 4 {
		t.Fatalf("with figures: %d layers reported, want 4 (%+v)", len(with.Layers), with.Layers)
	}
}

// TestSmoothQuantDeterministic checks byte-identical models across runs
// and thread counts.
func TestSmoothQuantDeterministic(t *testing.T) {
	sameModelAcrossThreads(t, func(threads int) *Unit {
		return quantizeSmooth(t, "algorithms:\n  smoothquant: true\n", threads)
	})
}

// rmsSmoothModel is x [n, 16] → RMSNormalization (opset 23, scale with
// two outlier features) → MatMul → y1, and x → RMSNorm written out as
// decoders' exports write it (Pow, ReduceMean, Add, Sqrt, Reciprocal,
// Mul, then the weight's Mul from the left, an outlier feature in it) →
// Gemm → y2.
func rmsSmoothModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(53, 54))
	normal := normalDraws(rng)
	k := smoothFeatures
	scale := normal(k, 0.5)
	scale[2], scale[9] = 25, -18
	weight := normal(k, 1)
	weight[6] = 30
	b := testmodels.New("rms_smooth", 23)
	b.Input("x", tensor.Float, "n", k).Output("y1", tensor.Float, "n", 8).Output("y2", tensor.Float, "n", 8)
	b.Init("scale", []int64{int64(k)}, scale)
	b.Init("weight", []int64{int64(k)}, weight)
	b.Init("two", []int64{}, []float32{2})
	b.Init("eps", []int64{}, []float32{1e-6})
	b.InitInt64("axes", []int64{1}, []int64{-1})
	b.Init("w1", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("w2", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("b2", []int64{8}, normal(8, 0.1))
	b.Node("RMSNormalization", "rms", []string{"x", "scale"}, []string{"h1"})
	b.Node("MatMul", "f1", []string{"h1", "w1"}, []string{"y1"})
	b.Node("Pow", "sq", []string{"x", "two"}, []string{"x2"})
	b.Node("ReduceMean", "ms", []string{"x2", "axes"}, []string{"m"})
	b.Node("Add", "add_eps", []string{"m", "eps"}, []string{"me"})
	b.Node("Sqrt", "root", []string{"me"}, []string{"r"})
	b.Node("Reciprocal", "inv", []string{"r"}, []string{"ir"})
	b.Node("Mul", "norm", []string{"x", "ir"}, []string{"nx"})
	b.Node("Mul", "gain", []string{"weight", "nx"}, []string{"h2"})
	b.Node("Gemm", "f2", []string{"h2", "w2", "b2"}, []string{"y2"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSmoothQuantRMSNorm checks that SmoothQuant folds its scales into an
// RMSNormalization's scale and into the weight that ends a written-out
// RMSNorm (fixed seeds): the float function is kept (within 1e-5 of each
// output's magnitude), the norms' constants changed, and both layers'
// quantized products gain in the report.
func TestSmoothQuantRMSNorm(t *testing.T) {
	cfg, err := config.Parse([]byte(smoothConfig+"algorithms:\n  smoothquant: true\n"), "smooth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := newSampleSource(63, 40, smoothFeatures)
	u := quantizeWith(t, rmsSmoothModel(t), "", cfg.Algorithms, src, cfg.Quant)
	want := runValues(t, rmsSmoothModel(t), src, "y1", "y2")
	got := runValues(t, u.Model, src, "y1", "y2")
	sameFunction(t, "smoothing", want, got, "y1", "y2")
	orig := rmsSmoothModel(t)
	for _, c := range []string{"scale", "weight"} {
		before, _, _ := constFloats(orig, orig.Graph.Value(c))
		after, _, _ := constFloats(u.Model, u.Model.Graph.Value(c))
		if slices.Equal(before, after) {
			t.Errorf("%s: unchanged, want the smoothing scales folded in", c)
		}
	}
	reported := map[string]LayerReport{}
	for _, l := range u.Layers {
		if l.Algorithm == smoothQuantName {
			reported[l.Node] = l
		}
	}
	for _, n := range []string{"f1", "f2"} {
		r := reported[n]
		if r.Skipped != "" || !(r.After > r.Before) {
			t.Errorf("%s: report %+v, want a quantized product that gained", n, r)
		}
		t.Logf("%s: %.2f → %.2f dB (%s)", n, float64(r.Before), float64(r.After), r.Note)
	}
}

// TestSmoothQuantFloat16: SmoothQuant smooths the float16 version of
// smoothModel (fixed seeds) as it does the float32 one: the same layers
// gain, the constants stay float16 and the float function is kept within
// float16's rounding (float16Rounding of each output's magnitude).
func TestSmoothQuantFloat16(t *testing.T) {
	cfg, err := config.Parse([]byte(smoothConfig+"algorithms:\n  smoothquant: {alpha: 0.5}\n"), "smooth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := newSampleSource(61, 40, smoothFeatures)
	src.half = true
	m := toFloat16(t, smoothModel(t))
	want := runValues(t, m, src, "y1", "y2", "y3")
	u := quantizeWith(t, toFloat16(t, smoothModel(t)), "", cfg.Algorithms, src, cfg.Quant)
	got := runValues(t, u.Model, src, "y1", "y2", "y3")
	for _, name := range []string{"y1", "y2", "y3"} {
		w, _ := want[name].AsFloat32()
		g, _ := got[name].AsFloat32()
		sameFloat16Function(t, name, w, g)
	}
	gained := 0
	for _, l := range u.Layers {
		if l.Algorithm == smoothQuantName && (l.Node == "fa" || l.Node == "fb" || l.Node == "fc") {
			if l.Skipped != "" || !(l.After > l.Before) {
				t.Errorf("%s: report %+v, want a quantized product that gained", l.Node, l)
				continue
			}
			gained++
		}
	}
	if gained != 3 {
		t.Errorf("%d of fa, fb and fc smoothed, want 3", gained)
	}
	allFloat16(t, u.Model)
}

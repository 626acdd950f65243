package passes

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// awqFeatures is the width of the AWQ test model.
const awqFeatures = 32

// awqLayer is a layer of awqModel: the node, the activation it reads and
// its output.
type awqTestLayer struct{ node, x, y string }

// awqLayers are awqModel's layers with a quantized weight, by producer of
// their input: a LayerNorm (two readers and a Shape), a MatMul + bias, a
// Mul by a constant, a Gemm with transB and a bias, and a Relu (which
// cannot absorb a scale).
var awqLayers = []awqTestLayer{
	{"fa", "h", "ya"}, {"fb", "h", "yb"},
	{"f2", "h1", "y2"}, {"f3", "h3", "y3"}, {"f5", "h5", "y5"}, {"f4", "r", "y4"},
}

// awqModel is x [n, 32] feeding each kind of producer AWQ folds into,
// each with a few features far larger than the rest (as LayerNorm scales
// and linear layers leave them in transformers), read by MatMul and Gemm
// layers.
func awqModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(71, 72))
	normal := normalDraws(rng)
	k := awqFeatures
	outliers := func(v []float32, stride int) []float32 {
		for i := range v {
			if f := (i / stride) % k; f%7 == 3 {
				v[i] *= 12
			}
		}
		return v
	}
	b := testmodels.New("awq", 17)
	b.Input("x", tensor.Float, "n", k)
	for _, l := range awqLayers {
		b.Output(l.y, tensor.Float, "n", 8)
	}
	b.Output("hs", tensor.Int64, 2)
	b.Init("gamma", []int64{int64(k)}, outliers(normal(k, 1), 1))
	b.Init("beta", []int64{int64(k)}, normal(k, 0.1))
	b.Init("wa", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("wb", []int64{8, int64(k)}, normal(k*8, 0.3))
	b.Init("wb_bias", []int64{8}, normal(8, 0.1))
	b.Init("w1", []int64{int64(k), int64(k)}, outliers(normal(k*k, 0.3), 1))
	b.Init("b1", []int64{int64(k)}, normal(k, 0.1))
	b.Init("w2", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("c3", []int64{int64(k)}, outliers(normal(k, 1), 1))
	b.Init("w3", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("wg", []int64{int64(k), int64(k)}, outliers(normal(k*k, 0.3), k))
	b.Init("cg", []int64{int64(k)}, normal(k, 0.1))
	b.Init("w5", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Init("w4", []int64{int64(k), 8}, normal(k*8, 0.3))
	b.Node("LayerNormalization", "ln", []string{"x", "gamma", "beta"}, []string{"h"})
	b.Node("MatMul", "fa", []string{"h", "wa"}, []string{"ya"})
	b.Node("Gemm", "fb", []string{"h", "wb", "wb_bias"}, []string{"yb"}, testmodels.AttrInt("transB", 1))
	b.Node("Shape", "shape", []string{"h"}, []string{"hs"})
	b.Node("MatMul", "f1", []string{"x", "w1"}, []string{"m1"})
	b.Node("Add", "bias1", []string{"m1", "b1"}, []string{"h1"})
	b.Node("MatMul", "f2", []string{"h1", "w2"}, []string{"y2"})
	b.Node("Mul", "scale3", []string{"x", "c3"}, []string{"h3"})
	b.Node("MatMul", "f3", []string{"h3", "w3"}, []string{"y3"})
	b.Node("Gemm", "fg", []string{"x", "wg", "cg"}, []string{"h5"}, testmodels.AttrInt("transB", 1))
	b.Node("MatMul", "f5", []string{"h5", "w5"}, []string{"y5"})
	b.Node("Relu", "relu", []string{"x"}, []string{"r"})
	b.Node("MatMul", "f4", []string{"r", "w4"}, []string{"y4"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// awqConfig is int4 weight-only with blocks of 16 input features, the
// LayerNorm's scale and bias left in float.
const awqConfig = awqQuantizedLayerNorm + "    op_type_config: {LayerNormalization: null}\n"

// awqQuantizedLayerNorm quantizes the LayerNorm's scale in blocks too.
const awqQuantizedLayerNorm = `quantization_config:
  global_config:
    op_input_spec: null
    op_output_spec: null
    op_state_spec: {weight: {dtype: int4, qscheme: symmetric, granularity: {type: per_block, block_size: 16}, qparam_calculator: static}}
`

func quantizeAWQ(t *testing.T, quant, alg string, threads int) *Unit {
	t.Helper()
	cfg, err := config.Parse([]byte(quant+alg), "awq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: awqModel(t), Config: cfg.Quant, Algorithms: cfg.Algorithms,
		Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: newSampleSource(81, 48, awqFeatures), BatchSize: 8}}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

// awqLayerError is ‖Y − X·Ŵ‖² and ‖Y‖² for layer l of u's model, run by
// the engine on its input X in u's float model, Ŵ the weight u's plan
// quantizes and Y the layer's output in the original float model.
func awqLayerError(t *testing.T, u *Unit, l awqTestLayer, want map[string]*tensor.Tensor) (float64, float64) {
	t.Helper()
	n := u.Model.Graph.Node(l.node)
	w, shape, err := constFloats(u.Model, n.Inputs[1])
	if err != nil {
		t.Fatal(err)
	}
	tp := u.Plan.Tensor(n.Inputs[1].Name)
	q, err := finalize.FakeQuantize(w, shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
	if err != nil {
		t.Fatal(err)
	}
	x := runValues(t, u.Model, newSampleSource(81, 48, awqFeatures), l.x)[l.x]
	return layerSquaredError(t, u.Model, n, x, q, want[l.y])
}

// TestAWQ checks on the model above (fixed seeds, int4 blocks of 16) that
// the scaled model computes the original float function (within 1e-5 of
// each output's magnitude), that each site's output error on the
// calibration data, computed by the engine from the written weights, is
// never above round-to-nearest's and drops where features have outliers,
// that the report's gains are those of these errors, and that the Relu's reader
// is reported as skipped.
func TestAWQ(t *testing.T) {
	u := quantizeAWQ(t, awqConfig, "algorithms:\n  awq: true\n", 1)
	rtn := quantizeAWQ(t, awqConfig, "", 1)
	src := newSampleSource(81, 48, awqFeatures)
	var ys []string
	for _, l := range awqLayers {
		ys = append(ys, l.y)
	}
	want := runValues(t, awqModel(t), src, ys...)
	got := runValues(t, u.Model, src, ys...)
	sameFunction(t, "AWQ", want, got, ys...)
	reported := map[string]LayerReport{}
	for _, r := range u.Layers {
		if r.Algorithm == awqAlgorithmName {
			reported[r.Node] = r
		}
	}
	type sums struct{ awq, rtn float64 }
	bySite := map[string]*sums{}
	for _, l := range awqLayers[:5] {
		eAWQ, signal := awqLayerError(t, u, l, want)
		eRTN, _ := awqLayerError(t, rtn, l, want)
		if bySite[l.x] == nil {
			bySite[l.x] = &sums{}
		}
		bySite[l.x].awq += eAWQ
		bySite[l.x].rtn += eRTN
		r := reported[l.node]
		if r.Skipped != "" {
			t.Errorf("%s: skipped (%s)", l.node, r.Skipped)
			continue
		}
		// The report's signal is X·W without a Gemm's bias; the gain
		// does not depend on it.
		before, after := float64(sqnrDB(signal, eRTN)), float64(sqnrDB(signal, eAWQ))
		if gain := float64(r.After - r.Before); math.Abs(gain-(after-before)) > 0.01 {
			t.Errorf("%s: report gains %.3f dB (%.2f → %.2f), the engine measures %.3f", l.node, gain, float64(r.Before), float64(r.After), after-before)
		}
		t.Logf("%s: %.2f → %.2f dB (%s)", l.node, before, after, r.Note)
	}
	for x, s := range bySite {
		if s.awq > s.rtn*(1+1e-9) {
			t.Errorf("site %q: AWQ's error %g is above round-to-nearest's %g", x, s.awq, s.rtn)
		}
		if !(s.awq < 0.95*s.rtn) {
			t.Errorf("site %q: AWQ's error %g does not drop below round-to-nearest's %g by 5%%", x, s.awq, s.rtn)
		}
	}
	if r := reported["f4"]; !strings.Contains(r.Skipped, "Relu") {
		t.Errorf("f4: report %+v, want skipped: a Relu cannot absorb the scale", r)
	}
}

// TestAWQQuantizedProducer checks that a site whose producer's constant
// is quantized across features (the LayerNorm's scale in blocks of 16) is
// skipped with the reason, and the LayerNorm left as it was.
func TestAWQQuantizedProducer(t *testing.T) {
	u := quantizeAWQ(t, awqQuantizedLayerNorm, "algorithms:\n  awq: true\n", 1)
	for _, r := range u.Layers {
		if (r.Node == "fa" || r.Node == "fb") && !strings.Contains(r.Skipped, `"gamma", which would absorb 1/s, is quantized`) {
			t.Errorf("%s: report %+v, want skipped: the LayerNorm's scale is quantized in blocks", r.Node, r)
		}
	}
	got, _, err := constFloats(u.Model, u.Model.Graph.Value("gamma"))
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := constFloats(awqModel(t), awqModel(t).Graph.Value("gamma"))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("gamma[%d] = %g, want %g unchanged", i, got[i], want[i])
		}
	}
}

// TestAWQDeterministic checks byte-identical models across runs and
// thread counts.
func TestAWQDeterministic(t *testing.T) {
	sameModelAcrossThreads(t, func(threads int) *Unit {
		return quantizeAWQ(t, awqConfig, "algorithms:\n  awq: true\n", threads)
	})
}

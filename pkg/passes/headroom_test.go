package passes

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/runtime"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// classifierHead is a classifier's end as caffe exports write it: Conv →
// Relu → GlobalAveragePool → Flatten → Softmax, with a side output of the
// Conv's input so that the image features are quantized too.
func classifierHead(t *testing.T) *onnxgraph.Model { return classifierHeadOf(t, 4) }

// classifierHeadOf is classifierHead on side×side feature maps.
func classifierHeadOf(t *testing.T, side int) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("head", 17)
	b.Input("x", tensor.Float, 1, 2, side, side).Output("probs", tensor.Float, 1, 3)
	b.Init("w", []int64{3, 2, 1, 1}, []float32{1, 0, 0, 1, 1, 1})
	b.Init("bias", []int64{3}, []float32{0, 0, 0})
	b.Node("Conv", "conv", []string{"x", "w", "bias"}, []string{"c"})
	b.Node("Relu", "relu", []string{"c"}, []string{"r"})
	b.Node("GlobalAveragePool", "gap", []string{"r"}, []string{"g"})
	b.Node("Flatten", "flat", []string{"g"}, []string{"logits"})
	b.Node("Softmax", "softmax", []string{"logits"}, []string{"probs"}, testmodels.AttrInt("axis", -1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHeadroomMarksTheValuesBehindSoftmax pins which values get headroom:
// the Softmax's input and, back through Flatten (data movement) and the
// pool, the Relu output the pool averages; not the Conv's input, whose
// maximum does not decide the Softmax; none with the rule off.
func TestHeadroomMarksTheValuesBehindSoftmax(t *testing.T) {
	m := classifierHead(t)
	for _, preset := range []string{"w8a8", "ort-x86"} {
		for _, off := range []bool{false, true} {
			plan := preparePreset(t, m, preset, PrepareOptions{NoHeadroom: off})
			want := map[string]bool{"x": false, "r": !off, "g": !off, "probs": false}
			for v, w := range want {
				tp := plan.Tensor(v)
				if tp == nil {
					t.Fatalf("%s: %q is not quantized", preset, v)
				}
				if got := plan.Root(tp).Headroom; got != w {
					t.Errorf("%s, NoHeadroom=%v: %q (root %q) headroom %v, want %v", preset, off, v, plan.Root(tp).Value, got, w)
				}
			}
			if lt := plan.Tensor("logits"); lt == nil || plan.Root(lt).Value != "g" {
				t.Errorf("%s: Flatten's output should share the pool output's qparams, got %+v", preset, lt)
			}
		}
	}
}

// TestClassifierInputKeepsItsMax: the features the classifier's Conv reads
// (here the model's input) keep their calibrated maximum under a
// percentile calculator, where two rare values eight times the rest would
// be clipped away; the rule off, they are; the values after the
// Conv, and a config whose calculator is a min/max one, are as before.
func TestClassifierInputKeepsItsMax(t *testing.T) {
	const side, samples = 64, 64
	m := classifierHeadOf(t, side)
	per := 2 * side * side
	x := make([]float32, samples*per)
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range x {
		x[i] = rng.Float32()
	}
	for _, i := range []int{5, 63*per + 1000} {
		x[i] = 8 // a feature far above the rest, in two samples
	}
	data := &sampleSource{x: x, shape: []int{2, side, side}, n: samples}
	for _, c := range []struct {
		preset string
		off    bool
		keep   bool    // x marked
		max    float64 // x's range: ≈ 1 clipped, 8 kept
	}{
		{"ort-x86", false, true, 8},
		{"ort-x86", true, false, 1},
		{"w8a8", false, true, 0}, // marked, but moving averages are left as the config says
	} {
		cfg, err := config.Preset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		u := &Unit{Model: m, Config: cfg, Prepare: PrepareOptions{NoHeadroom: c.off},
			Calibrate: EngineCalibrator("go", runtime.Options{}, data, calibrate.Options{BatchSize: 1}, nil)}
		if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		xt := u.Plan.Tensor("x")
		if xt.KeepMax != c.keep {
			t.Errorf("%s, NoHeadroom=%v: x keep_max %v, want %v", c.preset, c.off, xt.KeepMax, c.keep)
		}
		for _, v := range []string{"c", "r", "g"} {
			if tp := u.Plan.Tensor(v); tp != nil && u.Plan.Root(tp).KeepMax {
				t.Errorf("%s: %q keeps its max; only the Conv's input should", c.preset, v)
			}
		}
		if c.preset == "w8a8" {
			continue // moving averages are left as the config says
		}
		p := xt.Params
		top := float64(p.Scales[0]) * float64(255-p.ZeroPoints[0])
		if math.Abs(top-c.max) > 0.1*c.max {
			t.Errorf("%s, NoHeadroom=%v: x's grid reaches %.3f, want about %g", c.preset, c.off, top, c.max)
		}
	}
}

// TestHeadroomKeepsTheTopClass: calibrated on logits up to 10, a sample
// scoring 12 and 11 for its two best classes keeps them apart with
// headroom (the grid spans [0, 20]) and ties them at the top code without.
func TestHeadroomKeepsTheTopClass(t *testing.T) {
	m := classifierHead(t)
	for _, off := range []bool{false, true} {
		plan := preparePreset(t, m, "ort-x86", PrepareOptions{NoHeadroom: off})
		stats := RangeStats{}
		for _, tp := range plan.Tensors {
			if tp.Role == Activation && tp.SharedWith == "" && tp.Fixed == nil {
				stats[tp.Value] = Range{Min: 0, Max: 10}
			}
		}
		if err := DecideQParams(m, plan, stats); err != nil {
			t.Fatal(err)
		}
		p := plan.Tensor("g").Params
		if p.Observed == nil || p.Observed.Max != 10 {
			t.Errorf("NoHeadroom=%v: observed range %+v, want the calibrated [0, 10]", off, p.Observed)
		}
		code := func(v float64) int64 {
			q := math.RoundToEven(v/float64(p.Scales[0])) + float64(p.ZeroPoints[0])
			return int64(math.Min(255, math.Max(0, q)))
		}
		wantScale := 10.0 / 255
		if !off {
			wantScale = 20.0 / 255
		}
		if got := float64(p.Scales[0]); math.Abs(got-wantScale) > 1e-6 {
			t.Errorf("NoHeadroom=%v: scale %g, want %g", off, got, wantScale)
		}
		if tied := code(12) == code(11); tied != off {
			t.Errorf("NoHeadroom=%v: codes of 12 and 11 are %d and %d (tied %v)", off, code(12), code(11), tied)
		}
		if x := plan.Tensor("x").Params; x.Scales[0] != float32(10.0/255) {
			t.Errorf("NoHeadroom=%v: the Conv input's scale %g changed, want %g", off, x.Scales[0], 10.0/255)
		}
	}
}

// TestHeadroomReachesArgMaxThroughResize: a segmentation head (Conv →
// Resize → ArgMax over the classes) decides each pixel by its largest
// class score, and Resize moves data, so the Conv's output, whose
// qparams the Resize shares, gets the headroom.
func TestHeadroomReachesArgMaxThroughResize(t *testing.T) {
	b := testmodels.New("seghead", 17)
	b.Input("x", tensor.Float, 1, 2, 4, 4).Output("labels", tensor.Int64, 1, 1, 8, 8)
	b.Init("w", []int64{3, 2, 1, 1}, []float32{1, 0, 0, 1, 1, 1})
	b.Init("scales", []int64{4}, []float32{1, 1, 2, 2})
	b.Node("Conv", "conv", []string{"x", "w"}, []string{"scores"})
	b.Node("Resize", "up", []string{"scores", "", "scales"}, []string{"big"}, testmodels.AttrString("mode", "nearest"))
	b.Node("ArgMax", "argmax", []string{"big"}, []string{"labels"}, testmodels.AttrInt("axis", 1), testmodels.AttrInt("keepdims", 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, preset := range []string{"w8a8", "ort-x86"} {
		plan := preparePreset(t, m, preset, PrepareOptions{})
		scores, big := plan.Tensor("scores"), plan.Tensor("big")
		if scores == nil || big == nil {
			t.Fatalf("%s: the Conv's or the Resize's output is not quantized", preset)
		}
		if root := plan.Root(big); root != scores || !scores.Headroom {
			t.Errorf("%s: Resize output's root %q headroom %v, want the Conv's output with headroom", preset, root.Value, root.Headroom)
		}
		if plan.Tensor("x").Headroom {
			t.Errorf("%s: the Conv's input got headroom", preset)
		}
	}
}

// wideActivations quantizes every activation to int16 (symmetric) with
// the observed range, weights to int8.
const wideActivations = `quantization_spec:
  activation: &activation {dtype: int16, qscheme: symmetric, granularity: {type: per_tensor}, qparam_calculator: global_minmax}
quantization_config:
  global_config:
    op_input_spec: {"*": *activation}
    op_output_spec: {"*": *activation}
    op_state_spec: {weight: {dtype: int8, qscheme: symmetric, granularity: {type: per_channel}}}
`

// TestWideHeadroom: activations on a 16-bit grid get their calibrated
// range widened away from zero by half (the input's int16 [-3, 5] is
// written for [-4.5, 7.5], symmetric: ±7.5; the fused Conv + Relu's
// output, calibrated the same, reaches 7.5 too), and a plan note says how
// many;
// 8-bit activations (w8a8), values whose range is fixed (the Sigmoid's)
// and the rule turned off keep the calibrated range.
func TestWideHeadroom(t *testing.T) {
	b := testmodels.New("wide", 17)
	b.Input("x", tensor.Float, 1, 2, 4, 4).Output("s", tensor.Float, 1, 3, 4, 4)
	b.Init("w", []int64{3, 2, 1, 1}, []float32{1, -1, 0, 1, 1, 1})
	b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
	b.Node("Relu", "relu", []string{"c"}, []string{"r"})
	b.Node("Sigmoid", "sigmoid", []string{"r"}, []string{"s"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := config.Parse([]byte(wideActivations), "wide.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wide := parsed.Quant
	w8a8, err := config.Preset("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		cfg    *config.QuantizerConfig
		off    bool
		top    map[string]float64 // the grid's largest value by value
		bottom float64            // x's lowest
		marked int
	}{
		{"int16", wide, false, map[string]float64{"x": 7.5, "r": 7.5, "s": 1}, -7.5, 2},
		{"int16, rule off", wide, true, map[string]float64{"x": 5, "r": 5, "s": 1}, -5, 0},
		{"w8a8", w8a8, false, map[string]float64{"x": 5, "r": 5, "s": 1}, -5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := config.Resolve(c.cfg, m.Graph)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := Prepare(m, res, PrepareOptions{NoWideHeadroom: c.off})
			if err != nil {
				t.Fatal(err)
			}
			stats := RangeStats{}
			marked := 0
			for _, tp := range plan.Tensors {
				if tp.Role == Activation && tp.SharedWith == "" && tp.Fixed == nil {
					stats[tp.Value] = Range{Min: -3, Max: 5}
				}
				if tp.WideHeadroom {
					marked++
				}
			}
			if marked != c.marked {
				t.Errorf("%d values marked, want %d", marked, c.marked)
			}
			noted := slices.ContainsFunc(plan.Notes, func(n string) bool { return strings.Contains(n, "headroom beyond the calibrated extremes") })
			if noted != (c.marked > 0) {
				t.Errorf("notes %q: headroom noted %v, want %v", plan.Notes, noted, c.marked > 0)
			}
			if err := DecideQParams(m, plan, stats); err != nil {
				t.Fatal(err)
			}
			for v, want := range c.top {
				tp := plan.Root(plan.Tensor(v))
				qmin, qmax := tp.Spec.DType.Range()
				p := tp.Params
				top := float64(p.Scales[0]) * float64(qmax-int64(p.ZeroPoints[0]))
				if math.Abs(top-want) > 0.01*want { // 8 bits: the scale is rounded to the grid
					t.Errorf("%q (%s): grid reaches %.4f, want %g", v, tp.Spec.DType, top, want)
				}
				if v == "x" {
					if low := float64(p.Scales[0]) * float64(qmin-int64(p.ZeroPoints[0])); low > c.bottom*0.99 {
						t.Errorf("%q: grid starts at %.4f, want %g or below", v, low, c.bottom)
					}
				}
				if p.Observed != nil && v != "s" && (p.Observed.Min != -3 || p.Observed.Max != 5) {
					t.Errorf("%q: observed %+v, want the calibrated [-3, 5]", v, p.Observed)
				}
			}
		})
	}
}

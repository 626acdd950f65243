package passes

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// convBiasModel loads testmodels.ConvBias.
func convBiasModel(t *testing.T, bias []float32) *onnxgraph.Model {
	t.Helper()
	m, err := onnxgraph.LoadBytes(testmodels.ConvBias(bias).Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// convBiasPlan plans x with scale 0.01, W per channel with the given
// scales and B as an int32 bias.
func convBiasPlan(wScales []float32) *Plan {
	act := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric}
	axis := 0
	w := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric, Granularity: spec.Granularity{Type: spec.PerChannel, Axis: &axis}}
	p := &Plan{Stage: Calibrated}
	for _, tp := range []*TensorPlan{
		{Value: "x", Role: Activation, Spec: act, Nodes: []string{"conv"}, Axis: -1,
			Params: &Params{Scales: []float32{0.01}, ZeroPoints: []int32{0}}},
		{Value: "W", Role: Weight, Spec: w, Nodes: []string{"conv"}, Axis: 0, Shape: []int{2, 1, 1, 1},
			Params: &Params{Scales: wScales, ZeroPoints: make([]int32, len(wScales))}},
		{Value: "B", Role: Bias, Nodes: []string{"conv"}, Input: "x", Weight: "W", Axis: 0},
	} {
		if err := p.Add(tp); err != nil {
			panic(err)
		}
	}
	return p
}

func quantizedInit(t *testing.T, m *onnxgraph.Model, name string) any {
	t.Helper()
	v := m.Graph.Value(name)
	if v == nil || v.Const == nil {
		t.Fatalf("no initializer %q", name)
	}
	x, err := tensor.FromProto(v.Const, m)
	if err != nil {
		t.Fatal(err)
	}
	return x.Data
}

// TestQParamsBiasInt32 checks bias scale = input scale × weight scale (a
// float32 product, as runtimes recompute it) and the codes finalize writes
// from it: 0.3 / (0.01·0.004) = 7500, -0.2 / (0.01·0.008) = -2500.
func TestQParamsBiasInt32(t *testing.T) {
	m := convBiasModel(t, []float32{0.3, -0.2})
	p := convBiasPlan([]float32{0.004, 0.008})
	if err := DecideQParams(m, p, nil); err != nil {
		t.Fatal(err)
	}
	in := p.Tensor("x").Params.Scales[0]
	if want := []float32{in * 0.004, in * 0.008}; !slices.Equal(p.Tensor("B").Params.Scales, want) {
		t.Errorf("bias scales %v, want %v", p.Tensor("B").Params.Scales, want)
	}
	r, err := finalize.Write(m, p, finalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := quantizedInit(t, r.Model, "B_quantized").([]int32); !slices.Equal(got, []int32{7500, -2500}) {
		t.Errorf("bias codes %v, want [7500 -2500]", got)
	}
}

// TestQParamsBiasEnlargesWeightScale checks that a bias too large for
// int32 at input scale × weight scale enlarges that channel's weight scale
// in the plan (and finalize quantizes the weight with it) instead of
// saturating, with a note; a second run changes nothing.
func TestQParamsBiasEnlargesWeightScale(t *testing.T) {
	// Channel 0: 100 / (0.01·1e-9) = 1e13 overflows int32; channel 1 fits.
	m := convBiasModel(t, []float32{100, 0.5})
	p := convBiasPlan([]float32{1e-9, 0.008})
	prepared := p.Tensor("W").Params
	if err := DecideQParams(m, p, nil); err != nil {
		t.Fatal(err)
	}
	w := p.Tensor("W").Params
	need := 100 / (0.01 * float64(math.MaxInt32))
	if s := float64(w.Scales[0]); s < need || s > need*1.000001 {
		t.Errorf("enlarged weight scale %g, want just above %g", s, need)
	}
	if w.Scales[1] != 0.008 {
		t.Errorf("channel 1 weight scale changed to %g", w.Scales[1])
	}
	if prepared.Scales[0] != 1e-9 {
		t.Error("the enlargement changed the prepared params in place, not a copy")
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "enlarged") {
		t.Errorf("notes %q do not report the enlargement once", p.Notes)
	}
	again := w.Scales[0]
	if err := DecideQParams(m, p, nil); err != nil {
		t.Fatal(err)
	}
	if p.Tensor("W").Params.Scales[0] != again || len(p.Notes) != 1 {
		t.Errorf("a second run changed the plan: scale %g, notes %q", p.Tensor("W").Params.Scales[0], p.Notes)
	}
	r, err := finalize.Write(m, p, finalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	codes := quantizedInit(t, r.Model, "B_quantized").([]int32)
	// float32 has 24 bits of mantissa: near 2^31 its step is 128.
	if codes[0] < math.MaxInt32-256 {
		t.Errorf("bias code %d, want the int32 maximum within float32 precision", codes[0])
	}
	// 0.5 / (0.01·1e-9 enlarged) saturates the int8 weight: 0.5/4.66e-9.
	if got := quantizedInit(t, r.Model, "W_quantized").([]int8); got[0] != 127 {
		t.Errorf("weight code %d, want 127 under the enlarged scale", got[0])
	}
}

// TestQParamsNeedStats checks the error when activations are planned and
// no statistics are given, and that given ones set their params.
func TestQParamsNeedStats(t *testing.T) {
	m := convBiasModel(t, []float32{0, 0})
	p := convBiasPlan([]float32{0.1, 0.1})
	p.Tensor("x").Params = nil
	err := DecideQParams(m, p, nil)
	if err == nil || !strings.Contains(err.Error(), "calibration statistics") || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("error %v, want one naming x and asking for calibration statistics", err)
	}
	if err := DecideQParams(m, p, RangeStats{"x": {Min: -1, Max: 2}}); err != nil {
		t.Fatal(err)
	}
	want, _, err := p.Tensor("x").Spec.QParams([]float32{-1}, []float32{2})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Tensor("x").Params; !slices.Equal(got.Scales, want) || got.Observed == nil || got.Observed.Max != 2 {
		t.Errorf("x params %+v, want scale %v observed [-1, 2]", got, want)
	}
}

// TestRunChecksThePlan hands the pipeline a calibrated plan whose bias
// names an unplanned input: the first pass that runs (algorithms) must
// fail, naming itself and the bias, before the writer sees the plan.
func TestRunChecksThePlan(t *testing.T) {
	m := convBiasModel(t, []float32{0.3, -0.2})
	p := convBiasPlan([]float32{0.004, 0.008})
	p.Tensor("B").Input = "y"
	u := &Unit{Model: m, Plan: p}
	_, err := Run(context.Background(), u, RunOptions{Check: true})
	if err == nil || !strings.HasPrefix(err.Error(), "algorithms: the plan it left is invalid") || !strings.Contains(err.Error(), `bias "B"`) {
		t.Fatalf("error %v, want the algorithms pass's plan check naming bias B", err)
	}
	if u.Result != nil {
		t.Error("finalize ran on an invalid plan")
	}
}

// TestQParamsBiasInSubgraph: a Gemm's int32 bias inside an If branch gets
// its qparams from the branch's constant.
func TestQParamsBiasInSubgraph(t *testing.T) {
	b := testmodels.New("gemm_if", 13)
	b.Input("x", tensor.Float, 2, 8).Output("y", tensor.Float, 2, 8)
	b.RandomInit("W0", 0.5, 8, 8)
	b.Init("zero", []int64{}, []float32{0})
	b.Node("MatMul", "mm0", []string{"x", "W0"}, []string{"h"})
	b.Node("ReduceMean", "mean", []string{"x"}, []string{"mx"}, testmodels.AttrInt("keepdims", 0))
	b.Node("Greater", "positive", []string{"mx", "zero"}, []string{"cond"})
	then := testmodels.New("then", 13)
	then.Output("t_out", tensor.Float, 2, 8)
	then.RandomInit("Wt", 0.3, 8, 8).RandomInit("bt", 0.1, 8)
	then.Node("Gemm", "gemm", []string{"h", "Wt", "bt"}, []string{"t_gemm"})
	then.Node("Relu", "relu", []string{"t_gemm"}, []string{"t_out"})
	els := testmodels.New("else", 13)
	els.Output("e_out", tensor.Float, 2, 8)
	els.Node("Relu", "relu_e", []string{"h"}, []string{"e_out"})
	b.Node("If", "branch", []string{"cond"}, []string{"y"},
		testmodels.AttrGraph("then_branch", then.Model.Graph), testmodels.AttrGraph("else_branch", els.Model.Graph))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	u := quantize(t, m, "w8a8", PrepareOptions{}, true)
	bt := u.Plan.Tensor("bt")
	if bt == nil || bt.Role != Bias || bt.Params == nil {
		t.Fatalf("bias bt inside the branch: planned %+v", bt)
	}
	in, w := u.Plan.Root(u.Plan.Tensor(bt.Input)).Params, u.Plan.Tensor("Wt").Params
	if bt.Params.Scales[0] != in.Scales[0]*w.Scales[0] {
		t.Errorf("bias scale %g, want input × weight scale %g", bt.Params.Scales[0], in.Scales[0]*w.Scales[0])
	}
}

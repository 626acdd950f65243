package passes

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// gptqFeatures is the width of the test model's input.
const gptqFeatures = 32

// linearModel is x [n, 32] → Gemm (transB, 32→48, bias) → Relu →
// MatMul (48→16) → y.
func linearModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("linear", 17)
	b.Input("x", tensor.Float, "n", gptqFeatures).Output("y", tensor.Float, "n", 16)
	rng := rand.New(rand.NewPCG(11, 12))
	normal := normalDraws(rng)
	b.Init("w1", []int64{48, gptqFeatures}, normal(48*gptqFeatures, 0.2))
	b.Init("b1", []int64{48}, normal(48, 0.1))
	b.Init("w2", []int64{48, 16}, normal(48*16, 0.2))
	b.Node("Gemm", "fc1", []string{"x", "w1", "b1"}, []string{"h"}, testmodels.AttrInt("transB", 1))
	b.Node("Relu", "relu", []string{"h"}, []string{"r"})
	b.Node("MatMul", "fc2", []string{"r", "w2"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// correlatedSource is n samples of 32 features mixed through a fixed
// random matrix plus a shared component: strongly correlated inputs, where
// GPTQ's error spreading matters.
func correlatedSource(seed uint64, n int) *sampleSource {
	s := newSampleSource(seed, n, gptqFeatures)
	rng := rand.New(rand.NewPCG(seed, 99))
	mix := make([]float64, gptqFeatures*gptqFeatures)
	for i := range mix {
		mix[i] = rng.NormFloat64() * 0.3
	}
	for r := range n {
		row := s.x[r*gptqFeatures : (r+1)*gptqFeatures]
		common := rng.NormFloat64()
		out := make([]float32, gptqFeatures)
		for j := range out {
			v := common
			for i, x := range row {
				v += float64(x) * mix[i*gptqFeatures+j]
			}
			out[j] = float32(v)
		}
		copy(row, out)
	}
	return s
}

// layerInputs computes, independently of the engine, the rows each layer
// of linearModel reads: x for fc1, relu(x·w1ᵀ + b1) for fc2.
func layerInputs(t *testing.T, m *onnxgraph.Model, src *sampleSource) map[string][][]float64 {
	t.Helper()
	w1, _, err := constFloats(m, m.Graph.Value("w1"))
	if err != nil {
		t.Fatal(err)
	}
	b1, _, err := constFloats(m, m.Graph.Value("b1"))
	if err != nil {
		t.Fatal(err)
	}
	in := map[string][][]float64{}
	for r := range src.n {
		x := make([]float64, gptqFeatures)
		for i := range x {
			x[i] = float64(src.x[r*gptqFeatures+i])
		}
		h := make([]float64, 48)
		for o := range h {
			v := float64(b1[o])
			for i := range x {
				v += x[i] * float64(w1[o*gptqFeatures+i])
			}
			h[o] = max(v, 0)
		}
		in["fc1"] = append(in["fc1"], x)
		in["fc2"] = append(in["fc2"], h)
	}
	return in
}

// reconstructionError is ‖X(W − Ŵ)‖² for a weight viewed as k×n by at.
func reconstructionError(rows [][]float64, w, q []float32, n int, at func(k, n int) int) float64 {
	var s float64
	for _, x := range rows {
		for o := range n {
			var v float64
			for k := range x {
				v += x[k] * (float64(w[at(k, o)]) - float64(q[at(k, o)]))
			}
			s += v * v
		}
	}
	return s
}

// TestGPTQLowersReconstructionError checks on the linear model with
// correlated inputs (fixed seeds), for int4 and int8 weights per channel
// and per block, that GPTQ's rounding has a lower weighted reconstruction
// error than round-to-nearest on every layer (computed here from the
// layer inputs, not from the algorithm's Hessian), that every written
// weight is a code of its qparams on the spec's grid, that the qparams
// are prepare's, and that the report agrees.
func TestGPTQLowersReconstructionError(t *testing.T) {
	cases := []struct{ name, weight string }{
		{"int4 per block 16", "{dtype: int4, qscheme: symmetric, granularity: {type: per_block, block_size: 16}}"},
		{"int4 per channel", "{dtype: int4, qscheme: symmetric, granularity: {type: per_channel}}"},
		{"uint4 asymmetric per channel", "{dtype: uint4, qscheme: asymmetric, granularity: {type: per_channel}}"},
		{"int8 per channel", "{dtype: int8, qscheme: symmetric, granularity: {type: per_channel}}"},
	}
	src := correlatedSource(21, 64)
	for _, c := range cases {
		for _, actOrder := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/act_order=%v", c.name, actOrder), func(t *testing.T) {
				testGPTQLinear(t, c.weight, actOrder, src)
			})
		}
	}
}

func testGPTQLinear(t *testing.T, weight string, actOrder bool, src *sampleSource) {
	text := "quantization_config:\n  global_config:\n    op_input_spec: null\n    op_output_spec: null\n    op_state_spec:\n      weight: " + weight + "\n"
	cfg, err := config.Parse([]byte(text), "weights.yaml")
	if err != nil {
		t.Fatal(err)
	}
	float := linearModel(t)
	inputs := layerInputs(t, float, src)
	plain := quantizeWith(t, linearModel(t), "", nil, src, cfg.Quant)
	u := quantizeWith(t, float, "", algorithms(t, fmt.Sprintf("algorithms:\n  gptq: {samples: 64, damp: 0.01, act_order: %v}\n", actOrder)), src, cfg.Quant)
	reported := map[string]LayerReport{}
	for _, l := range u.Layers {
		if l.Algorithm == gptqAlgorithmName {
			reported[l.Node] = l
		}
	}
	for _, layer := range []struct {
		node, weight string
		k, n         int
		transposed   bool
	}{{"fc1", "w1", gptqFeatures, 48, true}, {"fc2", "w2", 48, 16, false}} {
		at := func(k, n int) int { return k*layer.n + n }
		if layer.transposed {
			at = func(k, n int) int { return n*layer.k + k }
		}
		w, got, shape, tp := roundedWeight(t, float, u, plain, layer.weight)
		checkOnGrid(t, layer.weight, got, shape, tp)
		rtn, err := finalize.FakeQuantize(w, shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
		if err != nil {
			t.Fatal(err)
		}
		errRTN := reconstructionError(inputs[layer.node], w, rtn, layer.n, at)
		errGPTQ := reconstructionError(inputs[layer.node], w, got, layer.n, at)
		checkGPTQGain(t, layer.node, errRTN, errGPTQ, reported)
	}
}

// checkGPTQGain fails unless GPTQ's reconstruction error on node is
// below round-to-nearest's and the report says the local SQNR went up.
func checkGPTQGain(t *testing.T, node string, errRTN, errGPTQ float64, reported map[string]LayerReport) {
	t.Helper()
	if !(errGPTQ < errRTN) {
		t.Errorf("%s: ‖X(W−Ŵ)‖² %g with GPTQ, %g with round-to-nearest", node, errGPTQ, errRTN)
	}
	r, ok := reported[node]
	if !ok || r.Skipped != "" || !(r.After > r.Before) {
		t.Errorf("%s: report %+v, want a local SQNR that went up", node, r)
	}
	t.Logf("%s: error %.4g → %.4g (%.2f → %.2f dB)", node, errRTN, errGPTQ, float64(r.Before), float64(r.After))
}

// roundedWeight is a weight's values in the float model and as the GPTQ
// run u wrote them, with its shape and plan; it fails unless u's qparams
// are those of plain, the run without GPTQ: the rounding chooses codes,
// never the grid.
func roundedWeight(t *testing.T, float *onnxgraph.Model, u, plain *Unit, name string) (w, got []float32, shape []int, tp *TensorPlan) {
	t.Helper()
	w, shape, err := constFloats(float, float.Graph.Value(name))
	if err != nil {
		t.Fatal(err)
	}
	got, _, err = constFloats(u.Model, u.Model.Graph.Value(name))
	if err != nil {
		t.Fatal(err)
	}
	tp, ptp := u.Plan.Tensor(name), plain.Plan.Tensor(name)
	for g := range tp.Params.Scales {
		if tp.Params.Scales[g] != ptp.Params.Scales[g] || tp.Params.ZeroPoints[g] != ptp.Params.ZeroPoints[g] {
			t.Fatalf("%s: qparams of group %d changed", name, g)
		}
	}
	return w, got, shape, tp
}

// checkOnGrid checks that every value v of a rounded weight is
// (q − zp)·scale for an integer q within the spec's grid, its group's
// qparams computed here from the layout's definition.
func checkOnGrid(t *testing.T, name string, v []float32, shape []int, tp *TensorPlan) {
	t.Helper()
	grid, ok := tp.Spec.IntGrid()
	if !ok {
		t.Fatalf("%s: no integer grid", name)
	}
	rows, cols := shape[0], shape[1]
	for r := range rows {
		for c := range cols {
			var g int
			switch {
			case tp.Axis < 0:
				g = 0
			case tp.BlockSize == 0 && tp.Axis == 0:
				g = r
			case tp.BlockSize == 0:
				g = c
			case tp.Axis == 0:
				g = (r/tp.BlockSize)*cols + c
			default:
				g = r*((cols+tp.BlockSize-1)/tp.BlockSize) + c/tp.BlockSize
			}
			scale, zp := float64(tp.Params.Scales[g]), float64(tp.Params.ZeroPoints[g])
			x := float64(v[r*cols+c])
			q := math.Round(x/scale) + zp
			if q < float64(grid.QMin) || q > float64(grid.QMax) || float32((q-zp)*scale) != v[r*cols+c] {
				t.Fatalf("%s[%d,%d] = %g is not on the grid (scale %g, zero point %g, codes %d..%d)", name, r, c, x, scale, zp, grid.QMin, grid.QMax)
			}
		}
	}
}

// TestGPTQDeterministic checks that GPTQ, alone and with bias correction,
// writes byte-identical models across runs and thread counts, on the
// linear model and on the Conv model (plain, grouped and depthwise).
func TestGPTQDeterministic(t *testing.T) {
	cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  gptq: true\n  bias_correction: true\n"), "int4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		model  func(*testing.T) *onnxgraph.Model
		source func() *sampleSource
		layers int
	}{
		{"linear", linearModel, func() *sampleSource { return correlatedSource(4, 40) }, 2},
		{"conv", convGPTQModel, func() *sampleSource { return newSampleSource(4, 20, 4, 10, 10) }, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			sameModelAcrossThreads(t, func(threads int) *Unit {
				u := &Unit{Model: c.model(t), Config: cfg.Quant, Algorithms: cfg.Algorithms,
					Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
						return observe(t, m, plan), nil
					},
					Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: c.source(), BatchSize: 7}}
				if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, l := range u.Layers {
					if l.Algorithm == gptqAlgorithmName && l.Skipped == "" {
						n++
					}
				}
				if n != c.layers {
					t.Fatalf("gptq reported %d layers, want %d: %+v", n, c.layers, u.Layers)
				}
				return u
			})
		})
	}
}

// TestWithUnroundedWeights checks that a run with KeepFloatWeights gives
// back, for the named weights GPTQ rounded, their float values (and
// leaves the others rounded), and that a run without it keeps nothing
// (the model is returned as it is).
func TestWithUnroundedWeights(t *testing.T) {
	cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  gptq: true\n"), "int4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	orig := linearModel(t)
	w1, _, err := constFloats(orig, orig.Graph.Value("w1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{true, false} {
		u := &Unit{Model: linearModel(t), Config: cfg.Quant, Algorithms: cfg.Algorithms, KeepFloatWeights: keep,
			Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
				return observe(t, m, plan), nil
			},
			Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: correlatedSource(4, 40), BatchSize: 7}}
		if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		rounded, _, err := constFloats(u.Model, u.Model.Graph.Value("w1"))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(rounded, w1) {
			t.Fatal("GPTQ left w1 as it was")
		}
		m, err := WithUnroundedWeights(u, u.Model, []string{"w1"})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := constFloats(m, m.Graph.Value("w1"))
		if err != nil {
			t.Fatal(err)
		}
		w2a, _, _ := constFloats(u.Model, u.Model.Graph.Value("w2"))
		w2b, _, _ := constFloats(m, m.Graph.Value("w2"))
		switch {
		case keep && !slices.Equal(got, w1):
			t.Error("KeepFloatWeights: w1 is not its float values")
		case !keep && (m != u.Model || !slices.Equal(got, rounded)):
			t.Error("without KeepFloatWeights: the model changed")
		case !slices.Equal(w2a, w2b):
			t.Error("w2, not named, changed")
		}
		if keep {
			again, _, _ := constFloats(u.Model, u.Model.Graph.Value("w1"))
			if !slices.Equal(again, rounded) {
				t.Error("the unit's own model changed")
			}
		}
	}
}

// TestRoundTrips checks roundTrips' claim: a grid value code·scale of an
// int8 grid written to a float16 weight, and of an int4 grid written to a
// bfloat16 one, quantizes back to its code (round to nearest of
// value/scale) for every code and 2000 scales over eight decades; an int16
// grid in float16 is refused, and some of its values do move.
func TestRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, tc := range []struct {
		dt    tensor.DType
		bits  int
		holds bool
	}{
		{tensor.Float16, 8, true},
		{tensor.BFloat16, 4, true},
		{tensor.Float16, 16, false},
		{tensor.BFloat16, 8, false},
		{tensor.Float, 16, true},
	} {
		g := spec.IntGrid{QMin: -(1 << (tc.bits - 1)), QMax: 1<<(tc.bits-1) - 1}
		if got := roundTrips(tc.dt, g); got != tc.holds {
			t.Errorf("%s, %d bits: roundTrips %t, want %t", tc.dt, tc.bits, got, tc.holds)
		}
		moved := 0
		for range 2000 {
			scale := float32(math.Pow(10, rng.Float64()*8-6))
			for code := int(g.QMin); code <= int(g.QMax); code += max(1, (1<<tc.bits)/512) {
				c, err := tensor.Cast(tensor.FromFloat32([]float32{float32(code) * scale}, 1), tc.dt)
				if err != nil {
					t.Fatal(err)
				}
				back, _ := c.AsFloat32()
				if int(math.RoundToEven(float64(back[0]/scale))) != code {
					moved++
				}
			}
		}
		if tc.holds && moved != 0 {
			t.Errorf("%s, %d bits: %d grid values moved to another code", tc.dt, tc.bits, moved)
		}
		if tc.dt == tensor.Float16 && tc.bits == 16 && moved == 0 {
			t.Errorf("%s, %d bits: no value moved: the refusal is not shown needed", tc.dt, tc.bits)
		}
	}
}

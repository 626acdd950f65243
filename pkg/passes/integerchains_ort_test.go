//go:build ort

package passes

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// chainNet is input [N,4,8,8] → Conv 3×3 → the chain → Conv 1×1 →
// output: the chain's ops are given as nodes from "a" to "y", with
// scalar constants c3, c6, c16 (1/6) and c0.5.
func chainNet(t *testing.T, chain func(b *testmodels.Builder)) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("chain", 13)
	b.Input("input", tensor.Float, "N", 4, 8, 8).Output("output", tensor.Float, "N", 4, 8, 8)
	b.RandomInit("conv1.weight", 0.6, 8, 4, 3, 3).RandomInit("conv1.bias", 0.3, 8)
	b.RandomInit("conv2.weight", 0.4, 4, 8, 1, 1).RandomInit("conv2.bias", 0.1, 4)
	for name, v := range map[string]float32{"c0": 0, "c3": 3, "c6": 6, "c16": 1.0 / 6, "c0.5": 0.5} {
		b.Init(name, nil, []float32{v})
	}
	b.Node("Conv", "conv1", []string{"input", "conv1.weight", "conv1.bias"}, []string{"x"},
		testmodels.AttrInts("kernel_shape", 3, 3), testmodels.AttrInts("pads", 1, 1, 1, 1))
	chain(b)
	b.Node("Conv", "conv2", []string{"y", "conv2.weight", "conv2.bias"}, []string{"output"},
		testmodels.AttrInts("kernel_shape", 1, 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestORTIntegerChains writes HardSwish, HardSigmoid and SiLU chains and
// scalar factors for target ort-x86 and checks in ONNX Runtime's optimized graph
// that none of their float ops is left, and that the outputs stay those
// of the same plan written without the rewrites (ONNX Runtime runs both):
// the rewrites change scales, not values, but for the rounding of the
// Clip's or Sigmoid's output to 8 bits, which the integer Mul needs.
func TestORTIntegerChains(t *testing.T) {
	lib := ortLibrary(t)
	hardSwish := func(b *testmodels.Builder) {
		b.Node("Add", "add3", []string{"x", "c3"}, []string{"a"})
		b.Node("Clip", "clip", []string{"a", "c0", "c6"}, []string{"c"})
	}
	tests := []struct {
		name  string
		chain func(b *testmodels.Builder)
		float []string // float ops allowed in the optimized graph
		// minSQNR bounds the output against the model written without
		// the rewrites, in dB (random data, seed 1).
		minSQNR float64
	}{
		{"hard_swish_div_last", func(b *testmodels.Builder) {
			hardSwish(b)
			b.Node("Mul", "mul", []string{"x", "c"}, []string{"m"})
			b.Node("Div", "div6", []string{"m", "c6"}, []string{"y"})
		}, nil, 30},
		{"hard_swish", func(b *testmodels.Builder) {
			hardSwish(b)
			b.Node("Div", "div6", []string{"c", "c6"}, []string{"d"})
			b.Node("Mul", "mul", []string{"x", "d"}, []string{"y"})
		}, nil, 30},
		{"hard_swish_by_mul", func(b *testmodels.Builder) {
			hardSwish(b)
			b.Node("Mul", "mul16", []string{"c16", "c"}, []string{"d"})
			b.Node("Mul", "mul", []string{"d", "x"}, []string{"y"})
		}, nil, 30},
		{"hard_sigmoid", func(b *testmodels.Builder) {
			hardSwish(b)
			b.Node("Div", "div6", []string{"c", "c6"}, []string{"y"})
		}, nil, 40},
		{"silu", func(b *testmodels.Builder) {
			b.Node("Sigmoid", "sigmoid", []string{"x"}, []string{"s"})
			b.Node("Mul", "mul", []string{"x", "s"}, []string{"y"})
		}, nil, 30},
		{"factor_after_dequantize", func(b *testmodels.Builder) {
			b.Node("Div", "div6", []string{"x", "c6"}, []string{"y"})
		}, nil, 40},
		{"factor_before_quantize", func(b *testmodels.Builder) {
			b.Node("Erf", "erf", []string{"x"}, []string{"e"})
			b.Node("Mul", "half", []string{"e", "c0.5"}, []string{"y"})
		}, []string{"Erf"}, 40},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := tensor.New(tensor.Float, 8, 4, 8, 8)
	for i := range data.Data.([]float32) {
		data.Data.([]float32)[i] = float32(rng.NormFloat64())
	}
	in := map[string]*tensor.Tensor{"input": data}
	target := config.Targets["ort-x86"]
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := chainNet(t, tc.chain)
			cfg, err := target.Config()
			if err != nil {
				t.Fatal(err)
			}
			u := &Unit{Model: m, Config: cfg, Prepare: PrepareOptions{Target: target},
				Calibrate: EngineCalibrator("go", runtime.Options{}, newMemSource(in, 8), calibrate.Options{BatchSize: 8}, nil)}
			if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
				t.Fatal(err)
			}
			if !u.Write.IntegerChains {
				t.Fatal("target ort-x86 did not ask finalize for integer chains")
			}
			allowed := map[string]bool{}
			for _, op := range tc.float {
				allowed[op] = true
			}
			om := ortOptimized(t, lib, u.Result.Model)
			for op, n := range opCounts(om) {
				switch op {
				case "Add", "Clip", "Mul", "Div", "Erf", "Sigmoid", "Conv":
					if !allowed[op] {
						t.Errorf("ONNX Runtime runs %d %s in float", n, op)
					}
				}
			}
			for _, f := range Lint(u.Result.Model, target) {
				if !allowed[f.OpType] {
					t.Errorf("lint: %s", f)
				}
			}
			plain, err := finalize.Write(u.Model, u.Plan, finalize.Options{})
			if err != nil {
				t.Fatal(err)
			}
			so := ort.SessionOptions{IntraOpThreads: 1, InterOpThreads: 1, Optimization: ort.OptimizeAll}
			want, err := runORT(t, lib, plain.Model, in, so)["output"].AsFloat32()
			if err != nil {
				t.Fatal(err)
			}
			got, err := runORT(t, lib, u.Result.Model, in, so)["output"].AsFloat32()
			if err != nil {
				t.Fatal(err)
			}
			if db := sqnr(want, got); db < tc.minSQNR {
				t.Errorf("output SQNR against the model written without the rewrites: %.1f dB, want at least %.0f", db, tc.minSQNR)
			} else {
				t.Logf("output SQNR against the model written without the rewrites: %.1f dB", db)
			}
		})
	}
}

package passes

import (
	"context"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// chainNet is x [N,4,8,8] → Conv 3×3 → the chain → Conv 1×1 → output:
// the chain's nodes go from "h" to "y", with scalar constants c0, c3, c6,
// c16 (1/6) and c0.5.
func chainNet(t *testing.T, chain func(b *testmodels.Builder)) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("chain", 13)
	b.Input("x", tensor.Float, "N", 4, 8, 8).Output("output", tensor.Float, "N", 4, 8, 8)
	b.RandomInit("conv1.weight", 0.6, 8, 4, 3, 3).RandomInit("conv1.bias", 0.3, 8)
	b.RandomInit("conv2.weight", 0.4, 4, 8, 1, 1).RandomInit("conv2.bias", 0.1, 4)
	for _, c := range []struct {
		name string
		v    float32
	}{{"c0", 0}, {"c3", 3}, {"c6", 6}, {"c16", 1.0 / 6}, {"c0.5", 0.5}} {
		b.Init(c.name, nil, []float32{c.v})
	}
	b.Node("Conv", "conv1", []string{"x", "conv1.weight", "conv1.bias"}, []string{"h"},
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

func hardSwishHead(b *testmodels.Builder) {
	b.Node("Add", "add3", []string{"h", "c3"}, []string{"a"})
	b.Node("Clip", "clip", []string{"a", "c0", "c6"}, []string{"c"})
}

// integerChainCases are the chains and scalar factors finalize rewrites
// for ONNX Runtime targets.
var integerChainCases = []struct {
	name  string
	chain func(b *testmodels.Builder)
	// float are the float ops ONNX Runtime keeps (no integer kernel).
	float []string
	// minSQNR bounds the output against the model written without the
	// rewrites, in dB (random weights and data, fixed seeds).
	minSQNR float64
}{
	{"hard_swish_div_last", func(b *testmodels.Builder) {
		hardSwishHead(b)
		b.Node("Mul", "mul", []string{"h", "c"}, []string{"m"})
		b.Node("Div", "div6", []string{"m", "c6"}, []string{"y"})
	}, nil, 30},
	{"hard_swish", func(b *testmodels.Builder) {
		hardSwishHead(b)
		b.Node("Div", "div6", []string{"c", "c6"}, []string{"d"})
		b.Node("Mul", "mul", []string{"h", "d"}, []string{"y"})
	}, nil, 30},
	{"hard_swish_by_mul", func(b *testmodels.Builder) {
		hardSwishHead(b)
		b.Node("Mul", "mul16", []string{"c16", "c"}, []string{"d"})
		b.Node("Mul", "mul", []string{"d", "h"}, []string{"y"})
	}, nil, 30},
	{"hard_sigmoid", func(b *testmodels.Builder) {
		hardSwishHead(b)
		b.Node("Div", "div6", []string{"c", "c6"}, []string{"y"})
	}, nil, 40},
	{"silu", func(b *testmodels.Builder) {
		b.Node("Sigmoid", "sigmoid", []string{"h"}, []string{"s"})
		b.Node("Mul", "mul", []string{"h", "s"}, []string{"y"})
	}, nil, 30},
	{"factor_after_dequantize", func(b *testmodels.Builder) {
		b.Node("Div", "div6", []string{"h", "c6"}, []string{"y"})
	}, nil, 40},
	{"factor_before_quantize", func(b *testmodels.Builder) {
		b.Node("Erf", "erf", []string{"h"}, []string{"e"})
		b.Node("Mul", "half", []string{"e", "c0.5"}, []string{"y"})
	}, []string{"Erf"}, 40},
}

// integerChainInput is the calibration and test batch: 8 samples, seed 1.
func integerChainInput(t *testing.T) map[string]*tensor.Tensor {
	t.Helper()
	in, err := newSampleSource(1, 8, 4, 8, 8).Batch(0, 8)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// quantizeChain quantizes m for target ort-x86, calibrating on samples of
// in["x"]'s shape, and returns the unit, and the same plan written
// without the integer chains.
func quantizeChain(t *testing.T, m *onnxgraph.Model, in map[string]*tensor.Tensor) (*Unit, *finalize.Result) {
	t.Helper()
	target := config.Targets["ort-x86"]
	cfg, err := target.Config()
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: m, Config: cfg, Prepare: PrepareOptions{Target: target},
		Calibrate: EngineCalibrator("go", runtime.Options{}, newSampleSource(1, 8, in["x"].Shape[1:]...), calibrate.Options{BatchSize: 8}, nil)}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if !u.Write.IntegerChains {
		t.Fatal("target ort-x86 did not ask finalize for integer chains")
	}
	plain, err := finalize.Write(u.Model, u.Plan, finalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return u, plain
}

// TestIntegerChains checks the written form of each chain and scalar
// factor: the lint finds nothing ONNX Runtime would run in float besides
// ops without an integer kernel, no Div or scalar Mul is left, the
// report lists none of the rewritten nodes as left in float, and the
// built-in engine gives the outputs of the plan written without the
// rewrites. TestORTIntegerChains checks the same models in ONNX Runtime.
func TestIntegerChains(t *testing.T) {
	in := integerChainInput(t)
	for _, tc := range integerChainCases {
		t.Run(tc.name, func(t *testing.T) {
			u, plain := quantizeChain(t, chainNet(t, tc.chain), in)
			allowed := map[string]bool{}
			for _, op := range tc.float {
				allowed[op] = true
			}
			for _, f := range Lint(u.Result.Model, config.Targets["ort-x86"]) {
				if !allowed[f.OpType] {
					t.Errorf("lint: %s", f)
				}
			}
			for _, n := range u.Result.Model.Graph.Nodes {
				if n.OpType == "Div" || n.OpType == "Mul" && len(n.Inputs) == 2 && (n.Inputs[0].IsConst() || n.Inputs[1].IsConst()) {
					t.Errorf("%s is left", n)
				}
			}
			for _, s := range u.Plan.Skipped {
				if !allowed[s.OpType] {
					t.Errorf("the report lists %s (%s) as left in float: %s", s.Node, s.OpType, s.Reason)
				}
			}
			want := runGo(t, plain.Model, in)
			got := runGo(t, u.Result.Model, in)
			if db := sqnr(want, got); db < tc.minSQNR {
				t.Errorf("output SQNR against the model written without the rewrites: %.1f dB, want at least %.0f", db, tc.minSQNR)
			}
		})
	}
}

// runGo runs m on in with the built-in engine and returns "output".
func runGo(t *testing.T, m *onnxgraph.Model, in map[string]*tensor.Tensor) []float32 {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), in, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := out["output"].AsFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

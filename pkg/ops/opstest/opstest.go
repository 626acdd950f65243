// Package opstest adds made-up op types to the op table for tests, to
// check that an entry alone is enough for the config language, prepare and
// the engine to know an op.
package opstest

import (
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Linear is a compute op Y = X·W + B whose weight W is [K N]: unlike
// Conv's and Gemm's, its default per-channel axis is 1, which shows that
// the axis comes from the entry.
var Linear = ops.Op{
	Type:    "FakeLinear",
	Inputs:  []string{"X", "W", "B"},
	Outputs: []string{"Y"},
	Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
	States:  map[int]string{1: "weight", 2: "bias"},
	Torch:   []ops.Torch{{Name: "fake_linear", States: []string{"weight", "bias"}}},
	Quant:   &ops.Quant{Kind: ops.Compute, Inputs: []int{0}, Bias: 2, FusesActivation: true},
	Weight: &ops.WeightAxes{
		Of:  func(*onnxgraph.Node, int) (int, int) { return 1, 0 },
		Doc: "per_channel 1, per_block 0",
	},
	Changes: ops.Changes{Known: true},
}

// Relu is an activation max(0, x): non-negative, asymmetric by
// op-intrinsic rule, fused after a compute op by prepare and into a Conv's
// epilogue by the engine.
var Relu = ops.Op{
	Type:        "FakeRelu",
	Inputs:      []string{"X"},
	Outputs:     []string{"Y"},
	Torch:       []ops.Torch{{Name: "fake_relu"}},
	Quant:       &ops.Quant{Kind: ops.Generic, Inputs: []int{0}, Activation: true},
	NonNegative: true,
	Intrinsic:   &ops.Intrinsic{Scheme: spec.Asymmetric, What: "FakeRelu output is non-negative"},
	Fusion:      ops.FuseConvRelu,
	Changes:     ops.Changes{Known: true},
}

// Register adds Linear and Relu to the table until the test ends. Tests
// that call it must not run in parallel with tests reading the table.
func Register(t testing.TB) {
	t.Helper()
	for _, op := range []ops.Op{Linear, Relu} {
		t.Cleanup(ops.Register(op))
	}
}

// Model is x → Conv → FakeRelu → FakeLinear → y: the FakeRelu follows a
// Conv (the engine fuses it) and the FakeLinear has a [4 5] weight and a
// [5] bias.
func Model(t testing.TB) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("fake_ops", 17)
	b.Input("x", tensor.Float, 1, 2, 4, 4).Output("y", tensor.Float, 1, 3, 4, 5)
	b.RandomInit("wc", 0.5, 3, 2, 1, 1).RandomInit("bc", 0.1, 3)
	b.RandomInit("w", 0.5, 4, 5).RandomInit("b", 0.1, 5)
	b.Node("Conv", "conv", []string{"x", "wc", "bc"}, []string{"c"})
	b.Node("FakeRelu", "fake_relu", []string{"c"}, []string{"r"})
	b.Node("FakeLinear", "fake_linear", []string{"r", "w", "b"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

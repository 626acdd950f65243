package passes

import (
	"context"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// boundModel reads x [seq 16, batch 1, 4] with an LSTM (default
// activations, its Y squeezed, its cell state Y_c copied), an LSTM with a
// Relu output activation, a GRU started from zero and one given an initial
// state, a Concat of
// a Tanh and a Sigmoid, a Concat of a Tanh and x, and a Relu.
func boundModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	const hidden = 4
	b := testmodels.New("bounds", 17)
	b.Input("x", tensor.Float, 16, 1, 4)
	b.Output("lstm", tensor.Float, 16, 1, hidden).Output("gru", tensor.Float, 16, 1, 1, hidden)
	b.Output("squash", tensor.Float, 16, 1, 8).Output("mixed", tensor.Float, 16, 1, 8).Output("relu", tensor.Float, 16, 1, 4)
	b.RandomInit("lstm_w", 0.8, 1, 4*hidden, 4).RandomInit("lstm_r", 0.3, 1, 4*hidden, hidden)
	b.RandomInit("gru_w", 0.8, 1, 3*hidden, 4).RandomInit("gru_r", 0.3, 1, 3*hidden, hidden)
	b.Init("h0", []int64{1, 1, hidden}, []float32{3, -3, 3, -3})
	b.InitInt64("axis1", []int64{1}, []int64{1})
	b.Output("cell", tensor.Float, 1, 1, hidden).Output("relu_lstm", tensor.Float, 16, 1, 1, hidden)
	b.Node("LSTM", "lstm_op", []string{"x", "lstm_w", "lstm_r"}, []string{"lstm_y", "", "lstm_c"}, testmodels.AttrInt("hidden_size", hidden))
	b.Node("Identity", "cell_id", []string{"lstm_c"}, []string{"cell"})
	b.Node("LSTM", "lstm_relu", []string{"x", "lstm_w", "lstm_r"}, []string{"relu_lstm_y"}, testmodels.AttrInt("hidden_size", hidden),
		testmodels.AttrStrings("activations", "Sigmoid", "Tanh", "Relu"))
	b.Node("Identity", "relu_lstm_id", []string{"relu_lstm_y"}, []string{"relu_lstm"})
	b.Node("Squeeze", "squeeze", []string{"lstm_y", "axis1"}, []string{"lstm"})
	b.Node("GRU", "gru_op", []string{"x", "gru_w", "gru_r", "", "", "h0"}, []string{"gru_y"}, testmodels.AttrInt("hidden_size", hidden))
	b.Node("Identity", "gru_id", []string{"gru_y"}, []string{"gru"})
	b.Output("gru_zero", tensor.Float, 16, 1, 1, hidden)
	b.Node("GRU", "gru_zero_op", []string{"x", "gru_w", "gru_r"}, []string{"gru_zero_y"}, testmodels.AttrInt("hidden_size", hidden))
	b.Node("Identity", "gru_zero_id", []string{"gru_zero_y"}, []string{"gru_zero"})
	b.Node("Tanh", "tanh", []string{"x"}, []string{"th"})
	b.Node("Sigmoid", "sigmoid", []string{"x"}, []string{"sg"})
	b.Node("Concat", "cat_squash", []string{"th", "sg"}, []string{"squash"}, testmodels.AttrInt("axis", 2))
	b.Node("Concat", "cat_mixed", []string{"th", "x"}, []string{"mixed"}, testmodels.AttrInt("axis", 2))
	b.Node("Relu", "relu_op", []string{"x"}, []string{"relu"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestValueBounds pins the bound prepare records on each value: the
// hidden state of an LSTM with default activations and what only moves it
// (Squeeze), of a GRU started from zero, a Concat of bounded values, and
// none for a GRU started from a given state, the LSTM's unbounded cell state, an LSTM whose output
// activation is a Relu, a Concat with an unbounded input or a Relu.
func TestValueBounds(t *testing.T) {
	m := boundModel(t)
	plan := preparePreset(t, m, "w8a8", PrepareOptions{})
	f := func(v float32) *float32 { return &v }
	cases := []struct {
		value  string
		lo, hi *float32
	}{
		{"lstm_y", f(-1), f(1)},
		{"lstm", f(-1), f(1)},
		{"squash", f(-1), f(1)},
		{"gru_zero_y", f(-1), f(1)},
		{"gru_y", nil, nil},
		{"lstm_c", nil, nil},
		{"relu_lstm_y", nil, nil},
		{"mixed", nil, nil},
		{"relu", nil, nil},
		{"x", nil, nil},
	}
	same := func(a, b *float32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	for _, c := range cases {
		tp := plan.Tensor(c.value)
		if tp == nil {
			t.Errorf("value %q is not planned", c.value)
			continue
		}
		var lo, hi *float32
		if tp.Bound != nil {
			lo, hi = tp.Bound.Min, tp.Bound.Max
		}
		if !same(lo, c.lo) || !same(hi, c.hi) {
			t.Errorf("value %q: bound %v, want %v", c.value, tp.Bound, Bound{Min: c.lo, Max: c.hi})
		}
	}
}

// tailSource is 4 samples of x whose values lie in ±0.1 except one
// position of one sample at 3: a rare tail every value computed from x
// carries.
type tailSource struct{}

func (tailSource) Samples() int { return 4 }
func (tailSource) Random() bool { return false }
func (tailSource) Close() error { return nil }
func (tailSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	x := tensor.New(tensor.Float, 16, end-start, 4)
	v := x.Float32s()
	for i := range v {
		v[i] = 0.1 * float32(math.Sin(float64(i+64*start)*0.37))
	}
	if start == 0 {
		v[5*(end-start)*4+1] = 3
	}
	return map[string]*tensor.Tensor{"x": x}, nil
}

// TestBoundedValuesKeepTheirTails calibrates boundModel with percentile
// ranges (99: half a percent cut from each tail) that cut the rare tail: the bounded values (the LSTM's hidden
// state, the Concat of a Tanh and a Sigmoid) keep their observed extremes,
// the unbounded ones (the Relu, the Concat with x) are still clipped.
func TestBoundedValuesKeepTheirTails(t *testing.T) {
	const text = `quantization_config:
  global_config:
    op_input_spec:
      "*": &a {dtype: uint8, qscheme: asymmetric, granularity: {type: per_tensor}, qparam_calculator: {type: percentile, percentile: 99}}
    op_output_spec:
      "*": *a
`
	cfg, err := config.Parse([]byte(text), "percentile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := boundModel(t)
	var stats *calibrate.Stats
	u := &Unit{Model: m, Config: cfg.Quant, Calibrate: EngineCalibrator("go", runtime.Options{Threads: 1}, tailSource{},
		calibrate.Options{BatchSize: 1}, func(s *calibrate.Stats) { stats = s })}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value   string
		bounded bool
	}{{"lstm_y", true}, {"squash", true}, {"relu", false}, {"mixed", false}} {
		tp := u.Plan.Tensor(c.value)
		o := stats.Tensor(c.value)
		if tp == nil || tp.Params == nil || tp.Params.Observed == nil || o == nil {
			t.Fatalf("value %q: not calibrated", c.value)
		}
		got := *tp.Params.Observed
		lo, hi := float32(o.Min[0]), float32(o.Max[0])
		kept := got.Min == lo && got.Max == hi
		if kept != c.bounded {
			t.Errorf("value %q: range [%g, %g] from observed [%g, %g]; want it kept: %v", c.value, got.Min, got.Max, lo, hi, c.bounded)
		}
		if !c.bounded && got.Max > hi/2 {
			t.Errorf("value %q: range [%g, %g] does not cut the tail at %g", c.value, got.Min, got.Max, hi)
		}
	}
}

package passes

import (
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// intrinsicModel feeds x through each op with a known output range, and
// two Relu branches into a Concat, a MaxPool and a GlobalAveragePool.
func intrinsicModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("intrinsics", 17)
	b.Input("x", tensor.Float, 1, 2, 4, 4).Output("y", tensor.Float, 1, 4, 1, 1)
	for _, o := range []string{"sig", "tanh", "soft", "relu6", "hardtanh", "clipmin", "clipwide"} {
		b.Output(o, tensor.Float, 1, 2, 4, 4)
	}
	b.Init("zero", []int64{}, []float32{0}).Init("six", []int64{}, []float32{6})
	b.Init("m2", []int64{}, []float32{-2}).Init("p2", []int64{}, []float32{2})
	b.Init("big", []int64{}, []float32{3.4e38})
	b.Node("Sigmoid", "sigmoid", []string{"x"}, []string{"sig"})
	b.Node("Tanh", "tanh_op", []string{"x"}, []string{"tanh"})
	b.Node("Softmax", "softmax", []string{"x"}, []string{"soft"}, testmodels.AttrInt("axis", -1))
	b.Node("Clip", "clip6", []string{"x", "zero", "six"}, []string{"relu6"})
	b.Node("Clip", "clip2", []string{"x", "m2", "p2"}, []string{"hardtanh"})
	b.Node("Clip", "clip0", []string{"x", "zero"}, []string{"clipmin"})
	b.Node("Clip", "clipbig", []string{"x", "m2", "big"}, []string{"clipwide"})
	b.Node("Relu", "relu_a", []string{"x"}, []string{"a"})
	b.Node("Neg", "neg", []string{"x"}, []string{"nx"})
	b.Node("Relu", "relu_b", []string{"nx"}, []string{"bb"})
	b.Node("Concat", "cat", []string{"a", "bb"}, []string{"c"}, testmodels.AttrInt("axis", 1))
	b.Node("MaxPool", "pool", []string{"c"}, []string{"p"}, testmodels.AttrInts("kernel_shape", 2, 2))
	b.Node("GlobalAveragePool", "gap", []string{"p"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func preparePreset(t *testing.T, m *onnxgraph.Model, preset string, opts PrepareOptions) *Plan {
	t.Helper()
	cfg, err := config.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	res, err := config.Resolve(cfg, m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(m, res, opts)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestOpIntrinsics pins the op-intrinsic rules: the qscheme and fixed range
// each op's output gets under the symmetric w8a8 preset and the asymmetric
// ort-x86 one, and the config's spec when the rules are off.
func TestOpIntrinsics(t *testing.T) {
	m := intrinsicModel(t)
	type want struct {
		scheme spec.QScheme
		fixed  *Range
	}
	r := func(lo, hi float32) *Range { return &Range{Min: lo, Max: hi} }
	sym, asym := spec.Symmetric, spec.Asymmetric
	cases := []struct {
		name   string
		preset string
		opts   PrepareOptions
		want   map[string]want
	}{
		{"w8a8", "w8a8", PrepareOptions{}, map[string]want{
			"x": {sym, nil}, "sig": {asym, r(0, 1)}, "tanh": {sym, r(-1, 1)}, "soft": {asym, r(0, 1)},
			"relu6": {asym, r(0, 6)}, "hardtanh": {sym, r(-2, 2)}, "clipmin": {asym, nil}, "clipwide": {sym, nil},
			"a": {asym, nil}, "bb": {asym, nil}, "c": {asym, nil}, "p": {asym, nil}, "y": {asym, nil}, "nx": {sym, nil},
		}},
		{"ort-x86", "ort-x86", PrepareOptions{}, map[string]want{
			"x": {asym, nil}, "sig": {asym, r(0, 1)}, "tanh": {sym, r(-1, 1)}, "soft": {asym, r(0, 1)},
			"relu6": {asym, r(0, 6)}, "hardtanh": {sym, r(-2, 2)}, "a": {asym, nil}, "y": {asym, nil},
		}},
		{"off", "w8a8", PrepareOptions{NoOpIntrinsics: true}, map[string]want{
			"sig": {sym, r(0, 1)}, "tanh": {sym, r(-1, 1)}, "soft": {sym, r(0, 1)},
			"relu6": {sym, nil}, "hardtanh": {sym, nil}, "a": {sym, nil}, "c": {sym, nil}, "y": {sym, nil},
		}},
		{"fp8 keeps its scheme", "fp8", PrepareOptions{}, map[string]want{
			"sig": {sym, r(0, 1)}, "relu6": {sym, r(0, 6)}, "a": {sym, nil},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := preparePreset(t, m, c.preset, c.opts)
			for v, w := range c.want {
				tp := plan.Tensor(v)
				if tp == nil {
					t.Errorf("value %q is not planned", v)
					continue
				}
				root := plan.Root(tp)
				if root.Spec.QScheme != w.scheme {
					t.Errorf("value %q: qscheme %s, want %s", v, root.Spec.QScheme, w.scheme)
				}
				switch {
				case w.fixed == nil && root.Fixed != nil:
					t.Errorf("value %q: fixed %v, want calibrated", v, *root.Fixed)
				case w.fixed != nil && (root.Fixed == nil || *root.Fixed != *w.fixed):
					t.Errorf("value %q: fixed %v, want %v", v, root.Fixed, *w.fixed)
				}
				if c.opts.NoOpIntrinsics && tp.Intrinsic != "" {
					t.Errorf("value %q: intrinsic %q with the rules off", v, tp.Intrinsic)
				}
			}
		})
	}
}

// TestOpIntrinsicVisible: an intrinsic that changes a spec is recorded on
// the tensor, in a note and in the plan dump.
func TestOpIntrinsicVisible(t *testing.T) {
	plan := preparePreset(t, intrinsicModel(t), "w8a8", PrepareOptions{})
	a := plan.Tensor("a")
	if !strings.Contains(a.Intrinsic, "Relu") {
		t.Errorf("Relu output: intrinsic %q", a.Intrinsic)
	}
	if x := plan.Tensor("x"); x.Intrinsic != "" {
		t.Errorf("graph input: intrinsic %q", x.Intrinsic)
	}
	found := false
	for _, n := range plan.Notes {
		if strings.Contains(n, `value "a"`) && strings.Contains(n, "asymmetric") && strings.Contains(n, "asymmetric, not symmetric") {
			found = true
		}
	}
	if !found {
		t.Errorf("no note for the asymmetric Relu output in %q", plan.Notes)
	}
	var b strings.Builder
	if err := plan.Dump(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  intrinsic Relu output is non-negative: asymmetric\n") {
		t.Errorf("dump lacks the intrinsic line:\n%s", b.String())
	}
}

// TestConcatShare: by default both Relu inputs of the Concat use the
// Concat output's qparams; ConcatOwnQParams keeps theirs.
func TestConcatShare(t *testing.T) {
	m := intrinsicModel(t)
	for _, c := range []struct {
		name  string
		opts  PrepareOptions
		share bool
	}{{"default", PrepareOptions{}, true}, {"own", PrepareOptions{ConcatOwnQParams: true}, false}} {
		t.Run(c.name, func(t *testing.T) {
			plan := preparePreset(t, m, "w8a8", c.opts)
			out := plan.Tensor("c")
			for _, v := range []string{"a", "bb"} {
				if got := plan.Root(plan.Tensor(v)) == out; got != c.share {
					t.Errorf("input %q shares the concat output's qparams: %v, want %v", v, got, c.share)
				}
			}
		})
	}
}

// TestUnusedCalculatorIsNoted: a calculator other than the default that a
// user's rule names for values whose range is fixed (Sigmoid, Tanh,
// Softmax, bounded Clips) gets one note for the rule, naming the count and
// the first value; a spec with the default calculator, or a preset's, gets
// none.
func TestUnusedCalculatorIsNoted(t *testing.T) {
	m := intrinsicModel(t)
	prep := func(yaml string) *Plan {
		t.Helper()
		cfg, err := config.Parse([]byte(yaml), "user.yaml")
		if err != nil {
			t.Fatal(err)
		}
		res, err := config.Resolve(cfg.Quant, m.Graph)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := Prepare(m, res, PrepareOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	count := func(notes []string) (n int, text string) {
		for _, s := range notes {
			if strings.Contains(s, "is not used for") {
				n, text = n+1, s
			}
		}
		return n, text
	}
	const named = "quantization_config:\n  global_config:\n    op_output_spec: {\"*\": {dtype: int8, qscheme: symmetric, qparam_calculator: {type: percentile, percentile: 99.9}}}\n"
	n, text := count(prep(named).Notes)
	if n != 1 || !strings.Contains(text, "user.yaml:3") || !strings.Contains(text, "percentile") || !strings.Contains(text, `"sig"`) {
		t.Errorf("a named calculator on fixed ranges: %d notes, %q; want one naming user.yaml:3, the calculator and the first value", n, text)
	}
	const unnamed = "quantization_config:\n  global_config:\n    op_output_spec: {\"*\": {dtype: int8, qscheme: symmetric}}\n"
	if n, text := count(prep(unnamed).Notes); n != 0 {
		t.Errorf("no calculator named: %d notes (%q), want none", n, text)
	}
	if n, text := count(preparePreset(t, m, "w8a8", PrepareOptions{}).Notes); n != 0 {
		t.Errorf("preset w8a8: %d notes (%q), want none", n, text)
	}
}

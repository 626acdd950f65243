package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestBadConfigs pins the message of each kind of bad config: every error
// at once, positioned, sorted by line. The schema judges each as the
// validator does, but for the validate-only rules.
func TestBadConfigs(t *testing.T) {
	sch := compiledSchema(t)
	tests := []struct{ name, text string }{
		{"unknown top-level key", "modle: m.onnx\n"},
		{"unknown module key", "quantization_config:\n  global_config:\n    op_inptu_spec: null\n"},
		{"unknown spec key", "quantization_spec:\n  a: {dtype: int8, granulatiry: {type: per_tensor}}\n"},
		{"unknown dtype", "quantization_spec:\n  a: {dtype: int7}\n"},
		{"unknown scale dtype", "quantization_spec:\n  a: {dtype: int8, scale_dtype: float8_e8m0}\n  b: {dtype: int8, scale_dtype: int8}\n"},
		{"unknown qscheme", "quantization_spec:\n  a: {dtype: int8, qscheme: symetric}\n"},
		{"unknown granularity", "quantization_spec:\n  a: {dtype: int8, granularity: {type: per_chanel}}\n"},
		{"block_size zero", "quantization_spec:\n  a: {dtype: int4, granularity: {type: per_block, block_size: 0}}\n"},
		{"per_block without block_size", "quantization_spec:\n  a: {dtype: int4, granularity: {type: per_block}}\n"},
		{"per_block on activations", "quantization_config:\n  global_config:\n    op_input_spec:\n      \"*\": {dtype: int4, granularity: {type: per_block, block_size: 32}}\n"},
		{"per_channel activation without axis", "quantization_config:\n  global_config:\n    op_output_spec:\n      \"*\": {dtype: int8, granularity: {type: per_channel}}\n"},
		{"axis out of range", "quantization_spec:\n  a: {dtype: int8, granularity: {type: per_channel, axis: 9}}\n"},
		{"wrong type", "threads: many\ncalibration:\n  samples: -1\n  batch_size: 1.5\nengine: onnx\n"},
		{"bad module regex", "quantization_config:\n  module_name_configs:\n    \"layer1.(0\": null\n"},
		{"bad op regex", "quantization_config:\n  global_config:\n    op_name_config:\n      \"[conv\": null\n"},
		{"mixed keys", "quantization_config:\n  global_config:\n    op_input_spec:\n      0: {dtype: int8}\n      X: {dtype: int8}\n"},
		{"index key in state spec", "quantization_config:\n  global_config:\n    op_state_spec:\n      1: {dtype: int8}\n"},
		{"unknown op type", "quantization_config:\n  global_config:\n    op_type_config:\n      sofmax: null\n"},
		{"module key in op config", "quantization_config:\n  global_config:\n    op_type_config:\n      conv2d:\n        op_type_config: {}\n"},
		{"unknown preset", "quantization_config:\n  preset: w3a8\n"},
		{"asymmetric fp8", "quantization_spec:\n  a: {dtype: float8_e4m3fn, qscheme: asymmetric}\n"},
		{"duplicate key", "model: a.onnx\nmodel: b.onnx\n"},
		{"yaml syntax", "quantization_config:\n  global_config: [\n"},
		{"two documents", "model: a.onnx\n---\nmodel: b.onnx\n"},
		{"not a mapping", "- a\n- b\n"},
		{"calculator parameter that does not apply", "quantization_spec:\n  a: {dtype: int8, qparam_calculator: {type: static, averaging_constant: 0.1}}\n"},
		{"only_for as a list", "quantization_config:\n  preset: w4\n  only_for: [torch.nn.modules.linear.Linear]\n"},
		{"unknown algorithm", "algorithms:\n  cross_layer_equalisation: true\n"},
		{"bad algorithm settings", "algorithms:\n  bias_correction: {samples: 0, exclude: [\"(\"], iterations: 3}\n  cross_layer_equalization: yes please\n"},
		{"bad gptq settings", "algorithms:\n  gptq: {damp: 0, samples: -2, block_size: 128}\n"},
		{"gptq damp not a number", "algorithms:\n  gptq: {damp: high}\n"},
		{"gptq act_order not a boolean", "algorithms:\n  gptq: {act_order: desc}\n"},
		{"bad smoothquant settings", "algorithms:\n  smoothquant: {alpha: 1.5, samples: 0}\n"},
		{"bad awq settings", "algorithms:\n  awq: {grid: 0, samples: -1, clip: true}\n"},
		{"bad high_bias_absorption", "algorithms:\n  cross_layer_equalization: {high_bias_absorption: 3}\n"},
		{"gated_min_gain not positive", "algorithms:\n  cross_layer_equalization: {gated_min_gain: -1}\n"},
		{"gated not a boolean", "algorithms:\n  cross_layer_equalization: {gated: silu}\n"},
		{"bad adaround settings", "algorithms:\n  adaround: {iterations: 0, learning_rate: -1, warmup: 1, beta_start: 2, beta_end: 20, regularisation: 0.1}\n"},
		{"many errors sorted", "engine: gpu\nquantization_spec:\n  a: {dtype: int9}\nquantization_config:\n  global_confg: {}\n"},
	}
	var b strings.Builder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.text), "bad.yaml")
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("Parse accepted it (err %v)", err)
			}
			for i, d := range list {
				if d.Line < 1 || d.Col < 1 || d.File != "bad.yaml" {
					t.Errorf("error without a position: %+v", d)
				}
				if i > 0 && d.Line < list[i-1].Line {
					t.Errorf("errors not sorted by line: %v", list)
				}
			}
			if _, problems := judge(sch, "bad.yaml", []byte(tt.text)); problems != nil {
				t.Errorf("the schema and config validate disagree: %s", strings.Join(problems, "; "))
			}
			fmt.Fprintf(&b, "== %s\n%s\n", tt.name, err)
		})
	}
	checkGolden(t, "errors.txt", b.String())
}

// TestResolveErrors: specs that only fail against a model, positioned at
// the rule.
func TestResolveErrors(t *testing.T) {
	b := testmodels.New("add", 17)
	b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
	b.RandomInit("c", 1, 2, 3)
	b.Node("Add", "/blk/Add", []string{"x", "c"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, text, want string }{
		{"per_channel state without default axis",
			"quantization_config:\n  global_config:\n    op_state_spec:\n      \"*\": {dtype: int8, granularity: {type: per_channel}}\n",
			`c.yaml:4:7: node "/blk/Add" (Add) other "c": per_channel without axis: Add has no default axis for this tensor (rank 2); set granularity.axis`},
		{"axis out of range for the tensor",
			"quantization_config:\n  global_config:\n    op_state_spec:\n      \"*\": {dtype: int8, granularity: {type: per_channel, axis: -3}}\n",
			`c.yaml:4:7: node "/blk/Add" (Add) other "c": granularity axis -3 is out of range for a tensor of rank 2`},
		{"activation axis out of range",
			"quantization_config:\n  global_config:\n    op_output_spec:\n      0: {dtype: int8, granularity: {type: per_channel, axis: 2}}\n",
			`c.yaml:4:7: node "/blk/Add" (Add) output 0 "y": granularity axis 2 is out of range for a tensor of rank 2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "c.yaml", tt.text)
			_, err := Resolve(cfg.Quant, m.Graph)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestDidYouMean(t *testing.T) {
	for in, want := range map[string]string{"granulatiry": "granularity", "int7": "int8", "xyzzy": "", "per_chanel": "per_channel"} {
		cands := append(specFields.names(), "int8", "per_channel")
		if got := didYouMean(in, cands); got != want {
			t.Errorf("didYouMean(%q) = %q, want %q", in, got, want)
		}
	}
}

// fuzzConfigSeeds seed FuzzLoadConfig (with the presets); the schema test
// judges them too.
var fuzzConfigSeeds = []string{
	"",
	"a: &a [*a]\n",
	"x: &x {<<: *x}\n",
	"quantization_config:\n  preset: w4\n  without: {module_names: ['(']}\n",
	"quantization_spec:\n  a: &a {dtype: int8}\nquantization_config:\n  global_config:\n    op_input_spec: {0: *a, '*': null}\n",
	"kmeans_palettization_config:\n  global_config: {n_bits: 2, granularity: per_grouped_channel, group_size: 8, cluster_dim: 2}\n  module_name_configs:\n    fc: {lut_dtype: int8, op_type_config: {Gemm: null}}\n",
	"quantization_config:\n  execution_mode: eager\n  module_name_object_type_order_configs:\n    - {module_name: submodule_a, object_type: torch.add, index: 1, config: {}}\n",
	"quantization_config:\n  module_name_configs:\n    'sub.*_[ab]': {op_type_config: {aten.linear.default: {op_state_spec: {bias: null}}}}\n    decoder: null\n",
}

// FuzzLoadConfig: the loader never panics, and every error has a position.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range fuzzConfigSeeds {
		f.Add([]byte(s))
	}
	for _, name := range PresetNames() {
		b, _ := PresetYAML(name)
		f.Add(b)
	}
	models := []*onnxgraph.Model{torchExport(f, "dynamo"), torchExport(f, "torchscript")}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "fuzz.yaml")
		if err == nil {
			// A valid config resolves on the torch exports without
			// panicking; errors are positioned.
			for _, m := range models {
				if _, err := Resolve(cfg.Quant, m.Graph); err != nil {
					var list ErrorList
					if !errors.As(err, &list) {
						t.Fatalf("resolve error is not an ErrorList: %v", err)
					}
				}
			}
			return
		}
		var list ErrorList
		if !errors.As(err, &list) {
			t.Fatalf("error is not an ErrorList: %v", err)
		}
		for _, d := range list {
			if d.Line < 1 || d.Col < 1 || d.File != "fuzz.yaml" {
				t.Fatalf("error without a position: %+v", d)
			}
		}
	})
}

// TestInferredBoundaryOrder: index keys on a submodule's inputs rely on
// first-use order, which a warning spells out; on the root, whose inputs
// are the graph inputs in the forward's order, they need none.
func TestInferredBoundaryOrder(t *testing.T) {
	b := testmodels.New("add", 17)
	b.Input("a", tensor.Float, 2, 3).Input("b", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
	b.Node("Mul", "/blk/Mul", []string{"b", "b"}, []string{"bb"})
	b.Node("Add", "/blk/Add", []string{"a", "bb"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, text, want string }{
		{"submodule",
			"quantization_config:\n  module_name_configs:\n    blk:\n      module_input_spec: {0: {dtype: int8}, 1: {dtype: int8}}\n",
			`c.yaml:4:27: module_input_spec index keys on module "blk": its inputs are numbered by first use (0 = b, 1 = a), not by the forward's signature`},
		{"root",
			"quantization_config:\n  global_config:\n    module_input_spec: {0: {dtype: int8}, 1: {dtype: int8}}\n",
			""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Resolve(mustParse(t, "c.yaml", tt.text).Quant, m.Graph)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range res.Warnings {
				got = append(got, w.Error())
			}
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)) {
				t.Errorf("warnings = %q, want %q", got, tt.want)
			}
		})
	}
}

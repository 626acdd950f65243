package config

import (
	"os"
	"path/filepath"
	"testing"
)

// specAt returns the resolved spec string of one slot of one node.
func specAt(t *testing.T, res *Resolution, node, label string) string {
	t.Helper()
	nr := res.Node(node)
	if nr == nil {
		t.Fatalf("no node %q", node)
	}
	for _, tr := range nr.Tensors {
		if tr.Label() == label {
			if tr.Spec == nil {
				return "none"
			}
			return tr.Spec.DType.String()
		}
	}
	t.Fatalf("node %q has no slot %q", node, label)
	return ""
}

// TestPrecedence: module name > module type > global; op name > op type >
// module defaults; module boundary specs override op specs; a null at one
// level is re-enabled by a more specific level. Dtypes tell the levels apart.
func TestPrecedence(t *testing.T) {
	const specs = `
quantization_spec:
  i4: &i4 {dtype: int4, granularity: {type: per_tensor}}
  i16: &i16 {dtype: int16}
  u8: &u8 {dtype: uint8, qscheme: asymmetric}
  f8: &f8 {dtype: float8_e4m3fn}
`
	tests := []struct {
		name, cfg         string
		dynamo            bool
		node, slot, dtype string
	}{
		{"module name beats module type", specs + `
quantization_config:
  module_type_configs:
    torch.nn.modules.linear.Linear: {op_input_spec: {"*": *i4}}
  module_name_configs:
    fc: {op_input_spec: {"*": *i16}}
`, true, "node_Gemm_5", "input 0", "int16"},
		{"module type beats global", specs + `
quantization_config:
  global_config: {op_input_spec: {"*": *u8}}
  module_type_configs:
    torch.nn.modules.linear.Linear: {op_input_spec: {"*": *i4}}
`, true, "node_Gemm_5", "input 0", "int4"},
		{"global elsewhere", specs + `
quantization_config:
  global_config: {op_input_spec: {"*": *u8}}
  module_type_configs:
    torch.nn.modules.linear.Linear: {op_input_spec: {"*": *i4}}
`, true, "node_Relu_1", "input 0", "uint8"},
		{"a module name beats an earlier regex", specs + `
quantization_config:
  module_name_configs:
    "model\\..*": {op_input_spec: {"*": *i4}}
    "model.selfattention.layer.0": {op_input_spec: {"*": *i16}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int16"},
		{"first matching regex wins", specs + `
quantization_config:
  module_name_configs:
    "model\\.self.*": {op_input_spec: {"*": *i4}}
    "model\\..*": {op_input_spec: {"*": *i16}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int4"},
		{"a regex matches a prefix", specs + `
quantization_config:
  module_name_configs:
    "mod.*l": {op_input_spec: {"*": *i4}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int4"},
		{"a plain name's dot is a dot", specs + `
quantization_config:
  module_name_configs:
    "model.selfattention.layer_0": {op_input_spec: {"*": *i4}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int8"},
		{"a module name covers its children over their type", specs + `
quantization_config:
  module_type_configs:
    torch.nn.modules.conv.ConvTranspose2d: {op_state_spec: {weight: *i4}}
  module_name_configs:
    decoder: null
`, true, "node_ConvTranspose_2", "weight", "none"},
		{"a child's name beats its parent's name", specs + `
quantization_config:
  module_name_configs:
    decoder: null
    decoder.deconv1: {op_state_spec: {weight: *i4}}
`, true, "node_ConvTranspose_2", "weight", "int4"},
		{"inner module config beats the outer one", specs + `
quantization_config:
  module_name_configs:
    model.selfattention: {op_input_spec: {"*": *i4}}
    model.selfattention.layer.0: {op_input_spec: {"*": *i16}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int16"},
		{"submodules inherit", specs + `
quantization_config:
  module_name_configs:
    model: {op_input_spec: {"*": *i4}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int4"},
		{"op name beats op type", specs + `
quantization_config:
  global_config:
    op_type_config:
      MatMul: {op_input_spec: {"*": *i4}}
    op_name_config:
      "linear_2[0-9]": {op_input_spec: {"*": *i16}}
`, false, "linear_23", "input 0", "int16"},
		{"op type beats module defaults", specs + `
quantization_config:
  global_config:
    op_input_spec: {"*": *u8}
    op_type_config:
      matmul: {op_input_spec: {"*": *i4}}
`, false, "linear_23", "input 0", "int4"},
		{"exact op type beats alias", specs + `
quantization_config:
  global_config:
    op_type_config:
      linear: {op_input_spec: {"*": *i4}}
      MatMul: {op_input_spec: {"*": *i16}}
`, false, "linear_23", "input 0", "int16"},
		{"conditional alias beats plain alias", specs + `
quantization_config:
  global_config:
    op_type_config:
      matmul: {op_input_spec: {"*": *i4}}
      linear: {op_input_spec: {"*": *i16}}
`, false, "linear_23", "input 0", "int16"},
		{"conv2d matches a 4-D weight", specs + `
quantization_config:
  global_config:
    op_type_config:
      conv2d: {op_state_spec: {weight: *i16}}
`, false, "/conv1/Conv", "weight", "int16"},
		{"conv1d does not", specs + `
quantization_config:
  global_config:
    op_type_config:
      conv1d: {op_state_spec: {weight: *i16}}
`, false, "/conv1/Conv", "weight", "int8"},
		{"embedding is a Gather on a table", specs + `
quantization_config:
  global_config:
    op_type_config:
      embedding: {op_state_spec: {weight: *i4}}
`, false, "/embed/Gather", "weight", "int4"},
		{"index key beats star", specs + `
quantization_config:
  global_config:
    op_input_spec: {"*": *u8, 1: *i16}
`, false, "/model/selfattention/layer.0/Mul", "input 1", "int16"},
		{"schema name key", specs + `
quantization_config:
  global_config:
    op_input_spec: {"*": *u8, B: *i16}
`, false, "/model/selfattention/layer.0/Mul", "input 1", "int16"},
		{"null key disables one input", specs + `
quantization_config:
  global_config:
    op_input_spec: {"*": *u8, 0: null}
`, false, "/model/selfattention/layer.0/Mul", "input 0", "none"},
		{"boundary input overrides op spec", specs + `
quantization_config:
  module_name_configs:
    model.selfattention:
      op_input_spec: {"*": *u8}
      module_input_spec: {0: *i16}
`, false, "/model/selfattention/layer.0/Mul", "input 0", "int16"},
		{"boundary leaves internal tensors alone", specs + `
quantization_config:
  module_name_configs:
    model.selfattention:
      op_input_spec: {"*": *u8}
      module_input_spec: {0: *i16}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "uint8"},
		{"boundary output", specs + `
quantization_config:
  module_name_configs:
    model.selfattention:
      op_output_spec: null
      module_output_spec: {"*": *f8}
`, false, "/model/selfattention/Add", "output 0", "float8_e4m3fn"},
		{"module state spec overrides op state", specs + `
quantization_config:
  module_name_configs:
    fc:
      module_state_spec: {bias: *i16}
`, false, "/fc/Gemm", "bias", "int16"},
		{"boundary null disables", specs + `
quantization_config:
  module_name_configs:
    model.selfattention:
      module_input_spec: null
`, false, "/model/selfattention/layer.0/Mul", "input 0", "none"},
		{"global null re-enabled by module type", specs + `
quantization_config:
  global_config: null
  module_type_configs:
    torch.nn.modules.linear.Linear: {op_state_spec: {weight: *i4}}
`, true, "linear_23", "weight", "int4"},
		{"global null stays null elsewhere", specs + `
quantization_config:
  global_config: null
  module_type_configs:
    torch.nn.modules.linear.Linear: {op_state_spec: {weight: *i4}}
`, true, "node_Conv_0", "weight", "none"},
		{"module null re-enabled by inner module name", specs + `
quantization_config:
  module_name_configs:
    model: null
    model.selfattention.layer.0: {op_input_spec: {"*": *i16}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int16"},
		{"module null covers the rest of the scope", specs + `
quantization_config:
  module_name_configs:
    model: null
    model.selfattention.layer.0: {op_input_spec: {"*": *i16}}
`, false, "/model/selfattention/Add", "input 0", "none"},
		{"op type null re-enabled by op name", specs + `
quantization_config:
  global_config:
    op_type_config: {MatMul: null}
    op_name_config: {linear_23: {op_state_spec: {weight: *i4}}}
`, false, "linear_23", "weight", "int4"},
		{"op config fields default to W8A8, not the module's", specs + `
quantization_config:
  global_config:
    op_input_spec: {"*": *u8}
    op_type_config: {Softmax: {op_output_spec: null}}
`, false, "/model/selfattention/layer.0/Softmax", "input 0", "int8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustResolve(t, mustParse(t, "p.yaml", tt.cfg).Quant, tt.dynamo)
			if got := specAt(t, res, tt.node, tt.slot); got != tt.dtype {
				t.Errorf("%s %s = %s, want %s\n%s", tt.node, tt.slot, got, tt.dtype, dump(res))
			}
		})
	}
}

// TestWarnings: keys that match nothing are warnings, with positions.
func TestWarnings(t *testing.T) {
	res := mustResolve(t, mustParse(t, "w.yaml", `
quantization_config:
  global_config:
    op_type_config: {LSTM: null}
    op_name_config: {linear_24: null}
  module_type_configs:
    torch.nn.modules.linear.Linear: null
  module_name_configs:
    decoder.deconv2: null
`).Quant, false)
	checkGolden(t, "warnings.txt", dump(&Resolution{Warnings: res.Warnings}))
	if len(res.Warnings) != 4 {
		t.Errorf("want 4 warnings, got %d", len(res.Warnings))
	}
}

// TestPresets: every preset parses, resolves on the guide model, and
// configs/presets holds a config equal to it.
func TestPresets(t *testing.T) {
	want := []string{"accurate", "fp8", "mxfp4", "ort-x86", "w4", "w4-accurate", "w4a8", "w8", "w8a8"}
	if got := PresetNames(); len(got) != len(want) {
		t.Fatalf("presets = %v, want %v", got, want)
	}
	for _, name := range want {
		t.Run(name, func(t *testing.T) {
			p, err := Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			res := mustResolve(t, p, false)
			checkGolden(t, "preset-"+name+".txt", dump(res))
			file := filepath.Join("..", "..", "configs", "presets", name+".yaml")
			cfg, err := LoadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := specsOf(res), specsOf(mustResolve(t, cfg.Quant, false)); a != b {
				t.Errorf("%s resolves differently from the preset", file)
			}
			pc, err := PresetConfig(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, alg := range AlgorithmNames() {
				if pc.Algorithms.enabled(alg) != cfg.Algorithms.enabled(alg) {
					t.Errorf("%s: algorithm %s is %v in the preset, %v in the file", file, alg, pc.Algorithms.enabled(alg), cfg.Algorithms.enabled(alg))
				}
			}
		})
	}
}

// TestSettings: flag > env > file > default, file paths relative to the
// config's directory.
func TestSettings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	text := "model: m.onnx\nengine: ort\ncalibration:\n  data: [a.npy, /abs/b.npy, 'images=calib.npy']\n  samples: 64\n  batch_size: 4\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cfg.Settings(Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != filepath.Join(dir, "m.onnx") || s.Engine != "ort" || s.Samples != 64 || s.BatchSize != 4 ||
		len(s.Data) != 3 || s.Data[0] != filepath.Join(dir, "a.npy") || s.Data[1] != "/abs/b.npy" ||
		s.Data[2] != "images="+filepath.Join(dir, "calib.npy") {
		t.Errorf("file settings = %+v", s)
	}
	t.Setenv("COREAIQ_CALIBRATION_SAMPLES", "32")
	t.Setenv("COREAIQ_ENGINE", "go")
	t.Setenv("COREAIQ_THREADS", "3")
	samples := 16
	s, err = cfg.Settings(Overrides{Samples: &samples})
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 16 || s.Engine != "go" || s.Threads != 3 || s.Model != filepath.Join(dir, "m.onnx") || s.BatchSize != 4 {
		t.Errorf("layered settings = %+v", s)
	}
	var none *Config
	s, err = none.Settings(Overrides{})
	if err != nil || s.BatchSize != DefaultBatchSize || s.Samples != 32 {
		t.Errorf("defaults = %+v, %v", s, err)
	}
	t.Setenv("COREAIQ_ENGINE", "cuda")
	if _, err := none.Settings(Overrides{}); err == nil {
		t.Error("engine cuda accepted")
	}
}

// TestOverriddenEntries: an only_for or without target that a later entry
// replaces for the same module does nothing, and a notice says so.
func TestOverriddenEntries(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"without then module_name_configs",
			"quantization_config:\n  preset: w8a8\n  without: {module_names: [decoder]}\n  module_name_configs:\n    decoder: {}\n",
			"o.yaml:3:28: quantization_config.without.decoder does nothing: quantization_config.module_name_configs.decoder (line 5) sets the same module"},
		{"only_for then without",
			"quantization_config:\n  preset: w8a8\n  only_for: {module_types: [Conv2d]}\n  without: {module_types: [Conv2d]}\n",
			"o.yaml:3:29: quantization_config.only_for.Conv2d does nothing: quantization_config.without.Conv2d (line 4) sets the same module"},
		{"distinct modules", "quantization_config:\n  preset: w8a8\n  without: {module_names: [decoder]}\n  module_name_configs:\n    encoder: {}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "o.yaml", tt.text)
			var got []string
			for _, n := range cfg.Notices {
				got = append(got, n.Error())
			}
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) != 1 || got[0] != tt.want) {
				t.Errorf("notices = %q, want %q", got, tt.want)
			}
		})
	}
}

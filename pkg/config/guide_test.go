package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels/torchexport"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

func mustParse(t *testing.T, name, text string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(text), name)
	if err != nil {
		t.Fatalf("Parse(%s):\n%v", name, err)
	}
	return cfg
}

func mustResolve(t *testing.T, cfg *QuantizerConfig, dynamo bool) *Resolution {
	t.Helper()
	res, err := Resolve(cfg, guideModel(t, dynamo).Graph)
	if err != nil {
		t.Fatalf("Resolve:\n%v", err)
	}
	return res
}

// torchExport loads testdata/torch/guide_<variant>.onnx, the guide-shaped
// model as torch's dynamo or TorchScript exporter writes it.
func torchExport(t testing.TB, variant string) *onnxgraph.Model {
	t.Helper()
	m, err := onnxgraph.Load(filepath.Join("testdata", "torch", "guide_"+variant+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTorchExportsAreGenerated: the committed export files are what
// internal/testmodels/torchexport writes (go generate ./pkg/config).
func TestTorchExportsAreGenerated(t *testing.T) {
	for variant, dynamo := range map[string]bool{"dynamo": true, "torchscript": false} {
		got, err := os.ReadFile(filepath.Join("testdata", "torch", "guide_"+variant+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, torchexport.GuideNet(dynamo)) {
			t.Errorf("testdata/torch/guide_%s.onnx is stale: run go generate ./pkg/config", variant)
		}
	}
}

// TestGuideExamples: every YAML example of the guide parses, validates and
// resolves to a golden plan on the guide-shaped model, in both its
// TorchScript and dynamo exports.
func TestGuideExamples(t *testing.T) {
	files, err := filepath.Glob("testdata/guide/*.yaml")
	if err != nil || len(files) < 11 {
		t.Fatalf("want the guide's 11 examples, found %d (%v)", len(files), err)
	}
	for _, f := range files {
		for _, variant := range []string{"torchscript", "dynamo"} {
			name := strings.TrimSuffix(filepath.Base(f), ".yaml")
			t.Run(name+"/"+variant, func(t *testing.T) {
				cfg, err := LoadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				res, err := Resolve(cfg.Quant, torchExport(t, variant).Graph)
				if err != nil {
					t.Fatal(err)
				}
				checkGolden(t, name+"."+variant+".txt", dump(res))
			})
		}
	}
}

// TestGuideExamplesInConfigs: configs/guide holds the same files, with the
// schema modeline first.
func TestGuideExamplesInConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/guide/*.yaml")
	for _, f := range files {
		text, _ := os.ReadFile(f)
		want := schemaModeline + "\n" + string(text)
		got, err := os.ReadFile(filepath.Join("..", "..", "configs", "guide", filepath.Base(f)))
		if err != nil {
			t.Errorf("configs/guide is missing %s: %v", filepath.Base(f), err)
			continue
		}
		if string(got) != want {
			t.Errorf("configs/guide/%s differs from testdata/guide", filepath.Base(f))
		}
	}
}

// specsOf flattens a resolution to "node slot: spec" lines, ignoring rules.
func specsOf(res *Resolution) string {
	var b strings.Builder
	for _, nr := range res.Nodes {
		for _, t := range nr.Tensors {
			b.WriteString(nr.Node.Name + " " + t.Label() + ": " + t.Spec.String() + "\n")
		}
	}
	return b.String()
}

func specsOfText(t *testing.T, text string, dynamo bool) string {
	t.Helper()
	return specsOf(mustResolve(t, mustParse(t, "c.yaml", text).Quant, dynamo))
}

// TestEquivalences checks the guide's "is equivalent to" statements.
func TestEquivalences(t *testing.T) {
	explicitDefault := `
quantization_spec:
  act: &act {dtype: int8, qscheme: symmetric, granularity: {type: per_tensor}, qparam_calculator: moving_average}
  w: &w {dtype: int8, qscheme: symmetric, granularity: {type: per_channel}, qparam_calculator: static}
quantization_config:
  global_config:
    op_input_spec: {"*": *act}
    op_output_spec: {"*": *act}
    op_state_spec: {weight: *w}
`
	tests := []struct {
		name   string
		a, b   string
		dynamo bool
	}{
		{"empty config is W8A8", "", explicitDefault, false},
		{"empty quantization_config is W8A8", "quantization_config:\n", explicitDefault, false},
		{"empty global_config fields are defaults", "quantization_config:\n  global_config:\n    op_type_config: {}\n", explicitDefault, false},
		{"w8a8 preset is the default", "quantization_config: {preset: w8a8}", "", false},
		{"torch. prefix", "quantization_config:\n  global_config:\n    op_state_spec:\n      weight: {dtype: torch.int8, granularity: {type: per_channel}}\n", "", false},
		{"only_for equals setter form", `
quantization_config:
  preset: w4
  only_for:
    module_types: [torch.nn.modules.linear.Linear, torch.nn.modules.conv.Conv2d]
`, `
quantization_config:
  global_config: null
  module_type_configs:
    torch.nn.modules.linear.Linear: {preset: w4}
    torch.nn.modules.conv.Conv2d: {preset: w4}
`, true},
		{"without equals setter form", `
quantization_config:
  preset: w4
  without:
    module_types: [torch.nn.modules.sparse.Embedding]
    module_names: [fc]
`, `
quantization_config:
  preset: w4
  module_type_configs:
    torch.nn.modules.sparse.Embedding: null
  module_name_configs:
    fc: null
`, true},
		{"w4 then embedding w8 (chaining example)", `
quantization_config:
  preset: w4
  module_type_configs:
    torch.nn.modules.sparse.Embedding: {preset: w8}
`, `
quantization_spec:
  w4: &w4 {dtype: int4, granularity: {type: per_block, block_size: 32}}
  w8: &w8 {dtype: int8, granularity: {type: per_channel}}
quantization_config:
  global_config: {op_input_spec: null, op_output_spec: null, op_state_spec: {weight: *w4}}
  module_type_configs:
    torch.nn.modules.sparse.Embedding: {op_input_spec: null, op_output_spec: null, op_state_spec: {weight: *w8}}
`, true},
		{"skip linear as op equals as module (dynamo)", "quantization_config:\n  global_config:\n    op_type_config:\n      linear: null\n",
			"quantization_config:\n  module_type_configs:\n    torch.nn.modules.linear.Linear: null\n", true},
		{"merge keys", `
quantization_spec:
  base: &base {dtype: int8, granularity: {type: per_tensor}}
  act: &act
    <<: *base
    qparam_calculator: moving_average
quantization_config:
  global_config:
    op_input_spec: {"*": *act}
`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := specsOfText(t, tt.a, tt.dynamo), specsOfText(t, tt.b, tt.dynamo)
			if a != b {
				t.Errorf("configs differ:\n--- a\n%s--- b\n%s", a, b)
			}
		})
	}
}

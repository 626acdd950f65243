package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
)

// TestConfigValidateAccepts every guide example and every file in configs/.
func TestConfigValidateAccepts(t *testing.T) {
	var files []string
	for _, pattern := range []string{"configs/*.yaml", "configs/*/*.yaml", "pkg/config/testdata/guide/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(testutil.RepoRoot(), pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 25 {
		t.Fatalf("found only %d config files", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, testutil.RepoRoot()+"/"), func(t *testing.T) {
			code, out, errOut := runCLI(t, "config", "validate", f)
			if code != ExitOK || !strings.Contains(out, "valid") {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
		})
	}
}

// TestConfigValidateRejects malformed configs with positioned messages and
// exit 2.
func TestConfigValidateRejects(t *testing.T) {
	code, out, errOut := runCLI(t, "config", "validate", "testdata/config/bad.yaml")
	if code != ExitUsage || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	testutil.Golden(t, "testdata/config/bad.golden", []byte(errOut))

	dir := t.TempDir()
	p := filepath.Join(dir, "syntax.yaml")
	if err := os.WriteFile(p, []byte("quantization_config: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, "config", "validate", p)
	if code != ExitUsage || !strings.Contains(errOut, p+":1:1: invalid YAML") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "config", "validate", filepath.Join(dir, "missing.yaml"))
	if code == ExitOK || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}

// TestConfigSchemaCommand: config schema prints the generated schema, a
// JSON document in the draft it names; arguments are a usage error.
func TestConfigSchemaCommand(t *testing.T) {
	code, out, errOut := runCLI(t, "config", "schema")
	if code != ExitOK || out != string(config.JSONSchema()) {
		t.Fatalf("exit %d, stderr %q, stdout is not config.JSONSchema()", code, errOut)
	}
	var doc struct {
		Schema     string         `json:"$schema"`
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Schema != config.SchemaDraft || doc.Properties["quantization_config"] == nil {
		t.Errorf("schema document: %v, $schema %q", err, doc.Schema)
	}
	if code, _, _ := runCLI(t, "config", "schema", "extra"); code != ExitUsage {
		t.Errorf("config schema extra: exit %d, want %d", code, ExitUsage)
	}
}

func TestPresetsCommand(t *testing.T) {
	code, out, _ := runCLI(t, "presets")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	testutil.Golden(t, "testdata/config/presets.golden", []byte(out))
	code, out, _ = runCLI(t, "presets", "mxfp4")
	if code != ExitOK || !strings.Contains(out, "scale_dtype: float8_e8m0fnu") {
		t.Errorf("presets mxfp4: exit %d\n%s", code, out)
	}
	code, _, errOut := runCLI(t, "presets", "w3")
	if code != ExitUsage || !strings.Contains(errOut, `unknown preset "w3"`) {
		t.Errorf("presets w3: exit %d, %s", code, errOut)
	}
}

// TestInspectConfig: module_name_configs on TorchScript scopes resolve, and
// the output shows which rule chose each spec.
func TestInspectConfig(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "cnn.onnx")
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			code, out, errOut := runCLI(t, "inspect", model, "--config", "testdata/config/cnn_scopes.yaml", "--format", format)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			testutil.Golden(t, "testdata/config/inspect_cnn."+format+".golden", []byte(out+"--- stderr\n"+errOut))
		})
	}
	code, _, errOut := runCLI(t, "inspect", model, "--config", "testdata/config/bad.yaml")
	if code != ExitUsage || !strings.Contains(errOut, "bad.yaml:2:") {
		t.Errorf("bad config: exit %d, %s", code, errOut)
	}
}

// TestInspectConfigResNet18 resolves module_name_configs on the TorchScript
// scopes of the shared resnet18.
func TestInspectConfigResNet18(t *testing.T) {
	model := filepath.Join(testutil.SharedModels(t), "resnet18", "model.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("resnet18 not in the shared models: %v", err)
	}
	code, out, errOut := runCLI(t, "inspect", model, "--config", "testdata/config/resnet18_scopes.yaml")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	i := strings.Index(out, "\nquantization (config")
	if i < 0 {
		t.Fatalf("no quantization section:\n%s", out)
	}
	testutil.Golden(t, "testdata/config/inspect_resnet18.golden", []byte(out[i+1:]+"--- stderr\n"+errOut))
	for _, want := range []string{
		"/layer2/layer2.0/downsample/downsample.0/Conv",
		`module_name_configs["layer[2-4]\\.0\\.downsample"].op_state_spec.weight`,
		`/layer4/layer4.1/conv1/Conv`,
		`/fc/Gemm`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestOpsCommand lists the supported op types with their keys and axes.
func TestOpsCommand(t *testing.T) {
	code, out, _ := runCLI(t, "ops")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	testutil.Golden(t, "testdata/config/ops.golden", []byte(out))
	code, out, _ = runCLI(t, "ops", "--format", "json")
	if code != ExitOK || !strings.Contains(out, `"op_type": "ConvTranspose"`) || !strings.Contains(out, `"weight_axes": "per_channel 1, per_block 0"`) {
		t.Errorf("ops --format json: exit %d\n%s", code, out)
	}
}

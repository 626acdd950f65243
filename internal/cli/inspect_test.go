package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// runCLI runs one command line with buffers for its streams.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), &IO{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, args)
	return code, out.String(), errOut.String()
}

func modelPath(name string) string {
	return filepath.Join(testutil.RepoRoot(), "testdata", "models", name)
}

func TestNewCmdInspect(t *testing.T) {
	tests := []struct {
		args    []string
		want    inspectOptions
		wantErr string
	}{
		{args: []string{"m.onnx"}, want: inspectOptions{Model: "m.onnx", Format: "table"}},
		{args: []string{"m.onnx", "--format", "json", "--nodes"}, want: inspectOptions{Model: "m.onnx", Format: "json", Nodes: true}},
		{args: []string{"m.onnx", "--format", "xml"}, wantErr: `--format "xml": want table, json or yaml`},
		{args: []string{}, wantErr: "accepts 1 arg(s), received 0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var got *inspectOptions
			cmd := NewCmdInspect(&IO{}, func(o *inspectOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Model != tt.want.Model || got.Format != tt.want.Format || got.Nodes != tt.want.Nodes {
				t.Errorf("options = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestInspectGolden(t *testing.T) {
	for _, tc := range []struct{ model, format string }{
		{"cnn.onnx", "table"}, {"cnn.onnx", "json"}, {"dynamo.onnx", "table"}, {"dynamo.onnx", "yaml"},
		{"mlp.onnx", "json"}, {"unnamed.onnx", "table"}, {"subgraph.onnx", "json"},
	} {
		t.Run(tc.model+"."+tc.format, func(t *testing.T) {
			// Run from the repository root so that the model path in the
			// output does not depend on where the test runs.
			t.Chdir(testutil.RepoRoot())
			args := []string{"inspect", filepath.Join("testdata", "models", tc.model), "--format", tc.format}
			if tc.format == "table" {
				args = append(args, "--nodes")
			}
			code, out, errOut := runCLI(t, args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			testutil.Golden(t, filepath.Join("testdata", "golden", "inspect", tc.model+"."+tc.format), []byte(out))
		})
	}
}

// TestInspectJSONContract checks the fields that scripts rely on.
func TestInspectJSONContract(t *testing.T) {
	code, out, errOut := runCLI(t, "inspect", modelPath("cnn.onnx"), "--format", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"producer", "ir_version", "opsets", "inputs", "outputs", "op_types", "nodes", "initializers"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("missing field %q", key)
		}
	}
	in := doc["inputs"].([]any)[0].(map[string]any)
	if in["name"] != "input" || in["dtype"] != "float32" {
		t.Errorf("input = %v", in)
	}
	if shape := in["shape"].([]any); shape[0] != "N" || shape[1] != 1.0 {
		t.Errorf("shape = %v, want symbolic dims as strings and sizes as numbers", shape)
	}
	node := doc["nodes"].([]any)[2].(map[string]any)
	for _, key := range []string{"name", "op_type", "domain", "module", "module_type", "inputs", "outputs"} {
		if _, ok := node[key]; !ok {
			t.Errorf("node missing field %q", key)
		}
	}
	if node["module"] != "layer1.0.conv1" {
		t.Errorf("module = %v", node["module"])
	}
	init := doc["initializers"].(map[string]any)
	if init["count"] != 9.0 || init["bytes"] != 3960.0 {
		t.Errorf("initializers = %v", init)
	}
	if doc["opsets"].(map[string]any)["ai.onnx"] != 17.0 {
		t.Errorf("opsets = %v", doc["opsets"])
	}
}

// TestInspectSharedModels checks the op histogram and node list of every
// shared model against an independent count over the protobuf.
func TestInspectSharedModels(t *testing.T) {
	dir := testutil.SharedModels(t)
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "model.onnx"))
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			code, out, errOut := runCLI(t, "inspect", path, "--format", "json")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var doc struct {
				OpTypes map[string]int `json:"op_types"`
				Nodes   []struct {
					Name   string `json:"name"`
					OpType string `json:"op_type"`
				} `json:"nodes"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatal(err)
			}
			m, err := onnxgraph.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			for _, n := range m.Proto.GetGraph().GetNode() {
				want[n.GetOpType()]++
			}
			if len(want) != len(doc.OpTypes) {
				t.Errorf("op types %v, want %v", doc.OpTypes, want)
			}
			for op, n := range want {
				if doc.OpTypes[op] != n {
					t.Errorf("%s: %d, want %d", op, doc.OpTypes[op], n)
				}
			}
			if len(doc.Nodes) != len(m.Proto.GetGraph().GetNode()) {
				t.Errorf("%d nodes listed, file has %d", len(doc.Nodes), len(m.Proto.GetGraph().GetNode()))
			}
		})
	}
}

func TestInspectBadFiles(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(modelPath("cnn.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"truncated.onnx": good[:len(good)-100],
		"corrupt.onnx":   append([]byte{0x0a, 0xff, 0xff}, good[3:]...),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, "inspect", path)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, path) || strings.Contains(errOut, "goroutine") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and a message naming the file", name, code, out, errOut)
		}
	}
	code, _, errOut := runCLI(t, "inspect", filepath.Join(dir, "missing.onnx"))
	if code != ExitUsage || !strings.Contains(errOut, "missing.onnx") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
	}
}

func TestGlobalFlags(t *testing.T) {
	if code, _, errOut := runCLI(t, "--log-format", "xml", "version"); code != ExitUsage || !strings.Contains(errOut, "--log-format") {
		t.Errorf("bad --log-format: exit %d %q", code, errOut)
	}
	if code, out, _ := runCLI(t, "version"); code != ExitOK || !strings.HasPrefix(out, "coreaiq ") {
		t.Errorf("version: exit %d %q", code, out)
	}
	if code, _, _ := runCLI(t, "no-such-command"); code != ExitUsage {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}

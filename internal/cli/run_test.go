package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// writeModel writes b's model into dir and returns its path.
func writeModel(t *testing.T, dir, name string, b *testmodels.Builder) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeNPY(t *testing.T, dir, name string, x *tensor.Tensor) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := npy.WriteNPYFile(p, x); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunWritesOutputs(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	x := tensor.New(tensor.Float, 3, 16)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%7) - 3
	}
	in := writeNPY(t, dir, "x.npy", x)
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runCLI(t, "run", model, "--input", "input="+in, "--output-dir", out, "--repeat", "3", "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	got, err := npy.ReadNPYFile(filepath.Join(out, "logits.npy"))
	if err != nil {
		t.Fatal(err)
	}
	// The file must hold what the engine computes for the same input.
	m, err := onnxgraph.LoadBytes(testmodels.MLP().Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Run(context.Background(), map[string]*tensor.Tensor{"input": x}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Shape, []int{3, 4}) || !slices.Equal(got.Float32s(), want["logits"].Float32s()) {
		t.Errorf("logits.npy = %v %v, want %v", got.Shape, got.Float32s(), want["logits"].Float32s())
	}
	var rep latencyReport
	line := strings.TrimSpace(stderr)
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatalf("stderr %q is not the latency JSON line: %v", stderr, err)
	}
	if rep.Runs != 3 || rep.Engine != "go" || rep.Threads != 1 || rep.LatencyMS.Min > rep.LatencyMS.Median || rep.LatencyMS.Median > rep.LatencyMS.Max {
		t.Errorf("latency report %+v", rep)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	good := writeNPY(t, dir, "good.npy", tensor.New(tensor.Float, 2, 16))
	badShape := writeNPY(t, dir, "bad.npy", tensor.New(tensor.Float, 2, 15))
	badType := writeNPY(t, dir, "int.npy", tensor.New(tensor.Int64, 2, 16))

	unsup := testmodels.New("unsup", 17)
	unsup.Input("x", tensor.Float, 2).Output("y", tensor.Float, 2).Output("z", tensor.Float, 2)
	unsup.Node("NoSuchOp", "weird", []string{"x"}, []string{"y"})
	n := unsup.Node("Relu", "other", []string{"x"}, []string{"z"})
	n.Domain = proto("com.example")
	unsupModel := writeModel(t, dir, "unsup.onnx", unsup)

	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"shape", []string{"run", model, "--input", "input=" + badShape}, 2, []string{`input "input"`, "expected shape [N 16]", "given shape [2 15]"}},
		{"dtype", []string{"run", model, "--input", "input=" + badType}, 2, []string{`input "input"`, "expected element type float32", "given int64"}},
		{"missing input", []string{"run", model}, 2, []string{"missing --input for input"}},
		{"unknown input", []string{"run", model, "--input", "nope=" + good}, 2, []string{`no input "nope"`}},
		{"unsupported", []string{"run", unsupModel, "--input", "x=" + good}, 2, []string{`node "weird": NoSuchOp (domain ai.onnx, opset 17)`, `node "other": Relu (domain com.example`, "--engine ort"}},
		{"bad engine", []string{"run", model, "--input", "input=" + good, "--engine", "tpu"}, 2, []string{`engine "tpu" is not available`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(".", "y.npy")); err == nil {
		t.Errorf("an unsupported model wrote output")
	}
}

func TestRunSingleInputShorthand(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	in := writeNPY(t, dir, "x.npy", tensor.New(tensor.Float, 1, 16))
	code, _, stderr := runCLI(t, "run", model, "--input", in, "--output-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "logits.npy")); err != nil {
		t.Error(err)
	}
}

func TestOutputFileName(t *testing.T) {
	for in, want := range map[string]string{"logits": "logits.npy", "/fc/Gemm:0": "_fc_Gemm_0.npy"} {
		if got := OutputFileName(in); got != want {
			t.Errorf("OutputFileName(%q) = %q, want %q", in, got, want)
		}
	}
}

func proto(s string) *string { return &s }

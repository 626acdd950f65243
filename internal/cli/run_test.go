package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gproto "google.golang.org/protobuf/proto"

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

// readJSONFile decodes the JSON file at path (a report, a sensitivity
// file) into v.
func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func writeNPY(t *testing.T, dir, name string, x *tensor.Tensor) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := npy.WriteNPYFile(p, x); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeTestSet writes x as the input_0.pb of an ONNX test data directory
// (.npy has no bfloat16; the ONNX model zoo ships its data so) and
// returns the directory.
func writeTestSet(t *testing.T, dir string, x *tensor.Tensor) string {
	t.Helper()
	p, err := tensor.ToProto(x, "x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := gproto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	set := filepath.Join(dir, "data")
	if err := os.Mkdir(set, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(set, "input_0.pb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return set
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

// TestRunProfile checks that --profile prints the op types and slowest
// nodes of the run and --profile-out writes its steps as Chrome trace
// JSON, and that profiling another engine is refused.
func TestRunProfile(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	in := writeNPY(t, dir, "x.npy", tensor.New(tensor.Float, 3, 16))
	trace := filepath.Join(dir, "trace.json")
	code, _, stderr := runCLI(t, "run", model, "--input", "input="+in, "--output-dir", dir, "--threads", "1", "--repeat", "2", "--profile", "--profile-out", trace)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "profile: 2 runs") || !strings.Contains(stderr, "op type") || !strings.Contains(stderr, "Gemm") {
		t.Errorf("stderr has no profile of the 2 timed runs:\n%s", stderr)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct{ Name, Cat, Ph string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("trace: %v", err)
	}
	if len(doc.TraceEvents) == 0 || len(doc.TraceEvents)%2 != 0 || doc.TraceEvents[0].Ph != "X" {
		t.Errorf("trace events %+v, want the same steps for each of 2 runs", doc.TraceEvents)
	}
	code, _, stderr = runCLI(t, "run", model, "--input", "input="+in, "--output-dir", dir, "--engine", "ort", "--profile")
	if code != 2 || !strings.Contains(stderr, "--profile") {
		t.Errorf("--engine ort --profile: exit %d, %s; want 2 and a message naming --profile", code, stderr)
	}
}

// TestQuantizeProfile checks that quantize --profile prints the time of
// the calibration runs.
func TestQuantizeProfile(t *testing.T) {
	dir, ref, data := compareFixture(t)
	code, _, stderr := runCLI(t, "quantize", "--model", ref, "-o", filepath.Join(dir, "q.onnx"), "--data", data, "--preset", "w8a8", "--profile")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "profile: ") || !strings.Contains(stderr, "Conv") || !strings.Contains(stderr, "(taps)") {
		t.Errorf("stderr has no profile of the calibration runs:\n%s", stderr)
	}
}

package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func TestNewCmdBench(t *testing.T) {
	tests := []struct {
		args    []string
		want    string // substring of the usage error, "" for none
		minimum float64
	}{
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy"}},
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy", "--min-speedup", "1.5"}, minimum: 1.5},
		{args: []string{"f.onnx", "q.onnx"}, want: "no input data"},
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy", "--batch-size", "0"}, want: "--batch-size 0"},
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy", "--runs", "2"}, want: "--runs 2"},
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy", "--engine", "tvm"}, want: `--engine "tvm"`},
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy", "--engine", "go", "--min-speedup", "2"}, want: "drop --engine go"},
		{args: []string{"f.onnx", "q.onnx", "--data", "x.npy", "--format", "xml"}, want: `--format "xml"`},
		{args: []string{"f.onnx"}, want: "accepts 2 arg(s)"},
	}
	hasORT := slices.Contains(runtime.Engines(), ortEngine)
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var got *benchOptions
			cmd := NewCmdBench(&IO{}, func(o *benchOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.Execute()
			want := tt.want
			if want == "" && tt.minimum > 0 && !hasORT {
				want = "has only the built-in engine"
			}
			switch {
			case want == "" && err != nil:
				t.Fatalf("error: %v", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Fatalf("error %v, want %q", err, want)
			case want == "" && (got.Threads != 1 || got.BatchSize != 1 || got.MinSpeedup != tt.minimum):
				t.Errorf("options %+v", got)
			}
		})
	}
}

// TestBenchTimesBothModels runs bench on a model against itself: every
// engine of the binary is timed, and the default binary says that
// ONNX Runtime is missing and how to get it.
func TestBenchTimesBothModels(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	x := tensor.New(tensor.Float, 2, 16)
	in := writeNPY(t, dir, "x.npy", x)
	code, stdout, stderr := runCLI(t, "bench", model, model, "--data", in, "--runs", "3", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep BenchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	var engines []string
	for _, r := range rep.Results {
		engines = append(engines, r.Engine)
		if r.Runs != 3 || r.FloatMS <= 0 || r.QuantMS <= 0 || r.Speedup <= 0 || r.Batch != 1 || r.Threads != 1 {
			t.Errorf("result %+v", r)
		}
		// ONNX Runtime on one thread is timed on the thread that calls it
		// (Linux); the built-in engine, which may run on several, by the
		// process.
		want := "process"
		if _, ok := threadCPU(); ok && r.Engine == ortEngine {
			want = "thread"
		}
		if r.CPUClock != want || r.FloatCPUMS <= 0 || r.QuantCPUMS <= 0 {
			t.Errorf("%s: CPU clock %q (want %q), CPU ms %v / %v", r.Engine, r.CPUClock, want, r.FloatCPUMS, r.QuantCPUMS)
		}
	}
	hasORT := slices.Contains(runtime.Engines(), ortEngine)
	switch {
	case hasORT && !slices.Equal(engines, []string{"ort", "go"}):
		t.Errorf("engines %v, want ort then go", engines)
	case !hasORT && (!slices.Equal(engines, []string{"go"}) || !strings.Contains(rep.Missing, "-tags ort")):
		t.Errorf("engines %v, missing %q", engines, rep.Missing)
	}
	if code, _, stderr := runCLI(t, "bench", model, model, "--data", in, "--batch-size", "3"); code != 2 || !strings.Contains(stderr, "fewer than the batch size 3") {
		t.Errorf("batch larger than the data: exit %d, %s", code, stderr)
	}
}

// TestBenchGate: a quantized model no faster than its float model fails
// --min-speedup with exit 3 (a model against itself runs at about 1×).
func TestBenchGate(t *testing.T) {
	if !slices.Contains(runtime.Engines(), ortEngine) {
		t.Skip("the gate needs ONNX Runtime (-tags ort)")
	}
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	in := writeNPY(t, dir, "x.npy", tensor.New(tensor.Float, 1, 16))
	code, _, stderr := runCLI(t, "bench", model, model, "--data", in, "--runs", "3", "--engine", "ort", "--min-speedup", "100")
	if code != 3 || !strings.Contains(stderr, "below --min-speedup 100") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestQuantizeRaisesUpsample: an opset-9 model with an Upsample (older
// detector and segmentation exports) quantized with per-channel weights,
// which need opset 13: the written model imports opset 13 and resizes with
// a Resize of asymmetric coordinates, rounding down, as Upsample did.
func TestQuantizeRaisesUpsample(t *testing.T) {
	dir := t.TempDir()
	b := testmodels.New("up", 9)
	b.Input("x", tensor.Float, "N", 2, 4, 4).Output("y", tensor.Float, "N", 3, 8, 8)
	b.RandomInit("w1", 0.5, 3, 2, 3, 3).RandomInit("w2", 0.5, 3, 3, 1, 1)
	b.Init("scales", []int64{4}, []float32{1, 1, 2, 2})
	b.Node("Conv", "conv1", []string{"x", "w1"}, []string{"c1"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Relu", "relu", []string{"c1"}, []string{"r"})
	b.Node("Upsample", "up", []string{"r", "scales"}, []string{"u"})
	b.Node("Conv", "conv2", []string{"u", "w2"}, []string{"y"})
	model := writeModel(t, dir, "up.onnx", b)
	x := tensor.New(tensor.Float, 4, 2, 4, 4)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%13)/13 - 0.3
	}
	out := filepath.Join(dir, "q.onnx")
	if code, _, stderr := runCLI(t, "quantize", "--model", model, "--data", writeNPY(t, dir, "x.npy", x), "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	m, err := onnxgraph.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Opset("") != 13 {
		t.Errorf("opset %d, want 13", m.Opset(""))
	}
	var resize *onnxgraph.Node
	for _, n := range m.Graph.Nodes {
		if n.Name == "up" {
			resize = n
		}
	}
	if resize == nil || resize.OpType != "Resize" || string(resize.Attr("coordinate_transformation_mode").GetS()) != "asymmetric" ||
		string(resize.Attr("nearest_mode").GetS()) != "floor" {
		t.Fatalf("node up: %v", resize)
	}
}

// TestQuantizeWarnsOfNonFinite: one NaN in the calibration data is left
// out of the ranges (DESIGN: counted, not fatal), the summary warns and
// names the input that held it, and the report counts it per tensor.
func TestQuantizeWarnsOfNonFinite(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "cnn.onnx", testmodels.CNN())
	x := tensor.New(tensor.Float, 4, 1, 8, 8)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%17) / 17
	}
	x.Float32s()[2*64+5] = float32(math.NaN())
	calib := writeNPY(t, dir, "x.npy", x)
	rep := filepath.Join(dir, "r.json")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--data", calib, "-o", filepath.Join(dir, "q.onnx"), "--report", rep)
	if code != 0 || !strings.Contains(stderr, `the calibration data of input "input" held 1 NaN and 0 ±Inf`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var r struct {
		Tensors []struct {
			Value string `json:"value"`
			NaN   int64  `json:"nan"`
		} `json:"tensors"`
	}
	readJSONFile(t, rep, &r)
	counted := map[string]int64{}
	for _, tt := range r.Tensors {
		counted[tt.Value] = tt.NaN
	}
	if counted["input"] != 1 {
		t.Errorf("report counts %d NaN for input, want 1 (%v)", counted["input"], counted)
	}
}

// TestQuantizeTarget: --target places Q/DQ for the target and the summary
// ends with its lint; an unknown target is a usage error with a hint.
func TestQuantizeTarget(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "cnn.onnx", testmodels.CNN())
	calib := writeNPY(t, dir, "x.npy", tensor.New(tensor.Float, 4, 1, 8, 8))
	out := filepath.Join(dir, "q.onnx")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--data", calib, "-o", out, "--target", "ort-x86")
	if code != 0 || !strings.Contains(stderr, "lint: ONNX Runtime CPU on x86-64 runs") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "quantize", "--model", model, "--data", calib, "-o", out, "--target", "ort-x68")
	if code != 2 || !strings.Contains(stderr, `unknown target "ort-x68"`) || !strings.Contains(stderr, `did you mean "ort-x86"`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestQuantizeForcedInt8UnderORTX86: a config that states int8 symmetric
// activations and target ort-x86 keeps its specs, and the warning names
// the rule (file:line) that defeats the target's fast path (on
// digits_resnet, whose residual blocks read activations twice).
func TestQuantizeForcedInt8UnderORTX86(t *testing.T) {
	shared := testutil.SharedModels(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "forced.yaml")
	text := `model: ` + filepath.Join(shared, "digits_resnet", "model.onnx") + `
target: ort-x86
calibration:
  data: [` + filepath.Join(shared, "digits_resnet", "calib_input.npy") + `]
  samples: 16
quantization_config:
  global_config:
    op_input_spec:
      "*": { dtype: int8, qscheme: symmetric, granularity: { type: per_tensor } }
    op_output_spec:
      "*": { dtype: int8, qscheme: symmetric, granularity: { type: per_tensor } }
    op_state_spec:
      weight: { dtype: int8, qscheme: symmetric, granularity: { type: per_channel } }
`
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "quantize", "--config", cfg, "-o", filepath.Join(dir, "q.onnx"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "warning: rule "+cfg+":") || !strings.Contains(stderr, "defeats target ort-x86's fast path") {
		t.Errorf("no warning naming the rule:\n%s", stderr)
	}
	if !strings.Contains(stderr, "int8 activation; ONNX Runtime CPU on x86-64 converts int8 Q/DQ pairs to uint8 only when the QuantizeLinear has one consumer") {
		t.Errorf("the lint does not say which nodes run in float:\n%s", stderr)
	}
}

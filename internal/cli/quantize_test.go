package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestQuantizeWeightOnly runs `quantize --preset w8` end to end: no data
// needed, a loadable model, a report listing every quantized tensor and
// every skipped node with its reason.
func TestQuantizeWeightOnly(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(testutil.RepoRoot(), "testdata", "models", "cnn.onnx")
	out, rep := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "report.json")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--preset", "w8", "-o", out, "--report", rep)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, err := onnxgraph.Load(out); err != nil {
		t.Fatalf("written model does not load: %v", err)
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Counts["weight"] != 4 || r.Counts["activation"] != 0 {
		t.Errorf("counts %v, want 4 weights and no activations", r.Counts)
	}
	// Every node without a quantized tensor is listed with a reason.
	want := map[string]bool{"/relu/Relu": true, "/layer1/layer1.0/relu/Relu": true, "/layer1/layer1.0/Add": true,
		"/layer1/layer1.0/relu_1/Relu": true, "/pool/MaxPool": true, "/Reshape": true}
	for _, s := range r.Skipped {
		if s.Reason == "" {
			t.Errorf("skipped node %q has no reason", s.Node)
		}
		delete(want, s.Node)
	}
	if len(want) > 0 {
		t.Errorf("nodes missing from the skipped list: %v", want)
	}
	if len(r.Passes) != 4 {
		t.Errorf("pass timings %v, want 4 passes", r.Passes)
	}
	if !strings.Contains(stderr, "skipped /pool/MaxPool") {
		t.Errorf("stderr table does not list skipped nodes:\n%s", stderr)
	}
}

// TestQuantizeNeedsData checks that a preset quantizing activations
// without data is a usage error that says what to do.
func TestQuantizeNeedsData(t *testing.T) {
	model := filepath.Join(testutil.RepoRoot(), "testdata", "models", "mlp.onnx")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--preset", "w8a8", "-o", filepath.Join(t.TempDir(), "q.onnx"))
	if code != ExitUsage || !strings.Contains(stderr, "--data") {
		t.Fatalf("exit %d, stderr %q: want exit %d naming --data", code, stderr, ExitUsage)
	}
}

// TestPrepareJSON checks `prepare` writes the plan as JSON on stdout.
func TestPrepareJSON(t *testing.T) {
	model := filepath.Join(testutil.RepoRoot(), "testdata", "models", "mlp.onnx")
	code, stdout, stderr := runCLI(t, "prepare", "--model", model, "--preset", "w8a8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var plan struct {
		Stage   string `json:"stage"`
		Tensors []struct {
			Value string `json:"value"`
			Role  string `json:"role"`
			DType string `json:"dtype"`
			Rule  struct {
				File string `json:"file"`
				Line int    `json:"line"`
			} `json:"rule"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(stdout), &plan); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if plan.Stage != "prepared" || len(plan.Tensors) == 0 {
		t.Fatalf("plan %+v", plan)
	}
	for _, tp := range plan.Tensors {
		if tp.Rule.File == "" || tp.DType == "" {
			t.Errorf("tensor %q has no rule or dtype: %+v", tp.Value, tp)
		}
	}
}

// TestQuantizeRuleInPerLayerReport: the rule that chose each activation's
// spec travels in the quantized model's node metadata, so `compare
// --per-layer` shows it without the config.
func TestQuantizeRuleInPerLayerReport(t *testing.T) {
	dir, ref, data := compareFixture(t)
	out := filepath.Join(dir, "cnn.q.onnx")
	if code, _, stderr := runCLI(t, "quantize", "--model", ref, "-o", out, "--data", data, "--preset", "w8a8"); code != 0 {
		t.Fatalf("quantize: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "compare", ref, out, "--data", data, "--per-layer", "--format", "json")
	if code != 0 {
		t.Fatalf("compare: exit %d\n%s", code, stderr)
	}
	var rep struct {
		Layers []struct {
			Tensor string `json:"tensor"`
			Rule   string `json:"rule"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rep.Layers) == 0 {
		t.Fatalf("no per-layer rows:\n%s", stdout)
	}
	for _, l := range rep.Layers {
		if !strings.HasPrefix(l.Rule, "preset:w8a8:") || !strings.Contains(l.Rule, "quantization_config.global_config.op_") {
			t.Errorf("tensor %q: rule %q, want the w8a8 preset's file:line and YAML path", l.Tensor, l.Rule)
		}
	}
}

// TestQuantizeFormatFlag: --format ort-nbits writes MatMulNBits for the
// w4 preset's Gemm weights; an unknown format is a usage error.
func TestQuantizeFormatFlag(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(testutil.RepoRoot(), "testdata", "models", "mlp.onnx")
	out := filepath.Join(dir, "q.onnx")
	if code, _, stderr := runCLI(t, "quantize", "--model", model, "--preset", "w4", "--format", "ort-nbits", "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	m, err := onnxgraph.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	nbits := 0
	for _, n := range m.Graph.Nodes {
		if n.OpType == "MatMulNBits" && n.Domain == "com.microsoft" {
			nbits++
		}
	}
	if nbits != 2 {
		t.Errorf("%d MatMulNBits nodes, want 2 (one per Gemm)", nbits)
	}
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--preset", "w4", "--format", "nbits", "-o", out)
	if code != ExitUsage || !strings.Contains(stderr, "ort-nbits") {
		t.Errorf("unknown format: exit %d, stderr %q", code, stderr)
	}
}

// TestReadmeQuantize runs the README's first quantize command, exactly as
// written, in a copy of the repository's examples folder.
func TestReadmeQuantize(t *testing.T) {
	root := testutil.RepoRoot()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "coreaiq quantize ") {
			cmd = line
			break
		}
	}
	if cmd == "" {
		t.Fatal("README.md has no line starting with `coreaiq quantize `")
	}
	args := strings.Fields(cmd)[1:]
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "examples"), os.DirFS(filepath.Join(root, "examples"))); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "examples", "digits", "model.int8.onnx")) // a local run's output
	t.Chdir(dir)
	code, _, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s", cmd, code, stderr)
	}
	m, err := onnxgraph.Load(filepath.Join(dir, "examples", "digits", "model.int8.onnx"))
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	q := 0
	for _, n := range m.Graph.Nodes {
		if n.OpType == "QuantizeLinear" {
			q++
		}
	}
	if q == 0 || !strings.Contains(stderr, "wrote examples/digits/model.int8.onnx") {
		t.Errorf("%s: %d QuantizeLinear nodes; stderr:\n%s", cmd, q, stderr)
	}
}

// TestPresetConfigsRun runs every configs/presets file as the README
// shows, `quantize --config configs/presets/P.yaml --model M --data D`, on
// shared models with the built-in engine.
func TestPresetConfigsRun(t *testing.T) {
	shared := testutil.SharedModels(t)
	root := testutil.RepoRoot()
	presets, err := filepath.Glob(filepath.Join(root, "configs", "presets", "*.yaml"))
	if err != nil || len(presets) == 0 {
		t.Fatalf("no configs/presets/*.yaml (%v)", err)
	}
	for _, cfg := range presets {
		for _, model := range []string{"digits_lenet", "digits_mlp"} {
			name := strings.TrimSuffix(filepath.Base(cfg), ".yaml")
			t.Run(name+"/"+model, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "q.onnx")
				code, _, stderr := runCLI(t, "quantize", "--config", cfg,
					"--model", filepath.Join(shared, model, "model.onnx"),
					"--data", filepath.Join(shared, model, "calib_input.npy"), "--samples", "32", "-o", out)
				if code != 0 {
					t.Fatalf("exit %d\n%s", code, stderr)
				}
				if _, err := onnxgraph.Load(out); err != nil {
					t.Fatalf("written model: %v", err)
				}
			})
		}
	}
}

// TestReportTableCapsSkips: the stderr summary lists at most
// maxTableSkips skipped nodes and says how many more the report holds.
func TestReportTableCapsSkips(t *testing.T) {
	for _, c := range []struct {
		skips, listed int
		more          string
	}{{3, 3, ""}, {maxTableSkips + 1, maxTableSkips + 1, ""}, {maxTableSkips + 7, maxTableSkips, "and 7 more"}} {
		r := &report{Output: "q.onnx", Counts: map[string]int{}, reportPath: "rep.json"}
		for i := range c.skips {
			r.Skipped = append(r.Skipped, finalize.Skip{Node: fmt.Sprintf("n%03d", i), OpType: "Relu", Reason: "why"})
		}
		var b strings.Builder
		if err := writeReportTable(&b, r); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if got := strings.Count(out, "(Relu)"); got != c.listed {
			t.Errorf("%d skips: %d listed, want %d\n%s", c.skips, got, c.listed, out)
		}
		if c.more != "" && (!strings.Contains(out, c.more) || !strings.Contains(out, "rep.json lists them all")) {
			t.Errorf("%d skips: no %q pointing at the report\n%s", c.skips, c.more, out)
		}
		if c.more == "" && strings.Contains(out, "more") {
			t.Errorf("%d skips: unexpected cap\n%s", c.skips, out)
		}
	}
}

// TestQuantizeFP4AsFP8Flag: --fp4-as-fp8 stores mxfp4 weights as float8
// e4m3fn codes; without it they are float4 e2m1.
func TestQuantizeFP4AsFP8Flag(t *testing.T) {
	model := filepath.Join(testutil.RepoRoot(), "testdata", "models", "mlp.onnx")
	x := tensor.New(tensor.Float, 4, 16)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%7)/3 - 1
	}
	data := writeNPY(t, t.TempDir(), "x.npy", x)
	for _, c := range []struct {
		flags []string
		want  tensor.DType
	}{{nil, tensor.Float4E2M1}, {[]string{"--fp4-as-fp8"}, tensor.Float8E4M3FN}} {
		out := filepath.Join(t.TempDir(), "q.onnx")
		args := append([]string{"quantize", "--model", model, "--preset", "mxfp4", "--data", data, "-o", out}, c.flags...)
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.flags, code, stderr)
		}
		m, err := onnxgraph.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		v := m.Graph.Value("fc1.weight_quantized")
		if v == nil || v.Const == nil || tensor.DType(v.Const.GetDataType()) != c.want {
			t.Errorf("%v: fc1.weight_quantized is %v, want %s", c.flags, v, c.want)
		}
	}
}

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/plan"
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
	var r report
	readJSONFile(t, rep, &r)
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
	if len(r.Passes) != len(passes.Pipeline) {
		t.Errorf("pass timings %v, want one per pass %v", r.Passes, passes.PassNames())
	}
	// Weight-only, the table says what was quantized and counts the rest.
	if !strings.Contains(stderr, "4 tensors read by 4 nodes") || !strings.Contains(stderr, "6 nodes without a quantized weight") ||
		strings.Contains(stderr, "skipped /pool/MaxPool") {
		t.Errorf("stderr table does not summarise the weight-only run:\n%s", stderr)
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
// every shared model with the built-in engine and 4 calibration samples,
// without --batch-size: mnist-cntk-op8 fixes its batch at 1 and must get
// it, and squeezenet1.0 (opset 7) must be raised to the opset its preset
// needs through the version adapters. The int4 presets (w4, w4-accurate, w4a8) skip the
// four largest models: their MSE weight-range search alone takes 5–20 s
// per model there, and the small models cover the same code.
func TestPresetConfigsRun(t *testing.T) {
	shared := testutil.SharedModels(t)
	root := testutil.RepoRoot()
	presets, err := filepath.Glob(filepath.Join(root, "configs", "presets", "*.yaml"))
	if err != nil || len(presets) == 0 {
		t.Fatalf("no configs/presets/*.yaml (%v)", err)
	}
	entries, err := os.ReadDir(shared)
	if err != nil {
		t.Fatal(err)
	}
	slow := map[string]bool{"resnet18": true, "mobilenetv2": true, "bert_encoder": true, "gpt_decoder": true}
	// The lowest opset each preset needs: per-channel int8 13, fp8 19,
	// int4 per block 21, fp4 23.
	minOpset := map[string]int64{"w8a8": 13, "accurate": 13, "w8": 13, "ort-x86": 13, "fp8": 19, "w4": 21, "w4-accurate": 21, "w4a8": 21, "mxfp4": 23}
	models := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(shared, e.Name(), "model.onnx")); err != nil {
			continue
		}
		models++
		for _, cfg := range presets {
			name := strings.TrimSuffix(filepath.Base(cfg), ".yaml")
			model := e.Name()
			t.Run(name+"/"+model, func(t *testing.T) {
				if slow[model] && strings.HasPrefix(name, "w4") {
					t.Skipf("%s on %s: the int4 weight-range search takes too long for this test; the small models cover it", name, model)
				}
				dir := filepath.Join(shared, model)
				out := filepath.Join(t.TempDir(), "q.onnx")
				args := append([]string{"quantize", "--config", cfg, "--model", filepath.Join(dir, "model.onnx"),
					"--samples", "4", "-o", out, "--log-level", "error"}, sharedData(t, dir, "calib")...)
				code, _, stderr := runCLI(t, args...)
				if code != 0 {
					t.Fatalf("exit %d\n%s", code, stderr)
				}
				m, err := onnxgraph.Load(out)
				if err != nil {
					t.Fatalf("written model: %v", err)
				}
				src, err := onnxgraph.Load(filepath.Join(dir, "model.onnx"))
				if err != nil {
					t.Fatal(err)
				}
				if want := max(src.Opset(""), minOpset[name]); m.Opset("") != want {
					t.Errorf("opset %d, want %d", m.Opset(""), want)
				}
				// Every named node of the source is still there under its
				// name, and no op lost a node (BatchNormalization and bias
				// Adds the fold pass folds into their Conv or ConvTranspose
				// under a target, and Identity or
				// Constant nodes giving a weight, replaced by its
				// DequantizeLinear, excepted).
				ops := map[string]int{}
				for _, n := range m.Graph.Nodes {
					ops[n.OpType]++
				}
				withInits, _, err := finalize.ConstantsAsInitializers(src)
				if err != nil {
					t.Fatal(err)
				}
				folded, _, err := finalize.FoldIntoLayers(withInits) // what a target's fold pass folds
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range src.Graph.Nodes {
					if n.OpType == "BatchNormalization" || n.OpType == "Identity" || n.OpType == "Constant" {
						continue
					}
					if n.OpType == "Add" && folded.Graph.Node(n.Name) == nil {
						continue
					}
					if ops[n.OpType]--; ops[n.OpType] < 0 {
						t.Errorf("the quantized model has fewer %s nodes than the source", n.OpType)
					}
					if n.Proto.GetName() != "" && m.Graph.Node(n.Name) == nil {
						t.Errorf("node %q (%s) is missing from the quantized model", n.Name, n.OpType)
					}
				}
			})
		}
	}
	if models < 10 {
		t.Errorf("%d shared models found, want the 10 of the README", models)
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
			r.Skipped = append(r.Skipped, plan.Skip{Node: fmt.Sprintf("n%03d", i), OpType: "Relu", Reason: "why"})
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

// TestFixedBatchSize: a model whose input fixes its batch (mnist-cntk-op8:
// [1, 1, 28, 28]) calibrates with that batch when none is given, and an
// explicit batch size that differs (flag, environment or config file) is a
// usage error naming the input and both sizes, in quantize and calibrate.
func TestFixedBatchSize(t *testing.T) {
	dir := t.TempDir()
	b := testmodels.New("fixed", 13)
	b.Input("x", tensor.Float, 1, 4).Output("y", tensor.Float, 1, 3)
	b.RandomInit("W", 0.5, 4, 3)
	b.Node("MatMul", "mm", []string{"x", "W"}, []string{"y"})
	model := writeModel(t, dir, "fixed.onnx", b)
	x := tensor.New(tensor.Float, 6, 4)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%7) - 3
	}
	data := writeNPY(t, dir, "x.npy", x)
	cfgWith := func(batch string) string {
		p := filepath.Join(dir, "batch"+batch+".yaml")
		if err := os.WriteFile(p, []byte("calibration:\n  batch_size: "+batch+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name   string
		args   []string
		env    string
		code   int
		stderr []string
	}{
		{"quantize default", []string{"quantize"}, "", 0, nil},
		{"quantize same flag", []string{"quantize", "--batch-size", "1"}, "", 0, nil},
		{"quantize flag conflicts", []string{"quantize", "--batch-size", "4"}, "", ExitUsage,
			[]string{`input "x"`, "fixed batch size of 1", "--batch-size sets the calibration batch size to 4"}},
		{"quantize config conflicts", []string{"quantize", "--config", cfgWith("3")}, "", ExitUsage,
			[]string{`input "x"`, "batch3.yaml: calibration.batch_size sets the calibration batch size to 3"}},
		{"quantize config agrees", []string{"quantize", "--config", cfgWith("1")}, "", 0, nil},
		{"quantize env conflicts", []string{"quantize"}, "2", ExitUsage,
			[]string{`input "x"`, "COREAIQ_CALIBRATION_BATCH_SIZE sets the calibration batch size to 2"}},
		{"calibrate default", []string{"calibrate"}, "", 0, nil},
		{"calibrate flag conflicts", []string{"calibrate", "--batch-size", "8"}, "", ExitUsage,
			[]string{`input "x"`, "fixed batch size of 1", "to 8"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("COREAIQ_CALIBRATION_BATCH_SIZE", c.env)
			}
			out := filepath.Join(t.TempDir(), "out")
			args := append(c.args, "--model", model, "--data", data, "--preset", "w8a8", "-o", out)
			code, _, stderr := runCLI(t, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s", code, c.code, stderr)
			}
			for _, s := range c.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q does not say %q", stderr, s)
				}
			}
		})
	}
}

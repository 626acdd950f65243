package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// outlierInputModel has two branches. The fragile one, /first/Gemm,
// reads the input x, whose feature 0 spans ±200 (outlierData) but meets
// zero weights while features 1-7 span ±1 and carry the signal: int8's
// per-tensor scale for x rounds those to 0 or ±1.6, and the output y1
// keeps little of them; int16's keeps them. The other branch,
// /second/Gemm and /third/Gemm from the input z to y2, spans a few units
// and keeps int8's 25 dB here (moving-average ranges clip it).
func outlierInputModel() *testmodels.Builder {
	b := testmodels.New("outlier", 17)
	b.Input("x", tensor.Float, "N", 8).Input("z", tensor.Float, "N", 8)
	b.Output("y1", tensor.Float, "N", 4).Output("y2", tensor.Float, "N", 4)
	rng := rand.New(rand.NewPCG(3, 5))
	w := make([]float32, 4*8)
	for i := range w {
		if i%8 != 0 { // input feature 0 meets zero weights
			w[i] = rng.Float32()*2 - 1
		}
	}
	b.Init("first.weight", []int64{4, 8}, w).RandomInit("first.bias", 0.1, 4)
	b.RandomInit("second.weight", 0.5, 8, 8).RandomInit("second.bias", 0.1, 8)
	b.RandomInit("third.weight", 0.5, 4, 8).RandomInit("third.bias", 0.1, 4)
	gemm := func(name, in, w, bias, out string) {
		b.Node("Gemm", name, []string{in, w, bias}, []string{out},
			testmodels.AttrFloat("alpha", 1), testmodels.AttrFloat("beta", 1), testmodels.AttrInt("transB", 1))
	}
	gemm("/first/Gemm", "x", "first.weight", "first.bias", "y1")
	gemm("/second/Gemm", "z", "second.weight", "second.bias", "h")
	gemm("/third/Gemm", "h", "third.weight", "third.bias", "y2")
	return b
}

// outlierData writes 256 samples of outlierInputModel's inputs from a
// fixed seed, uniform in [-1, 1) but for x's feature 0, in [-200, 200),
// and returns them as --data arguments.
func outlierData(t *testing.T, dir string) []string {
	t.Helper()
	return outlierInputs(t, dir, 256, "x", "z")
}

// outlierInputs writes n samples of each named input ([n, 8]) from a
// fixed seed, uniform in [-1, 1) but for feature 0 of every input other
// than z, in [-200, 200), and returns them as --data arguments.
func outlierInputs(t *testing.T, dir string, n int, names ...string) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 13))
	var args []string
	for _, name := range names {
		v := tensor.New(tensor.Float, n, 8)
		for i := range v.Float32s() {
			f := rng.Float32()*2 - 1
			if name != "z" && i%8 == 0 {
				f *= 200
			}
			v.Float32s()[i] = f
		}
		args = append(args, "--data", name+"="+writeNPY(t, dir, name+".npy", v))
	}
	return args
}

// TestSearchPromotesFragileNode checks, on outlierInputModel (w8a8, 256
// samples of outlierData, 4 held out), that --target-sqnr 15 raises x to
// int16 first, in one evaluation, and nothing else (the model reaches
// 19.1 dB from 9.1), with an op_name_config entry for /first/Gemm, the
// one node that quantizes x, and that the emitted config writes the same
// model byte for byte and validates.
func TestSearchPromotesFragileNode(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	data := outlierData(t, dir)
	preset, err := config.PresetYAML("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	// A user's config: the preset written out, with settings of its own
	// that the emitted config keeps.
	user := filepath.Join(dir, "user.yaml")
	userText := "# the team's settings\nthreads: 1 # fits the runner\n" + string(preset)
	if err := os.WriteFile(user, []byte(userText), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantKept string
	}{
		{name: "preset", args: []string{"--preset", "w8a8"}, wantKept: "qparam_calculator"},
		{name: "config", args: []string{"--config", user}, wantKept: "threads: 1 # fits the runner"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, emitted := filepath.Join(dir, tt.name+".onnx"), filepath.Join(dir, tt.name+".yaml")
			args := append([]string{"quantize", "--model", model, "--target-sqnr", "15", "-o", out, "--emit-config", emitted}, tt.args...)
			code, _, stderr := runCLI(t, append(args, data...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			cfg, text := readEmitted(t, emitted)
			if !strings.Contains(string(text), tt.wantKept) {
				t.Errorf("the emitted config lost %q:\n%s", tt.wantKept, text)
			}
			var keys []string
			for _, e := range cfg.Quant.Global.OpNames {
				keys = append(keys, e.Key)
				if e.Config == nil {
					t.Fatalf("op_name_config %q is null", e.Key)
				}
				in, ok := e.Config.Input.Lookup(0)
				if !ok || in.Spec == nil || in.Spec.DType != spec.Int16 {
					t.Errorf("op_name_config %q: input 0 is not int16:\n%s", e.Key, text)
				}
			}
			if strings.Join(keys, ",") != "/first/Gemm" {
				t.Fatalf("entries for %v, want only /first/Gemm; stderr:\n%s\nconfig:\n%s", keys, stderr, text)
			}
			if !strings.Contains(string(text), "/first/Gemm: # x to int16: +") {
				t.Errorf("the entry carries no gain comment:\n%s", text)
			}
			if !strings.Contains(stderr, "search 1/630: x to int16") || !strings.Contains(stderr, "search: x to int16 kept") || strings.Contains(stderr, "search 2/") {
				t.Errorf("want one evaluation, x to int16, kept; stderr:\n%s", stderr)
			}

			// The emitted config holds the calibration sample count, so quantize
			// without held-out samples calibrates on the same ones.
			checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, tt.name+".again.onnx"), append([]string{"--model", model}, data...)...)
		})
	}
}

// TestSearchTargetNotMet checks that a target the budget cannot reach
// exits 3 after writing the best model found and the config for it.
func TestSearchTargetNotMet(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	data := outlierData(t, dir)
	out, emitted, report := filepath.Join(dir, "best.onnx"), filepath.Join(dir, "best.yaml"), filepath.Join(dir, "best.json")
	code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "--preset", "w8a8",
		"--target-sqnr", "200", "--search-budget", "1", "-o", out, "--emit-config", emitted, "--report", report}, data...)...)
	if code != ExitGate {
		t.Fatalf("exit %d, want %d: %s", code, ExitGate, stderr)
	}
	if !strings.Contains(stderr, "--target-sqnr 200") || !strings.Contains(stderr, "1 evaluation") {
		t.Errorf("stderr does not give the figures:\n%s", stderr)
	}
	for _, p := range []string{out, emitted} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("best result not written: %v", err)
		}
	}
	text, err := os.ReadFile(emitted)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "/first/Gemm: # x to int16") {
		t.Errorf("the best model's promotion is not in the config:\n%s", text)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	s := rep.Search
	if s == nil || s.Met || len(s.Trace) != 2 || s.Trace[0].Unit != "x" || s.Trace[1].Verdict != "kept" ||
		len(s.Promotions) != 1 || s.Promotions[0].Unit != "x" || s.Reached <= s.Start || s.Evaluations != 1 || s.Raised != 1 {
		t.Errorf("report's search: %+v, want x measured then kept, raising the SQNR, one point raised, target not met", s)
	}
}

// searchRun is a quantize run of an accuracy search and where it wrote.
type searchRun struct {
	dir, model, out, emitted, report string
	data                             []string
	code                             int
	stderr                           string
}

// threeOutliersSearch runs quantize --preset w8a8 on threeOutliersModel
// (256 samples of outlierInputs, 4 held out) with the given search flags,
// writing q.onnx, q.yaml (--emit-config) and r.json (--report) in a new
// directory with a cache of its own.
func threeOutliersSearch(t *testing.T, flags ...string) searchRun {
	t.Helper()
	r := searchRun{dir: t.TempDir()}
	t.Setenv("XDG_CACHE_HOME", filepath.Join(r.dir, "cache"))
	r.model = writeModel(t, r.dir, "three.onnx", threeOutliersModel())
	r.data = outlierInputs(t, r.dir, 256, "x1", "x2", "x3", "z")
	r.out, r.emitted, r.report = filepath.Join(r.dir, "q.onnx"), filepath.Join(r.dir, "q.yaml"), filepath.Join(r.dir, "r.json")
	args := append([]string{"quantize", "--model", r.model, "--preset", "w8a8", "-o", r.out, "--emit-config", r.emitted, "--report", r.report}, flags...)
	r.code, _, r.stderr = runCLI(t, append(args, r.data...)...)
	return r
}

// TestSearchKeepsBestShortOfTarget checks, on threeOutliersModel (w8a8,
// 256 samples, 4 held out), that a target the budget does not reach
// (--target-sqnr 60, 3 evaluations: too few for the float batch, which
// reaches it, TestSearchFloatBatch) ends with exit 3 and the best model
// measured: every point in 16 bits (5.79 → 46.38 dB) is kept though short
// of the target, since it gains far more than 0.05 dB per cost over the
// configured model, rather than climbing from the configured model one
// unit at a time (6.26 dB there: each x alone moves the worst of three
// outputs little); the emitted config writes that model.
func TestSearchKeepsBestShortOfTarget(t *testing.T) {
	r := threeOutliersSearch(t, "--target-sqnr", "60", "--search-budget", "3")
	model, data, out, emitted, report, code, stderr := r.model, r.data, r.out, r.emitted, r.report, r.code, r.stderr
	dir := r.dir
	if code != ExitGate || !strings.Contains(stderr, "search: batch 1 kept, short of the target") {
		t.Fatalf("exit %d, want %d keeping batch 1 short of the target: %s", code, ExitGate, stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	s := rep.Search
	if s == nil || s.Met || s.ReachedSQNR < 40 || s.Trace[0].Unit != "batch 1" || s.Trace[0].Verdict != "kept" {
		t.Fatalf("report's search: %+v, want batch 1 kept, 40 dB or more, target not met", s)
	}
	checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, "again.onnx"), append([]string{"--model", model}, data...)...)
}

// TestSearchFloatBatch checks, on threeOutliersModel (w8a8, 256 samples,
// 4 held out, --target-sqnr 60, 12 evaluations), that when every point in
// 16 bits falls short (46.38 dB: x1, x2 and x3, whose feature 0 is 200
// times the others, lose the other features even on a 16-bit grid), the
// points' own quantization noise, measured on the configured and the
// current model, picks the x inputs for float: the second try, all three,
// meets the target (80.47 dB) and is kept, and the emitted config writes
// the model.
func TestSearchFloatBatch(t *testing.T) {
	r := threeOutliersSearch(t, "--target-sqnr", "60", "--search-budget", "12")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"search: batch 1 kept, short of the target", "the own quantization noise of every point of the configured model",
		"the own quantization noise of every point of the current model", "batch 2 by the points' own noise", "search: batch 2 kept"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, r.report, &rep)
	s := rep.Search
	if s == nil || !s.Met || s.ReachedSQNR < 60 {
		t.Fatalf("report's search: %+v, want the target met", s)
	}
	var floats []string
	for _, p := range s.Promotions {
		if p.To == "float" {
			floats = append(floats, p.Unit)
		}
	}
	slices.Sort(floats)
	if strings.Join(floats, ",") != "x1,x2,x3" {
		t.Errorf("units in float %v, want x1, x2 and x3", floats)
	}
	checkEmittedConfigReproduces(t, r.emitted, r.out, filepath.Join(r.dir, "again.onnx"), append([]string{"--model", r.model}, r.data...)...)
}

func TestSearchUsageErrors(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no data", args: []string{"--target-sqnr", "30"}, wantErr: "--target-sqnr"},
		{name: "no budget", args: []string{"--data", data, "--target-sqnr", "30", "--search-budget", "0"}, wantErr: "--search-budget"},
		{name: "config onto the model", args: []string{"--data", data, "--emit-config", model}, wantErr: "--emit-config"},
		{name: "two targets", args: []string{"--data", data, "--target-sqnr", "30", "--target-top1", "99"}, wantErr: "give one"},
		{name: "metric without command", args: []string{"--data", data, "--target-metric", "0.5"}, wantErr: "--target-metric needs --eval-cmd"},
		{name: "command without metric", args: []string{"--data", data, "--eval-cmd", "true {model}"}, wantErr: "--eval-cmd needs --target-metric"},
		{name: "command without model", args: []string{"--data", data, "--eval-cmd", "true", "--target-metric", "1"}, wantErr: "no {model}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"quantize", "--model", model, "--preset", "w8a8", "-o", filepath.Join(dir, "q.onnx")}, tt.args...)
			code, _, stderr := runCLI(t, args...)
			if code != ExitUsage || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr %q: want exit %d naming %s", code, stderr, ExitUsage, tt.wantErr)
			}
		})
	}
}

// TestSearchEvalCmd checks --eval-cmd on outlierInputModel (w8a8, 256
// samples of outlierData, 4 held out) with a fake evaluator that prints
// the number of times it has been called: 1 for the quantized model, one
// more after each promotion (the first is x to int16), one for the final
// check of the emitted config. --target-metric 2 is met after the first
// promotion (3 calls); 20 is not: the search raises each unit to int16
// (y1 straight to float) and then to float, until none is left (16
// calls), and exits 3. A failing command fails the run (exit 1) with its
// standard error shown.
func TestSearchEvalCmd(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	data := outlierData(t, dir)
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, target string
		body         string
		wantCode     int
		wantCalls    int
		wantStderr   string
	}{
		{name: "met", target: "2", body: "test -s \"$1\" || exit 9\necho x >> calls\nwc -l < calls\n", wantCode: 0, wantCalls: 3, wantStderr: "kept: --eval-cmd metric 2"},
		{name: "not met", target: "20", body: "test -s \"$1\" || exit 9\necho x >> calls\necho progress\nwc -l < calls\n", wantCode: ExitGate, wantCalls: 16, wantStderr: "--target-metric 20 not met"},
		{name: "failing", target: "2", body: "echo 'evaluator: no labels in /data' >&2\nexit 4\n", wantCode: ExitFailure, wantStderr: "evaluator: no labels in /data"},
		{name: "no number", target: "2", body: "echo done\n", wantCode: ExitFailure, wantStderr: `last line "done" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
			eval := script(strings.ReplaceAll(tt.name, " ", "_")+".sh", "cd "+work+"\n"+tt.body)
			code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "--preset", "w8a8", "-o", filepath.Join(work, "q.onnx"),
				"--eval-cmd", eval + " {model}", "--target-metric", tt.target}, data...)...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("exit %d, want %d with %q in stderr:\n%s", code, tt.wantCode, tt.wantStderr, stderr)
			}
			if tt.wantCalls > 0 {
				b, err := os.ReadFile(filepath.Join(work, "calls"))
				if err != nil {
					t.Fatal(err)
				}
				if n := strings.Count(string(b), "\n"); n != tt.wantCalls {
					t.Errorf("evaluator called %d times, want %d", n, tt.wantCalls)
				}
			}
		})
	}
}

// TestSearchEvalCmdBatch checks --eval-cmd with a metric no single step
// moves far enough: a fake evaluator prints the model file's size in
// bytes, and the target is that of the w8a8 outlierInputModel plus 90,
// which only two or more of its three weights in int16 reach (+32, +64
// and +32 bytes). Under --search-budget 8 the single steps have 4
// evaluations, two per step kept (its measurement, its metric), and fall
// short; the batch of every 8-bit point in 16 bits meets the target and
// is kept, the back-off lowers what the size can spare and keeps raised
// what it cannot (each group judged by the evaluator), and the emitted
// config writes the model byte for byte, above the target.
func TestSearchEvalCmdBatch(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	data := outlierData(t, dir)
	plain := filepath.Join(dir, "plain.onnx")
	if code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "--preset", "w8a8", "-o", plain}, data...)...); code != 0 {
		t.Fatalf("plain quantize: exit %d: %s", code, stderr)
	}
	st, err := os.Stat(plain)
	if err != nil {
		t.Fatal(err)
	}
	target := st.Size() + 90
	eval := filepath.Join(dir, "size.sh")
	if err := os.WriteFile(eval, []byte("#!/bin/sh\nwc -c < \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, emitted, report := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "q.yaml"), filepath.Join(dir, "r.json")
	code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "--preset", "w8a8", "-o", out, "--emit-config", emitted, "--report", report,
		"--eval-cmd", eval + " {model}", "--target-metric", strconv.FormatInt(target, 10), "--search-budget", "8"}, data...)...)
	if code != 0 || !strings.Contains(stderr, "every 8-bit point in 16 bits") {
		t.Fatalf("exit %d, want 0 after the batch of every 8-bit point in 16 bits:\n%s", code, stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	s := rep.Search
	if s == nil || !s.Met || s.Reached < float64(target) || s.Evaluations > 8 {
		t.Fatalf("report's search: %+v, want met at %d or more within 8 evaluations", s, target)
	}
	kept := false
	for _, step := range s.Trace {
		if strings.HasPrefix(step.Unit, "batch ") && step.Verdict == "kept" {
			kept = true
		}
	}
	if !kept {
		t.Errorf("no batch kept in the trace: %+v", s.Trace)
	}
	// The back-off is judged by the evaluator: a group lowered keeps the
	// size at the target, one that would not stays raised.
	backedOff, refused := 0, 0
	for _, step := range s.Trace {
		if step.Metric == nil || strings.HasPrefix(step.Unit, "batch ") {
			continue
		}
		switch {
		case step.Verdict == "backed off" && *step.Metric < float64(target):
			t.Errorf("backed off %+v below the target %d", step, target)
		case step.Verdict == "backed off":
			backedOff++
		case *step.Metric < float64(target):
			refused++
		}
	}
	if backedOff == 0 || refused == 0 {
		t.Errorf("back-off: %d groups lowered, %d refused below the target; want some of each: %+v", backedOff, refused, s.Trace)
	}
	got, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size() < target {
		t.Errorf("the written model has %d bytes, below the target %d", got.Size(), target)
	}
	checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, "again.onnx"), append([]string{"--model", model}, data...)...)
}

// TestSearchTargetTop1 checks --target-top1 on fragileModel (w8a8, 24
// samples of fragileData, 4 held out): int8 rounds the output "small" to
// zeros, whose top-1 class agrees with the float model's on no held-out
// row. The Concat's shared group "cat" (5 activations) gains 10.6 dB in
// int16 for cost 5, measured, where the analysis promised float's 39.4
// dB: the float step's estimate, from the analysis's model, counts at
// the share of its promise the int16 measurement kept (10.6/39.4), which
// the int16 step beats per cost. It is made, brings two rows of four
// back and meets --target-top1 50 in one promotion and two evaluations
// (the step's, the top-1's).
func TestSearchTargetTop1(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	report := filepath.Join(dir, "r.json")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--data", data, "--preset", "w8a8", "--target-top1", "50",
		"-o", filepath.Join(dir, "q.onnx"), "--report", report)
	if code != 0 || !strings.Contains(stderr, "search: top-1 agreement 0% on 4 held-out samples, target 50%") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	if s := rep.Search; s == nil || !s.Met || s.Target != "--target-top1 50" || s.Start != 0 || s.Reached != 50 || s.Evaluations != 2 ||
		len(s.Promotions) != 1 || s.Promotions[0].Unit != "cat" || s.Promotions[0].To != "int16" {
		t.Errorf("report's search: %+v, want --target-top1 50 met at 50 from 0 by cat to int16 after 2 evaluations", s)
	}
}

// TestSearchSensitivityCache checks, on outlierInputModel (w8a8, 256
// samples of outlierData, 4 held out), that the search measures the whole
// tensor sensitivity analysis (each unit quantized alone and left in
// float alone: its noise estimates need the first) and caches it, and
// that it reads the analysis `coreaiq sensitivity --group tensor` cached
// for the same inputs.
func TestSearchSensitivityCache(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	data := outlierData(t, dir)
	search := append([]string{"quantize", "--model", model, "--preset", "w8a8", "--target-sqnr", "15", "-o", filepath.Join(dir, "q.onnx")}, data...)
	cached := func(t *testing.T, cache string) []string {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(cache, "coreaiq", "sensitivity", "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	t.Run("search alone", func(t *testing.T) {
		cache := filepath.Join(dir, "cache1")
		t.Setenv("XDG_CACHE_HOME", cache)
		if code, _, stderr := runCLI(t, search...); code != 0 || strings.Contains(stderr, "cached result") {
			t.Fatalf("exit %d, want 0 measuring: %s", code, stderr)
		}
		files := cached(t, cache)
		if len(files) != 1 {
			t.Fatalf("cached %v, want one result", files)
		}
		var r compare.Sensitivity
		readJSONFile(t, files[0], &r)
		if r.Grouping != compare.GroupByTensor || len(r.Groups) == 0 {
			t.Fatalf("cached %+v, want a tensor analysis", r)
		}
		for _, g := range r.Groups {
			if math.IsNaN(float64(g.OnlySQNR)) || math.IsNaN(float64(g.ExceptSQNR)) {
				t.Errorf("cached group %+v, want both figures measured", g)
			}
		}
		if code, _, stderr := runCLI(t, search...); code != 0 || !strings.Contains(stderr, "cached result") {
			t.Errorf("second search: exit %d, want 0 from the cache: %s", code, stderr)
		}
	})
	t.Run("full analysis first", func(t *testing.T) {
		cache := filepath.Join(dir, "cache2")
		t.Setenv("XDG_CACHE_HOME", cache)
		if code, _, stderr := runCLI(t, append([]string{"sensitivity", "--model", model, "--preset", "w8a8", "--group", "tensor"}, data...)...); code != 0 {
			t.Fatalf("sensitivity: exit %d: %s", code, stderr)
		}
		if code, _, stderr := runCLI(t, search...); code != 0 || !strings.Contains(stderr, "cached result") {
			t.Errorf("search: exit %d, want 0 reading the analysis: %s", code, stderr)
		}
		if files := cached(t, cache); len(files) != 1 {
			t.Errorf("cached %v, want the analysis alone", files)
		}
	})
}

// outlierWeightModel is one Gemm whose weight rows each hold one large
// value (5, at input feature 0) and small ones (±0.05) elsewhere, read
// by an input whose feature 0 is always 0 (outlierWeightData): the output
// is carried by the small weights, which int8's per-channel scale (5/127)
// rounds to 0 or ±0.04, while int16's keeps them.
func outlierWeightModel() *testmodels.Builder {
	b := testmodels.New("outlier_weight", 17)
	b.Input("x", tensor.Float, "N", 8).Output("y", tensor.Float, "N", 4)
	rng := rand.New(rand.NewPCG(5, 7))
	w := make([]float32, 4*8)
	for i := range w {
		w[i] = (rng.Float32()*2 - 1) * 0.05
		if i%8 == 0 {
			w[i] = 5
		}
	}
	b.Init("fc.weight", []int64{4, 8}, w).RandomInit("fc.bias", 0.01, 4)
	b.Node("Gemm", "/fc/Gemm", []string{"x", "fc.weight", "fc.bias"}, []string{"y"},
		testmodels.AttrFloat("alpha", 1), testmodels.AttrFloat("beta", 1), testmodels.AttrInt("transB", 1))
	return b
}

// outlierWeightData writes 64 samples of outlierWeightModel's input from
// a fixed seed, uniform in [offset-1, offset+1) but for feature 0, which
// is 0.
func outlierWeightData(t *testing.T, dir string, offset float32) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(17, 23))
	x := tensor.New(tensor.Float, 64, 8)
	for i := range x.Float32s() {
		if i%8 != 0 {
			x.Float32s()[i] = rng.Float32()*2 - 1 + offset
		}
	}
	return writeNPY(t, dir, "x.npy", x)
}

// TestSearchRaisesWeightToInt16 checks, on outlierWeightModel (64 samples
// of outlierWeightData, 4 held out), that --target-sqnr 30 raises the
// weight fc.weight to int16 (W16) and nothing else, from the default
// preset given and from no quantization config at all (the default's
// specs); that the emitted config gives /fc/Gemm an int16 weight, says
// the points raised, validates and writes the searched model byte for
// byte; and that the report counts one weight of two activations and one
// weight raised. With GPTQ in the config too, the raised weight is
// written from its float values, not from GPTQ's int8 rounding of them
// (which int16 would keep, and the target would be missed); the
// emitted config's quantize then rounds the int16 weight by GPTQ, whose
// codes differ from the search's round-to-nearest ones, so that case
// checks the target met, not the bytes.
func TestSearchRaisesWeightToInt16(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier_weight.onnx", outlierWeightModel())
	data := outlierWeightData(t, dir, 0)
	tests := []struct {
		name    string
		args    []string
		rounded bool
	}{
		{name: "preset", args: []string{"--preset", "w8a8"}},
		{name: "default", args: nil},
		{name: "gptq", args: []string{"--preset", "w8a8", "--algorithms", "gptq"}, rounded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, emitted, report := filepath.Join(dir, tt.name+".onnx"), filepath.Join(dir, tt.name+".yaml"), filepath.Join(dir, tt.name+".json")
			args := append([]string{"quantize", "--model", model, "--data", data, "--target-sqnr", "30", "-o", out, "--emit-config", emitted, "--report", report}, tt.args...)
			code, _, stderr := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			cfg, text := readEmitted(t, emitted)
			entry := soleGemmEntry(t, cfg, text)
			w, ok := entry.Config.State.Lookup(-1, "weight")
			if !ok || w.Spec == nil || w.Spec.DType != spec.Int16 {
				t.Errorf("/fc/Gemm's weight is not int16:\n%s", text)
			}
			if in, ok := entry.Config.Input.Lookup(0); !ok || in.Spec == nil || in.Spec.DType != spec.Int8 {
				t.Errorf("/fc/Gemm's input is not left int8:\n%s", text)
			}
			if want := "1 of 3 points (33.3%) above their configured precision: 0 of 2 activations, 1 of 1 weights"; !strings.Contains(string(text), want) {
				t.Errorf("the emitted config does not say %q:\n%s", want, text)
			}
			if !tt.rounded {
				checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, tt.name+".again.onnx"), "--model", model, "--data", data)
			}
			var rep struct{ Search *searchReport }
			readJSONFile(t, report, &rep)
			if s := rep.Search; s == nil || !s.Met || s.Points != 3 || s.Raised != 1 ||
				s.Counts != (pointCounts{Activations: 2, Weights: 1, RaisedWeights: 1}) ||
				len(s.Promotions) != 1 || s.Promotions[0].Unit != "fc.weight" || s.Promotions[0].To != "int16" {
				t.Errorf("report's search: %+v, want met, 3 points (2 activations, 1 weight), fc.weight raised to int16", s)
			}
		})
	}
}

// TestPickBatch checks the batch's choice: each unit's best step by
// estimate per cost, best first, until the estimates cover the gap or
// the limit is reached; a unit with no positive estimate, or whose step
// no config writes, is left out.
func TestPickBatch(t *testing.T) {
	unit := func(name string, wide bool, int16Est, floatEst float64) *searchUnit {
		un := &searchUnit{Name: name, Values: []string{name}, Points: []string{name}}
		if wide {
			un.Wide = []string{name}
		}
		un.est = [levelFloat + 1]float64{0, int16Est, floatEst}
		return un
	}
	tests := []struct {
		name  string
		units []*searchUnit
		gap   float64
		limit int
		want  string
	}{
		{name: "int16 costs less", units: []*searchUnit{unit("a", true, 4, 4), unit("b", true, 1, 6)}, gap: 10, limit: 4,
			want: "a to int16, b to float"},
		{name: "gap covered", units: []*searchUnit{unit("a", true, 4, 4), unit("b", true, 3, 3), unit("c", true, 2, 2)}, gap: 6, limit: 4,
			want: "a to int16, b to int16"},
		{name: "limit", units: []*searchUnit{unit("a", true, 1, 1), unit("b", true, 1, 1), unit("c", true, 1, 1)}, gap: 30, limit: 2,
			want: "a to int16, b to int16"},
		{name: "no gain left out", units: []*searchUnit{unit("a", true, -1, -2), unit("b", false, 0, 2), unit("c", true, 0.5, 0.5)}, gap: 30, limit: 4,
			want: "b to float, c to int16"},
		{name: "inexpressible left out", units: func() []*searchUnit {
			a := unit("a", true, 5, 5)
			a.inexpressible[levelInt16] = "module boundary"
			return []*searchUnit{a, unit("b", true, 1, 1)}
		}(), gap: 30, limit: 4, want: "a to float, b to int16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeMoves(pickBatch(tt.units, tt.gap, tt.limit)); got != tt.want {
				t.Errorf("pickBatch = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBackOffSize pins the back-off's predicted group: units raised to
// int16 (their noise quantized alone, as power relative to the signal's)
// are lowered, least noise first, while the noise they add, times the
// noise batch's scale, fits between the current figure and the target; at
// least one, none past a unit raised again since.
func TestBackOffSize(t *testing.T) {
	member := func(name string, noise float64) batchMember {
		un := &searchUnit{Name: name, Values: []string{name}, Points: []string{name}, Wide: []string{name}, level: levelInt16, noise: noise}
		return batchMember{back: searchMove{un, levelConfigured}, to: levelInt16}
	}
	quiet := func() []batchMember {
		return []batchMember{member("a", 1e-4), member("b", 2e-4), member("c", 4e-4), member("d", 1e-2)}
	}
	tests := []struct {
		name            string
		pending         []batchMember
		scale           float64
		current, target float64
		want            int
	}{
		// Room from 40 dB to 30 dB: 1e-3 − 1e-4 = 9e-4; a, b and c add 7e-4.
		{name: "three fit", pending: quiet(), scale: 1, current: 40, target: 30, want: 3},
		// Scaled twice: a and b add 6e-4, c would reach 1.4e-3.
		{name: "scaled", pending: quiet(), scale: 2, current: 40, target: 30, want: 2},
		{name: "none fits, one tried", pending: quiet(), scale: 100, current: 40, target: 30, want: 1},
		{name: "at the target", pending: quiet(), scale: 1, current: 30, target: 30, want: 1},
		{name: "stops at a unit raised again", pending: func() []batchMember {
			p := quiet()
			p[1].back.un.level = levelFloat
			return p
		}(), scale: 1, current: 40, target: 30, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &searchState{noiseScale: tt.scale}
			if got := st.backOffSize(tt.pending, tt.current, tt.target); got != tt.want {
				t.Errorf("backOffSize = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSearchRaisedWeightBiasCorrectedAsEmitted checks, on
// outlierWeightModel (64 samples of outlierWeightData with mean 1, whose
// layer error has a mean that bias correction removes; 4 held out) with
// w8a8 and bias correction, that the search measures a weight it raises
// with its layer's bias as a quantize from the emitted config writes it:
// fc.weight in float gains (its bias as it was: a float weight has no
// error, and the search raised x, to no gain, and stopped at 11.08 dB);
// the search raises it to int16, its bias corrected for the int16
// weight's error, and meets --target-sqnr 30; and the emitted config
// writes the searched model byte for byte, so the search's figure is the
// emitted config's (an uncorrected bias with the int16 weight measured
// 40.67 dB where the emitted config's model has 42.09 dB).
func TestSearchRaisedWeightBiasCorrectedAsEmitted(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier_weight.onnx", outlierWeightModel())
	data := outlierWeightData(t, dir, 1)
	preset, err := config.PresetYAML("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "corrected.yaml")
	if err := os.WriteFile(cfg, append(preset, "algorithms:\n  bias_correction: true\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	out, emitted, report := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "q.yaml"), filepath.Join(dir, "r.json")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--config", cfg, "--data", data, "--target-sqnr", "30",
		"-o", out, "--emit-config", emitted, "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	if s := rep.Search; s == nil || !s.Met || len(s.Promotions) != 1 || s.Promotions[0].Unit != "fc.weight" || s.Promotions[0].To != "int16" {
		t.Fatalf("report's search: %+v, want fc.weight raised to int16, the target met", s)
	}
	var searched compare.DB
	for _, st := range rep.Search.Trace {
		if st.Verdict == "kept" {
			searched = st.SQNR
		}
	}
	if d := math.Abs(float64(searched - rep.Search.ReachedSQNR)); d > 0.01 {
		t.Errorf("the search measured %.2f dB, the emitted config's model has %.2f dB", float64(searched), float64(rep.Search.ReachedSQNR))
	}
	t.Logf("the search measured %.2f dB, the emitted config's model has %.2f dB", float64(searched), float64(rep.Search.ReachedSQNR))
	checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, "again.onnx"), "--model", model, "--data", data)
}

// rareOutlierModel is one Gemm from x to y whose input x carries, in one
// sample of 16, a value of 60 on feature 3 among values in [-1, 1)
// (rareOutlierData): a moving-average range, averaging the batches'
// maxima, stays far below 60 and clips it.
func rareOutlierModel() *testmodels.Builder {
	b := testmodels.New("rare_outlier", 17)
	b.Input("x", tensor.Float, "N", 8).Output("y", tensor.Float, "N", 4)
	b.RandomInit("fc.weight", 0.5, 4, 8).RandomInit("fc.bias", 0.1, 4)
	b.Node("Gemm", "/fc/Gemm", []string{"x", "fc.weight", "fc.bias"}, []string{"y"},
		testmodels.AttrFloat("alpha", 1), testmodels.AttrFloat("beta", 1), testmodels.AttrInt("transB", 1))
	return b
}

// rareOutlierData writes 128 samples of rareOutlierModel's input from a
// fixed seed, uniform in [-1, 1) but for feature 3 of every 16th sample
// (15, 31, ..., 127: one of them held out), which is 60; and the 4 last
// samples alone.
func rareOutlierData(t *testing.T, dir string) (all, heldOut string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(29, 31))
	x := tensor.New(tensor.Float, 128, 8)
	for i := range x.Float32s() {
		x.Float32s()[i] = rng.Float32()*2 - 1
		if sample, feature := i/8, i%8; sample%16 == 15 && feature == 3 {
			x.Float32s()[i] = 60
		}
	}
	last := tensor.New(tensor.Float, 4, 8)
	copy(last.Float32s(), x.Float32s()[124*8:])
	return writeNPY(t, dir, "x.npy", x), writeNPY(t, dir, "x_held_out.npy", last)
}

// TestSearchInt16RangeUnclipped checks, on rareOutlierModel (w8a8: moving
// average ranges; 128 samples of rareOutlierData, 4 held out), that a
// point the search raises to 16 bits takes its observed range: the
// emitted config gives x an int16 global_minmax spec and the model's x
// the range 60 at the top; that config reproduces the searched model
// byte for byte and validates; and the same points in 16 bits with the
// moving-average ranges kept (the emitted config with its calculator
// changed back) give the held-out samples a lower SQNR by 20 dB or more.
func TestSearchInt16RangeUnclipped(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "rare_outlier.onnx", rareOutlierModel())
	data, heldOut := rareOutlierData(t, dir)
	out, emitted, report := filepath.Join(dir, "s.onnx"), filepath.Join(dir, "s.yaml"), filepath.Join(dir, "s.json")
	code, _, stderr := runCLI(t, "quantize", "--model", model, "--preset", "w8a8", "--data", data, "--target-sqnr", "40",
		"-o", out, "--emit-config", emitted, "--report", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	cfg, text := readEmitted(t, emitted)
	in, ok := soleGemmEntry(t, cfg, text).Config.Input.Lookup(0)
	if !ok || in.Spec == nil || in.Spec.DType != spec.Int16 || in.Spec.Calculator.Type != spec.GlobalMinMax {
		t.Fatalf("/fc/Gemm's input is not int16 with global_minmax:\n%s", text)
	}
	var rep struct{ Tensors []reportTensor }
	readJSONFile(t, report, &rep)
	for _, tr := range rep.Tensors {
		if tr.Value == "x" && (tr.Observed == nil || tr.Observed.Max != 60) {
			t.Errorf("x's range %+v, want the observed maximum 60", tr.Observed)
		}
	}

	checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, "again.onnx"), "--model", model, "--data", data)

	clipping := strings.ReplaceAll(string(text), "{type: global_minmax}", "{type: moving_average, averaging_constant: 0.01}")
	if clipping == string(text) {
		t.Fatalf("no global_minmax calculator to change in:\n%s", text)
	}
	clipped, clippedModel := filepath.Join(dir, "clipped.yaml"), filepath.Join(dir, "clipped.onnx")
	if err := os.WriteFile(clipped, []byte(clipping), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "quantize", "--config", clipped, "--model", model, "--data", data, "-o", clippedModel); code != 0 {
		t.Fatalf("quantize --config %s: exit %d: %s", clipped, code, stderr)
	}
	sqnr := func(quantized string) float64 {
		t.Helper()
		code, stdout, stderr := runCLI(t, "compare", model, quantized, "--data", heldOut, "--format", "json")
		if code != 0 {
			t.Fatalf("compare %s: exit %d: %s", quantized, code, stderr)
		}
		var doc struct {
			Outputs []struct {
				SQNR float64 `json:"sqnr_db"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || len(doc.Outputs) != 1 {
			t.Fatalf("compare %s: %v\n%s", quantized, err, stdout)
		}
		return doc.Outputs[0].SQNR
	}
	unclippedDB, clippedDB := sqnr(out), sqnr(clippedModel)
	if unclippedDB < 40 || unclippedDB < clippedDB+20 {
		t.Errorf("held-out SQNR %.2f dB with the observed ranges, %.2f dB with moving averages: want 40 dB or more, 20 above", unclippedDB, clippedDB)
	}
	t.Logf("held-out SQNR: %.2f dB with the observed ranges, %.2f dB with moving averages, same points in 16 bits", unclippedDB, clippedDB)
}

// checkEmittedConfigReproduces quantizes again with the emitted config
// and the given flags into again, and checks that the bytes are those of
// the searched model out and that config validate accepts the config.
func checkEmittedConfigReproduces(t *testing.T, emitted, out, again string, flags ...string) {
	t.Helper()
	args := append([]string{"quantize", "--config", emitted, "-o", again}, flags...)
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("quantize --config %s: exit %d: %s", emitted, code, stderr)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("quantize --config %s writes %d bytes that differ from the searched model's %d", emitted, len(got), len(want))
	}
	if code, stdout, stderr := runCLI(t, "config", "validate", emitted); code != 0 {
		t.Errorf("config validate: exit %d: %s%s", code, stdout, stderr)
	}
}

// readEmitted reads and parses a config written by --emit-config,
// failing t when it does not; the text comes back for messages.
func readEmitted(t *testing.T, path string) (*config.Config, []byte) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(text, path)
	if err != nil {
		t.Fatalf("emitted config does not parse: %v\n%s", err, text)
	}
	return cfg, text
}

// soleGemmEntry is the emitted config's one op_name_config entry, which
// must be /fc/Gemm's.
func soleGemmEntry(t *testing.T, cfg *config.Config, text []byte) *config.OpEntry {
	t.Helper()
	if n := len(cfg.Quant.Global.OpNames); n != 1 || cfg.Quant.Global.OpNames[0].Key != "/fc/Gemm" {
		t.Fatalf("%d op_name_config entries, want one for /fc/Gemm:\n%s", n, text)
	}
	return cfg.Quant.Global.OpNames[0]
}

// threeOutliersModel is outlierInputModel's fragile branch three times,
// /first/Gemm, /second/Gemm and /third/Gemm reading the inputs x1, x2 and
// x3 (each with feature 0 spanning ±200 and meeting zero weights) to the
// outputs y1, y2 and y3, beside a quiet branch from z through /fourth/Gemm
// and /fifth/Gemm to y4: three units each hold one output at about 9 dB,
// and the worst output meets a target only when all three are raised.
func threeOutliersModel() *testmodels.Builder {
	b := testmodels.New("three_outliers", 17)
	rng := rand.New(rand.NewPCG(3, 5))
	gemm := func(name, in, w, bias, out string) {
		b.Node("Gemm", name, []string{in, w, bias}, []string{out},
			testmodels.AttrFloat("alpha", 1), testmodels.AttrFloat("beta", 1), testmodels.AttrInt("transB", 1))
	}
	for i, name := range []string{"first", "second", "third"} {
		x, y := fmt.Sprintf("x%d", i+1), fmt.Sprintf("y%d", i+1)
		b.Input(x, tensor.Float, "N", 8).Output(y, tensor.Float, "N", 4)
		w := make([]float32, 4*8)
		for i := range w {
			if i%8 != 0 {
				w[i] = rng.Float32()*2 - 1
			}
		}
		b.Init(name+".weight", []int64{4, 8}, w).RandomInit(name+".bias", 0.1, 4)
		gemm("/"+name+"/Gemm", x, name+".weight", name+".bias", y)
	}
	b.Input("z", tensor.Float, "N", 8).Output("y4", tensor.Float, "N", 4)
	b.RandomInit("fourth.weight", 0.5, 8, 8).RandomInit("fourth.bias", 0.1, 8)
	b.RandomInit("fifth.weight", 0.5, 4, 8).RandomInit("fifth.bias", 0.1, 4)
	gemm("/fourth/Gemm", "z", "fourth.weight", "fourth.bias", "h")
	gemm("/fifth/Gemm", "h", "fifth.weight", "fifth.bias", "y4")
	return b
}

// TestSearchNoiseBatch checks, on threeOutliersModel (w8a8, 256 samples
// of uniform data, the x inputs' feature 0 times 200, 4 held out), that
// the search's first evaluation is the batch the units' noise estimates
// pick, x3, x2 and x1 to int16 (the loudest first) and nothing else,
// that it is kept and meets --target-sqnr 15 (15.48 dB, from 5.79), that
// backing off any of them falls short, and that the emitted config has
// entries for the three Gemms alone and writes the model byte for byte.
func TestSearchNoiseBatch(t *testing.T) {
	r := threeOutliersSearch(t, "--target-sqnr", "15")
	model, data, out, emitted, report, code, stderr := r.model, r.data, r.out, r.emitted, r.report, r.code, r.stderr
	dir := r.dir
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "search 1/630: batch 1 by the noise estimates") || !strings.Contains(stderr, "x3 to int16, x2 to int16, x1 to int16 (cost 3)") ||
		!strings.Contains(stderr, "search: batch 1 kept") {
		t.Errorf("want the first evaluation to be x1, x2 and x3 to int16 by the noise estimates, kept; stderr:\n%s", stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	if s := rep.Search; s == nil || !s.Met || s.Raised != 3 || len(s.Promotions) != 3 {
		t.Fatalf("report's search: %+v, want met with the three x raised", s)
	}
	for _, st := range rep.Search.Trace[1:] {
		if st.Verdict == "backed off" {
			t.Errorf("backed off %+v: each x is needed", st)
		}
	}
	cfg, text := readEmitted(t, emitted)
	var keys []string
	for _, e := range cfg.Quant.Global.OpNames {
		keys = append(keys, e.Key)
	}
	if strings.Join(keys, ",") != "/first/Gemm,/second/Gemm,/third/Gemm" {
		t.Errorf("entries for %v, want the three fragile Gemms:\n%s", keys, text)
	}
	checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, "again.onnx"), append([]string{"--model", model}, data...)...)
}

// TestSearchSharedSqueezeNet checks issue-sized figures on the shared
// squeezenet1.0-fp32 (its calibration and evaluation files joined, the
// last 8 evaluation images held out, the default budget): --target-sqnr
// 30 under --preset accurate starts at 23.32 dB and meets the target
// (30.88 dB) with 9 of its 67 points raised (13.4%), at most 15% here.
func TestSearchSharedSqueezeNet(t *testing.T) {
	dir := filepath.Join(testutil.SharedModels(t), "squeezenet1.0-fp32")
	calib, err := npy.ReadNPYFile(filepath.Join(dir, "calib_data_0.npy"))
	if err != nil {
		t.Fatal(err)
	}
	eval, err := npy.ReadNPYFile(filepath.Join(dir, "eval_data_0.npy"))
	if err != nil {
		t.Fatal(err)
	}
	shape := slices.Clone(calib.Shape)
	shape[0] += eval.Shape[0]
	joined := tensor.New(tensor.Float, shape...)
	copy(joined.Float32s(), calib.Float32s())
	copy(joined.Float32s()[len(calib.Float32s()):], eval.Float32s())
	tmp := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(tmp, "cache"))
	report := filepath.Join(tmp, "r.json")
	code, _, stderr := runCLI(t, "quantize", "--model", filepath.Join(dir, "model.onnx"), "--preset", "accurate",
		"--data", "data_0="+writeNPY(t, tmp, "joined.npy", joined), "--eval-samples", "8", "--target-sqnr", "30",
		"-o", filepath.Join(tmp, "q.onnx"), "--emit-config", filepath.Join(tmp, "q.yaml"), "--report", report, "--log-level", "error")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	s := rep.Search
	if s == nil || !s.Met || s.ReachedSQNR < 30 || s.Points != 67 || float64(s.Raised) > 0.15*float64(s.Points) {
		t.Fatalf("report's search: %+v, want 30 dB met with at most 15%% of the 67 points raised", s)
	}
	t.Logf("%.2f → %.2f dB, %s, %d evaluations", s.StartSQNR, s.ReachedSQNR, s.Counts, s.Evaluations)
}

// TestSearchReadsMergedSensitivity checks, on threeOutliersModel (w8a8,
// --target-sqnr 15), that the search reads its analysis from
// --sensitivity FILE, the merge of two shards of coreaiq sensitivity
// --group tensor run beside it: with an empty cache it measures nothing
// and writes the model and config of a run that measured its own; and
// that a shard, another grouping and an analysis of other held-out
// samples are refused with exit 2 and the reason.
func TestSearchReadsMergedSensitivity(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "three.onnx", threeOutliersModel())
	data := outlierInputs(t, dir, 64, "x1", "x2", "x3", "z")
	path := func(name string) string { return filepath.Join(dir, name) }
	run := func(t *testing.T, cache string, args ...string) (string, int) {
		t.Helper()
		t.Setenv("XDG_CACHE_HOME", path(cache))
		code, _, stderr := runCLI(t, append(append(args, "--model", model, "--preset", "w8a8"), data...)...)
		return stderr, code
	}
	analysis := func(t *testing.T, out string, extra ...string) {
		t.Helper()
		if stderr, code := run(t, "cache-sens", append([]string{"sensitivity", "--group", "tensor", "--no-cache", "-o", path(out)}, extra...)...); code != 0 {
			t.Fatalf("sensitivity %v: exit %d: %s", extra, code, stderr)
		}
	}
	analysis(t, "shard0.json", "--shard", "0/2")
	analysis(t, "shard1.json", "--shard", "1/2")
	analysis(t, "node.json", "--group", "node")
	analysis(t, "eval8.json", "--eval-samples", "8")
	if code, _, stderr := runCLI(t, "sensitivity", "merge", "-o", path("merged.json"), path("shard0.json"), path("shard1.json")); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	search := func(name string) []string {
		return []string{"quantize", "--target-sqnr", "15", "-o", path(name + ".onnx"), "--emit-config", path(name + ".yaml")}
	}
	// Both runs write the same paths (the model's rule metadata names the
	// config's): the first run's files are kept to compare.
	stderr, code := run(t, "cache-own", search("q")...)
	if code != 0 || !strings.Contains(stderr, "msg=sensitivity") {
		t.Fatalf("search measuring its analysis: exit %d: %s", code, stderr)
	}
	var own [][]byte
	for _, ext := range []string{".onnx", ".yaml"} {
		b, err := os.ReadFile(path("q" + ext))
		if err != nil {
			t.Fatal(err)
		}
		own = append(own, b)
	}
	stderr, code = run(t, "cache-empty", append(search("q"), "--sensitivity", path("merged.json"))...)
	if code != 0 || strings.Contains(stderr, "msg=sensitivity") || !strings.Contains(stderr, "sensitivity: read "+path("merged.json")) {
		t.Fatalf("search reading the merged analysis: exit %d, want 0 measuring none: %s", code, stderr)
	}
	for i, ext := range []string{".onnx", ".yaml"} {
		read, err := os.ReadFile(path("q" + ext))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(own[i], read) {
			t.Errorf("%s written with the read analysis differs from the one measured", ext)
		}
	}
	for _, c := range []struct{ file, want string }{
		{"shard0.json", "shard 0/2 of an analysis"},
		{"node.json", "grouped by node"},
		{"eval8.json", "measured for another model, plan, data split or flags"},
	} {
		stderr, code := run(t, "cache-empty", append(search("refused"), "--sensitivity", path(c.file))...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("--sensitivity %s: exit %d, want %d with %q: %s", c.file, code, ExitUsage, c.want, stderr)
		}
	}
	if stderr, code := run(t, "cache-empty", "quantize", "-o", path("plain.onnx"), "--sensitivity", path("merged.json")); code != ExitUsage || !strings.Contains(stderr, "give a target") {
		t.Errorf("--sensitivity without a target: exit %d, want %d: %s", code, ExitUsage, stderr)
	}
}

// maskedScoresModel is a head with an additive attention mask, as
// encoders and decoders write it: scores = Gemm(x) + Where(m == 0, −Inf,
// 0), Softmax over the 8 positions, then a Gemm to 4 outputs. x's feature
// 0 meets zero weights in the first Gemm and is fed large (outlierInputs),
// so x on an 8-bit grid loses the other features. Calibration sees the
// −Inf and leaves the mask and the masked scores in float.
func maskedScoresModel() *testmodels.Builder {
	b := testmodels.New("masked_scores", 17)
	b.Input("x", tensor.Float, "N", 8).Input("m", tensor.Float, "N", 8).Output("y", tensor.Float, "N", 4)
	rng := rand.New(rand.NewPCG(7, 9))
	w := make([]float32, 8*8)
	for i := range w {
		if i%8 != 0 {
			w[i] = rng.Float32()*4 - 2
		}
	}
	b.Init("scores.weight", []int64{8, 8}, w).RandomInit("scores.bias", 0.1, 8)
	b.RandomInit("out.weight", 0.5, 4, 8).RandomInit("out.bias", 0.1, 4)
	b.Init("zero", nil, []float32{0}).Init("neg_inf", nil, []float32{float32(math.Inf(-1))})
	gemm := func(name, in, w, bias, out string) {
		b.Node("Gemm", name, []string{in, w, bias}, []string{out},
			testmodels.AttrFloat("alpha", 1), testmodels.AttrFloat("beta", 1), testmodels.AttrInt("transB", 1))
	}
	gemm("/scores/Gemm", "x", "scores.weight", "scores.bias", "s")
	b.Node("Equal", "/mask/Equal", []string{"m", "zero"}, []string{"masked"})
	b.Node("Where", "/mask/Where", []string{"masked", "neg_inf", "zero"}, []string{"bias"})
	b.Node("Add", "/scores/Add", []string{"s", "bias"}, []string{"a"})
	b.Node("Softmax", "/scores/Softmax", []string{"a"}, []string{"p"}, testmodels.AttrInt("axis", -1))
	gemm("/out/Gemm", "p", "out.weight", "out.bias", "y")
	return b
}

// TestSearchThroughInfiniteMask checks, on maskedScoresModel (w8a8, 256
// samples, every row keeping position 0 and each other position with
// probability 1/2, 4 held out), that the values calibration leaves in
// float for holding −Inf (the mask, the masked scores) do not make every
// promotion inexpressible: the emitted config, prepared, quantizes them,
// and only calibration takes them out again. --target-sqnr 30 is met by
// raising x, and the emitted config writes the model byte for byte.
func TestSearchThroughInfiniteMask(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "masked.onnx", maskedScoresModel())
	data := outlierInputs(t, dir, 256, "x")
	rng := rand.New(rand.NewPCG(17, 19))
	mask := tensor.New(tensor.Float, 256, 8)
	for i := range mask.Float32s() {
		if i%8 == 0 || rng.IntN(2) == 0 {
			mask.Float32s()[i] = 1
		}
	}
	data = append(data, "--data", "m="+writeNPY(t, dir, "m.npy", mask))
	out, emitted, report := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "q.yaml"), filepath.Join(dir, "r.json")
	code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "--preset", "w8a8", "--target-sqnr", "30",
		"-o", out, "--emit-config", emitted, "--report", report}, data...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "held ") || !strings.Contains(stderr, "±Inf") {
		t.Errorf("no note of the values left in float for their infinities:\n%s", stderr)
	}
	var rep struct{ Search *searchReport }
	readJSONFile(t, report, &rep)
	s := rep.Search
	if s == nil || !s.Met || s.Raised == 0 {
		t.Fatalf("report's search: %+v, want the target met with points raised", s)
	}
	for _, st := range s.Trace {
		if strings.HasPrefix(st.Verdict, "not expressible") {
			t.Errorf("%+v: the emitted config expresses every promotion of this model", st)
		}
	}
	if !slices.ContainsFunc(s.Promotions, func(p promotion) bool { return slices.Contains(p.Values, "x") }) {
		t.Errorf("promotions %+v: want x raised", s.Promotions)
	}
	checkEmittedConfigReproduces(t, emitted, out, filepath.Join(dir, "again.onnx"), append([]string{"--model", model}, data...)...)
}

// TestDescribeMoves: a progress line names a batch's moves up to
// movesNamed and counts the rest.
func TestDescribeMoves(t *testing.T) {
	moves := func(n int) []searchMove {
		var out []searchMove
		for i := range n {
			out = append(out, searchMove{un: &searchUnit{Name: fmt.Sprintf("u%d", i)}, to: levelInt16})
		}
		return out
	}
	tests := []struct {
		n    int
		want string
	}{
		{1, "u0 to int16"},
		{3, "u0 to int16, u1 to int16, u2 to int16"},
		{8, "u0 to int16, u1 to int16, u2 to int16, u3 to int16, u4 to int16, u5 to int16, u6 to int16, u7 to int16"},
		{180, "180 units: u0 to int16, u1 to int16, u2 to int16, u3 to int16, u4 to int16, u5 to int16, u6 to int16, u7 to int16 and 172 more (the report's trace lists them)"},
	}
	for _, tt := range tests {
		if got := describeMoves(moves(tt.n)); got != tt.want {
			t.Errorf("%d moves: %q, want %q", tt.n, got, tt.want)
		}
	}
}

// TestFollowMeasured: the back-off's noise scale moves halfway (in ratio)
// toward what a group measured, within a factor of 1000, and stays when
// either figure is not positive.
func TestFollowMeasured(t *testing.T) {
	tests := []struct {
		scale, predicted, added, want float64
	}{
		{2, 1e-3, 1e-5, 0.2},     // a hundredth of the prediction: a tenth of the scale
		{2, 1e-5, 1e-3, 20},      // a hundred times: ten times
		{1, 1, 1e-20, 1e-3},      // bounded
		{1, 1e-20, 1, 1e3},       // bounded
		{3, 1e-3, 0, 3},          // the group gained: nothing to learn
		{3, 0, 1e-3, 3},          // nothing predicted
		{3, 1e-3, math.NaN(), 3}, // not a figure
	}
	for _, tt := range tests {
		if got := followMeasured(tt.scale, tt.predicted, tt.added); math.Abs(got-tt.want) > 1e-9*tt.want {
			t.Errorf("followMeasured(%g, %g, %g) = %g, want %g", tt.scale, tt.predicted, tt.added, got, tt.want)
		}
	}
}

package cli

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// outlierInputModel has two branches. The fragile one, /first/Gemm,
// reads the input x, whose feature 0 spans ±200 (outlierData) but meets
// zero weights while features 1-7 span ±1 and carry the signal: int8's
// per-tensor scale for x rounds those to 0 or ±1.6, and the output y1
// keeps little of them. Leaving /first/Gemm in float leaves x and y1 in
// float, since no other node reads or writes them. The other branch,
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
	rng := rand.New(rand.NewPCG(11, 13))
	var args []string
	for _, name := range []string{"x", "z"} {
		v := tensor.New(tensor.Float, 256, 8)
		for i := range v.Float32s() {
			f := rng.Float32()*2 - 1
			if name == "x" && i%8 == 0 {
				f *= 200
			}
			v.Float32s()[i] = f
		}
		args = append(args, "--data", name+"="+writeNPY(t, dir, name+".npy", v))
	}
	return args
}

// TestSearchPromotesFragileNode checks, on outlierInputModel (w8a8, 256
// samples of outlierData, 4 held out), that --target-sqnr leaves
// /first/Gemm in float, and nothing else, and that the emitted config
// writes the same model byte for byte and validates.
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
			args := append([]string{"quantize", "--model", model, "--target-sqnr", "20", "-o", out, "--emit-config", emitted}, tt.args...)
			code, _, stderr := runCLI(t, append(args, data...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			text, err := os.ReadFile(emitted)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(text), tt.wantKept) {
				t.Errorf("the emitted config lost %q:\n%s", tt.wantKept, text)
			}
			cfg, err := config.Parse(text, emitted)
			if err != nil {
				t.Fatalf("emitted config does not parse: %v\n%s", err, text)
			}
			var keys []string
			for _, e := range cfg.Quant.Global.OpNames {
				keys = append(keys, e.Key)
				if e.Config != nil {
					t.Errorf("op_name_config %q is not null", e.Key)
				}
			}
			if strings.Join(keys, ",") != "/first/Gemm" {
				t.Fatalf("promoted %v, want only /first/Gemm; stderr:\n%s\nconfig:\n%s", keys, stderr, text)
			}
			if !strings.Contains(string(text), "/first/Gemm: null # left in float: +") {
				t.Errorf("the entry carries no gain comment:\n%s", text)
			}
			if !strings.Contains(stderr, "search 1/8: /first/Gemm in float") || strings.Contains(stderr, "search 2/") {
				t.Errorf("want one evaluation, of /first/Gemm; stderr:\n%s", stderr)
			}

			// The emitted config holds the calibration sample count, so quantize
			// without held-out samples calibrates on the same ones.
			again := filepath.Join(dir, tt.name+".again.onnx")
			code, _, stderr = runCLI(t, append([]string{"quantize", "--config", emitted, "--model", model, "-o", again}, data...)...)
			if code != 0 {
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
	if !strings.Contains(string(text), "/first/Gemm: null") {
		t.Errorf("the best model's promotion is not in the config:\n%s", text)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Search *searchReport }
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	s := rep.Search
	if s == nil || s.Met || len(s.Trace) != 1 || s.Trace[0].Node != "/first/Gemm" || !s.Trace[0].Kept ||
		!slices.Equal(s.Promoted, []string{"/first/Gemm"}) || s.Reached <= s.Start || s.Reached != s.Trace[0].SQNR {
		t.Errorf("report's search: %+v, want one kept step, /first/Gemm, raising the SQNR, target not met", s)
	}
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

//go:build ort

package cli

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
)

// TestCompareFloat8InOrt: fp8 models run in ONNX Runtime through --engine
// ort (the engine turns off the optimizers that mishandle float8) and
// measure as good as in the built-in engine: per output, the SQNR against
// the float model within 0.5 dB, and --per-layer works on ORT's taps.
func TestCompareFloat8InOrt(t *testing.T) {
	shared := testutil.SharedModels(t)
	for _, c := range []struct {
		model          string
		batch, samples string
	}{{"digits_resnet", "8", "32"}, {"bert_encoder", "2", "4"}} {
		t.Run(c.model, func(t *testing.T) {
			dir := filepath.Join(shared, c.model)
			model := filepath.Join(dir, "model.onnx")
			out := filepath.Join(t.TempDir(), "fp8.onnx")
			args := append([]string{"quantize", "--model", model, "--preset", "fp8", "--samples", c.samples, "--batch-size", c.batch,
				"--engine", "ort", "-o", out, "--log-level", "error"}, sharedData(t, dir, "calib")...)
			if code, _, stderr := runCLI(t, args...); code != 0 {
				t.Fatalf("quantize: exit %d\n%s", code, stderr)
			}
			sqnr := map[string]map[string]float64{}
			for _, engine := range []string{"go", "ort"} {
				args := append([]string{"compare", model, out, "--engine", engine, "--samples", c.samples, "--batch-size", c.batch,
					"--per-layer", "--format", "json"}, sharedData(t, dir, "eval")...)
				code, stdout, stderr := runCLI(t, args...)
				if code != 0 {
					t.Fatalf("compare --engine %s: exit %d\n%s", engine, code, stderr)
				}
				if engine == "ort" && !strings.Contains(stderr, "float8") {
					t.Errorf("compare --engine ort: no log line about the float8 session options:\n%s", stderr)
				}
				var r compareJSON
				if err := json.Unmarshal([]byte(stdout), &r); err != nil {
					t.Fatal(err)
				}
				if len(r.Layers) == 0 || len(r.Unpaired) > 0 {
					t.Errorf("--engine %s: %d layers, unpaired %+v", engine, len(r.Layers), r.Unpaired)
				}
				sqnr[engine] = map[string]float64{}
				for _, o := range r.Outputs {
					sqnr[engine][o.Name] = float64(o.SQNR)
				}
			}
			for name, g := range sqnr["go"] {
				o, ok := sqnr["ort"][name]
				if !ok || math.IsInf(g, 0) || math.Abs(o-g) > 0.5 {
					t.Errorf("output %q: SQNR %.2f dB in the built-in engine, %.2f dB in ONNX Runtime", name, g, o)
				}
				t.Logf("output %q: SQNR %.2f dB built-in, %.2f dB ONNX Runtime", name, g, o)
			}
		})
	}
}

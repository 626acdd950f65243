package cli

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
)

// sharedSQNR quantizes a shared model with a preset on all its calibration
// samples (default batch size) and returns the SQNR of each output on all
// its evaluation samples, as the README's table was measured.
func sharedSQNR(t *testing.T, dir, preset string) map[string]float64 {
	t.Helper()
	model := filepath.Join(dir, "model.onnx")
	out := filepath.Join(t.TempDir(), "q.onnx")
	args := append([]string{"quantize", "--model", model, "-o", out, "--preset", preset, "--log-level", "error"}, sharedData(t, dir, "calib")...)
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("quantize --preset %s: exit %d\n%s", preset, code, stderr)
	}
	code, stdout, stderr := runCLI(t, append([]string{"compare", model, out, "--format", "json"}, sharedData(t, dir, "eval")...)...)
	if code != 0 {
		t.Fatalf("compare: exit %d\n%s", code, stderr)
	}
	var r compareJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, o := range r.Outputs {
		got[o.Name] = float64(o.SQNR)
	}
	return got
}

// TestAccuratePresetShared checks on the shared CNNs that --preset
// accurate (w8a8 with cross-layer equalization) is never below w8a8 and
// gains where the README's table says it does. Figures with each model's
// own calib_*.npy and eval_*.npy files, built-in engine: mobilenetv2 16.92
// → 18.76 dB, shufflenet-v2 11.58 → 12.53 dB, resnet18 16.14 → 16.30 dB,
// digits_resnet 26.95 → 26.97 dB.
func TestAccuratePresetShared(t *testing.T) {
	shared := testutil.SharedModels(t)
	cases := []struct {
		model string
		// gain is the least improvement in dB over w8a8 on every output.
		gain float64
	}{
		{"mobilenetv2", 1.5},
		{"shufflenet-v2", 0.5},
		{"resnet18", 0},
		{"digits_resnet", 0},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			if testing.Short() && c.model != "digits_resnet" {
				t.Skipf("%s: two quantizations and comparisons of a large model", c.model)
			}
			dir := filepath.Join(shared, c.model)
			base := sharedSQNR(t, dir, "w8a8")
			acc := sharedSQNR(t, dir, "accurate")
			for name, b := range base {
				a, ok := acc[name]
				if !ok {
					t.Fatalf("output %q missing from the accurate model's comparison", name)
				}
				t.Logf("%s: w8a8 %.2f dB, accurate %.2f dB", name, b, a)
				if a < b+c.gain {
					t.Errorf("output %q: accurate %.2f dB, want at least w8a8's %.2f dB + %.1f", name, a, b, c.gain)
				}
			}
		})
	}
}

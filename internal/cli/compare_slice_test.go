package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
)

// TestCompareSlices compares digits_mlp's logits in two named halves: each
// slice gets its own row and JSON entry, the whole output's SQNR lies
// between theirs, and an unknown output or a range past the declared
// shape is refused with exit 2.
func TestCompareSlices(t *testing.T) {
	dir := filepath.Join(testutil.SharedModels(t), "digits_mlp")
	model := filepath.Join(dir, "model.onnx")
	out := filepath.Join(t.TempDir(), "q.onnx")
	if code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "-o", out, "--log-level", "error"}, sharedData(t, dir, "calib")...)...); code != 0 {
		t.Fatalf("quantize: exit %d\n%s", code, stderr)
	}
	eval := sharedData(t, dir, "eval")
	args := append([]string{"compare", model, out, "--format", "json", "--slice", "logits:1:low=0-5,high=5-10"}, eval...)
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("compare: exit %d\n%s", code, stderr)
	}
	var r struct {
		Outputs []struct {
			Name   string  `json:"name"`
			SQNR   float64 `json:"sqnr_db"`
			Slices []struct {
				Name string  `json:"name"`
				From int     `json:"from"`
				To   int     `json:"to"`
				SQNR float64 `json:"sqnr_db"`
			} `json:"slices"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	o := r.Outputs[0]
	if len(o.Slices) != 2 || o.Slices[0].Name != "low" || o.Slices[1].Name != "high" || o.Slices[1].From != 5 || o.Slices[1].To != 10 {
		t.Fatalf("slices %+v", o.Slices)
	}
	lo, hi := min(o.Slices[0].SQNR, o.Slices[1].SQNR), max(o.Slices[0].SQNR, o.Slices[1].SQNR)
	if o.SQNR < lo-1e-9 || o.SQNR > hi+1e-9 {
		t.Errorf("output %.3f dB outside its slices' %.3f and %.3f", o.SQNR, lo, hi)
	}
	for _, bad := range []string{"nope:1:a=0-1", "logits:1:a=0-11", "logits:2:a=0-1"} {
		code, _, stderr := runCLI(t, append([]string{"compare", model, out, "--slice", bad}, eval...)...)
		if code != 2 || !strings.Contains(stderr, "--slice") {
			t.Errorf("--slice %s: exit %d, want 2 naming the flag\n%s", bad, code, stderr)
		}
	}
}

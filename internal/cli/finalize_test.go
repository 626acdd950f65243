package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// TestFinalizeStatsChecks: stats from random data mark the model and the
// report; stats from another model are refused.
func TestFinalizeStatsChecks(t *testing.T) {
	dir := t.TempDir()
	mlp, cnn := modelPath("mlp.onnx"), modelPath("cnn.onnx")
	stats := filepath.Join(dir, "stats.json")
	mustCLI(t, "calibrate", "--model", mlp, "--preset", "w8a8", "--random-data", "--samples", "4", "-o", stats)

	out, report := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "report.json")
	_, _, stderr := runCLI(t, "finalize", "--model", mlp, "--preset", "w8a8", "--stats", stats, "-o", out, "--report", report)
	if !strings.Contains(stderr, "random data") {
		t.Errorf("stderr does not warn about random data:\n%s", stderr)
	}
	m, err := onnxgraph.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	marked := false
	for _, p := range m.Proto.GetMetadataProps() {
		marked = marked || p.GetKey() == finalize.CalibrationDataMetadataKey && p.GetValue() == "random"
	}
	if !marked {
		t.Error("the model does not carry the random-data marker")
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		RandomData bool `json:"random_data"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || !rep.RandomData {
		t.Errorf("report random_data = %v (%v)", rep.RandomData, err)
	}

	code, _, stderr := runCLI(t, "finalize", "--model", cnn, "--preset", "w8a8", "--stats", stats, "-o", filepath.Join(dir, "c.onnx"))
	if code != ExitUsage || !strings.Contains(stderr, "stats.json") || !strings.Contains(stderr, "not this one") {
		t.Errorf("stats of another model: exit %d, %s", code, stderr)
	}

	// Stats of the same model calibrated under another plan (int4
	// weights: other weight qparams, the same activations observed).
	other := filepath.Join(dir, "other.onnx")
	code, _, stderr = runCLI(t, "finalize", "--model", mlp, "--preset", "w4a8", "--stats", stats, "-o", other)
	if code != ExitUsage || !strings.Contains(stderr, "stats.json") || !strings.Contains(stderr, "another plan") {
		t.Errorf("stats of another plan: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("finalize wrote %s from the stats of another plan (%v)", other, err)
	}
}

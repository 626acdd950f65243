package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// TestPaletteCommands: with a kmeans_palettization_config, inspect
// --config lists each weight's palettization and rule; quantize writes a
// model that loads, lists each palettized weight in the summary and the
// report with the file sizes, and a bad field exits 2 with file:line.
func TestPaletteCommands(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(testutil.RepoRoot(), "testdata", "models", "cnn.onnx")
	cfg := filepath.Join(dir, "p.yaml")
	text := "kmeans_palettization_config:\n  global_config: {n_bits: 3, weight_threshold: 0}\n  module_name_configs:\n    fc: null\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "inspect", model, "--config", cfg)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "palettization (config") || !strings.Contains(stdout, "3-bit LUT per_tensor") || !strings.Contains(stdout, "p.yaml:2 (kmeans_palettization_config.global_config)") {
		t.Errorf("inspect --config does not list the palettization:\n%s", stdout)
	}
	out, rep := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "r.json")
	code, _, stderr = runCLI(t, "quantize", "--config", cfg, "--model", model, "-o", out, "--report", rep)
	if code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, stderr)
	}
	if _, err := onnxgraph.Load(out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "8-entry LUT") || !strings.Contains(stderr, "file size") {
		t.Errorf("summary without palettized weights or file size:\n%s", stderr)
	}
	var r struct {
		Palettized []struct {
			Value         string  `json:"value"`
			LUTEntries    int     `json:"lut_entries"`
			BitsPerWeight float64 `json:"bits_per_weight"`
		} `json:"palettized"`
		Size   *fileSizes     `json:"file_size"`
		Counts map[string]int `json:"counts"`
	}
	readJSONFile(t, rep, &r)
	if len(r.Palettized) == 0 || r.Size == nil || r.Size.After <= 0 || r.Size.Before <= 0 || r.Counts["weight"] != 0 {
		t.Errorf("report: %+v", r)
	}
	for _, p := range r.Palettized {
		if p.LUTEntries != 8 || p.BitsPerWeight < 4 {
			t.Errorf("report entry %+v", p)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kmeans_palettization_config:\n  global_config: {n_bits: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "quantize", "--config", bad, "--model", model, "-o", out)
	if code != ExitUsage || !strings.Contains(stderr, "bad.yaml:2") {
		t.Errorf("bad config: exit %d, stderr %q", code, stderr)
	}
}

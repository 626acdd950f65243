package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func writeStats(t *testing.T, dir, name, sha string, x []float32) string {
	t.Helper()
	s := spec.DefaultActivationSpec()
	s.Calculator = spec.Calculator{Type: spec.Static}
	o, err := calibrate.NewObserver(calibrate.TensorToObserve{Name: "act", Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Observe(tensor.FromFloat32(x, len(x))); err != nil {
		t.Fatal(err)
	}
	st := &calibrate.Stats{Version: calibrate.StatsVersion, ModelSHA256: sha, Samples: 1, Batches: 1, Tensors: []*calibrate.Observer{o}}
	path := filepath.Join(dir, name)
	if err := st.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStatsMerge(t *testing.T) {
	dir := t.TempDir()
	a := writeStats(t, dir, "a.json", "aa", []float32{-1, 2})
	b := writeStats(t, dir, "b.json", "aa", []float32{-3, 1})
	c := writeStats(t, dir, "c.json", "bb", []float32{0})
	out := filepath.Join(dir, "m.json")
	var stdout bytes.Buffer
	cmd := NewCmdStats(&IO{Out: &stdout, ErrOut: &stdout}, nil)
	cmd.SetArgs([]string{"merge", a, b, "-o", out})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	m, err := calibrate.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Tensor("act")
	if o.Min[0] != -3 || o.Max[0] != 2 || m.Samples != 2 {
		t.Fatalf("merged %v %v samples %d", o.Min, o.Max, m.Samples)
	}
	err = runStatsMerge(&statsMergeOptions{IO: &IO{Out: &stdout}, Inputs: []string{a, c}, Output: filepath.Join(dir, "x.json")})
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("merge of two models: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.json")); !os.IsNotExist(err) {
		t.Fatalf("a failed merge left an output file: %v", err)
	}
}

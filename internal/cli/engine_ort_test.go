//go:build ort

package cli

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func TestOrtEngineRegistered(t *testing.T) {
	if !slices.Contains(runtime.Engines(), "ort") {
		t.Fatalf("engines %v lack ort", runtime.Engines())
	}
	m, err := onnxgraph.FromProto(testmodels.MLP().Model, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open("ort", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Engine() != "ort" {
		t.Errorf("Engine() = %q", s.Engine())
	}
	res, err := s.Run(context.Background(), map[string]*tensor.Tensor{"input": tensor.New(tensor.Float, 2, 16)}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if y := res["logits"]; y == nil || !slices.Equal(y.Shape, []int{2, 4}) {
		t.Errorf("logits = %v", y)
	}
}

// TestOrtMissingLibrary: without a library the engine fails with an error
// that names ONNXRUNTIME_LIB and the fetch cache, and the CLI exits 1.
func TestOrtMissingLibrary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ort.LibraryEnv, "")
	t.Setenv(ort.CacheEnv, dir)
	m, err := onnxgraph.FromProto(testmodels.MLP().Model, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = runtime.Open("ort", m, runtime.Options{})
	if !errors.Is(err, ort.ErrLibraryNotFound) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"ONNXRUNTIME_LIB", filepath.Join(dir, ort.Version), "scripts/fetch-ort.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if code := exitCode(err); code != ExitFailure {
		t.Errorf("exit code %d, want %d", code, ExitFailure)
	}
}

package runtime

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// TestSharedModels runs every shared model on its reference inputs and
// compares with the outputs ONNX Runtime produced for them.
func TestSharedModels(t *testing.T) {
	root := testutil.SharedModels(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "ref", "out", "outputs.json")); err != nil {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			m, err := onnxgraph.Load(filepath.Join(dir, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			consts := constantDigests(m)
			s, err := NewGoSession(m, Options{})
			if err != nil {
				t.Fatal(err)
			}
			inputs := map[string]*tensor.Tensor{}
			for _, in := range s.Inputs() {
				x, err := npy.ReadNPYFile(filepath.Join(dir, "ref", "input_"+sanitize(in.Name)+".npy"))
				if err != nil {
					t.Fatal(err)
				}
				inputs[in.Name] = x
			}
			outs, err := s.Run(context.Background(), inputs, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// A second run uses the weights packed at the first.
			if _, err := s.Run(context.Background(), inputs, RunOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := constantsUnchanged(m, consts); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "ref", "out", "outputs.json"))
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Outputs map[string]string `json:"outputs"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			files := doc.Outputs
			if len(files) == 0 {
				t.Fatal("outputs.json lists no outputs")
			}
			for _, name := range sortedKeys(files) {
				ref, err := npy.ReadNPYFile(filepath.Join(dir, "ref", "out", files[name]))
				if err != nil {
					t.Fatal(err)
				}
				got := outs[name]
				if got == nil {
					t.Fatalf("output %q missing", name)
				}
				if !equalInts64(got.Shape, ref.Shape) {
					t.Fatalf("output %q: shape %v, reference %v", name, got.Shape, ref.Shape)
				}
				g, _ := got.AsFloat32()
				r, _ := ref.AsFloat32()
				var maxAbs, maxRef float64
				for i := range r {
					maxAbs = math.Max(maxAbs, math.Abs(float64(g[i])-float64(r[i])))
					maxRef = math.Max(maxRef, math.Abs(float64(r[i])))
				}
				t.Logf("output %q: max abs error %.3g, max |ref| %.3g", name, maxAbs, maxRef)
				if !(maxAbs <= 1e-4*maxRef) {
					t.Errorf("output %q: max abs error %.3g exceeds 1e-4 × %.3g", name, maxAbs, maxRef)
				}
			}
		})
	}
}

func equalInts64(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sanitize(name string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(name)
}

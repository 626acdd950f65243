//go:build ort

package passes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// sharedModel is one folder of the shared model set: the model and its
// calibration, evaluation and reference arrays by input name.
type sharedModel struct {
	name   string
	model  *onnxgraph.Model
	calib  map[string]*tensor.Tensor
	ref    map[string]*tensor.Tensor // ref/input_<name>.npy: the first eval samples
	eval   map[string]*tensor.Tensor // nil unless asked for
	labels *tensor.Tensor            // eval_labels.npy, when present and asked for
}

// sharedModelNames lists the shared model folders, sorted.
func sharedModelNames(t *testing.T) (string, []string) {
	t.Helper()
	dir := testutil.SharedModels(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "model.onnx")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return dir, names
}

// loadShared loads a shared model with its calibration and reference
// inputs (and the evaluation set with labels when withEval).
func loadShared(t *testing.T, dir, name string, withEval bool) *sharedModel {
	t.Helper()
	m, err := onnxgraph.Load(filepath.Join(dir, name, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	s := &sharedModel{name: name, model: m, calib: map[string]*tensor.Tensor{}, ref: map[string]*tensor.Tensor{}}
	if withEval {
		s.eval = map[string]*tensor.Tensor{}
	}
	for _, in := range m.Graph.Inputs {
		if in.IsConst() {
			continue
		}
		s.calib[in.Name] = readNPY(t, filepath.Join(dir, name, "calib_"+in.Name+".npy"))
		s.ref[in.Name] = readNPY(t, filepath.Join(dir, name, "ref", "input_"+in.Name+".npy"))
		if withEval {
			s.eval[in.Name] = readNPY(t, filepath.Join(dir, name, "eval_"+in.Name+".npy"))
		}
	}
	if lp := filepath.Join(dir, name, "eval_labels.npy"); withEval {
		if _, err := os.Stat(lp); err == nil {
			s.labels = readNPY(t, lp)
		}
	}
	return s
}

func readNPY(t *testing.T, path string) *tensor.Tensor {
	t.Helper()
	x, err := npy.ReadNPYFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// rows returns samples [start, end) of x (batch on axis 0), sharing data.
func rows(x *tensor.Tensor, start, end int) *tensor.Tensor {
	per := 1
	for _, d := range x.Shape[1:] {
		per *= d
	}
	shape := append([]int{end - start}, x.Shape[1:]...)
	v := reflect.ValueOf(x.Data).Slice(start*per, end*per).Interface()
	return &tensor.Tensor{DType: x.DType, Shape: shape, Data: v}
}

// batchOf returns samples [start, end) of every input.
func batchOf(in map[string]*tensor.Tensor, start, end int) map[string]*tensor.Tensor {
	out := make(map[string]*tensor.Tensor, len(in))
	for k, v := range in {
		out[k] = rows(v, start, end)
	}
	return out
}

// memSource serves in-memory arrays as calibration samples.
type memSource struct {
	data map[string]*tensor.Tensor
	n    int
}

func newMemSource(data map[string]*tensor.Tensor, samples int) *memSource {
	n := samples
	for _, v := range data {
		n = min(n, v.Shape[0])
	}
	return &memSource{data: data, n: n}
}

func (s *memSource) Samples() int { return s.n }
func (s *memSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	if start < 0 || end > s.n || start > end {
		return nil, fmt.Errorf("batch [%d, %d) out of %d samples", start, end, s.n)
	}
	return batchOf(s.data, start, end), nil
}
func (s *memSource) Random() bool { return false }
func (s *memSource) Close() error { return nil }

// quantizeWithData runs the pipeline with a preset (or a config), calibrating
// on the first samples of data with the built-in engine, as `coreaiq
// quantize` does.
func quantizeWithData(t *testing.T, m *onnxgraph.Model, preset string, data map[string]*tensor.Tensor, samples, batch int, wopts finalize.Options) *Unit {
	t.Helper()
	cfg, err := config.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: m, Config: cfg, Write: wopts,
		Calibrate: EngineCalibrator("go", runtime.Options{}, newMemSource(data, samples),
			calibrate.Options{BatchSize: batch}, nil)}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		if strings.Contains(err.Error(), "raising it is not safe") {
			// The documented refusal (docs/RATIONALE.md, opset raises).
			t.Skipf("%s: %v", preset, err)
		}
		t.Fatalf("%s: %v", preset, err)
	}
	return u
}

// isShortSkip reports whether a heavy shared-model test should be skipped
// under -short.
func isShortSkip(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: skipped with -short", what)
	}
}

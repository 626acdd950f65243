//go:build ort

package ort

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// sharedCase is one model of the shared folder with its reference run.
type sharedCase struct {
	name   string
	model  string
	inputs map[string]*tensor.Tensor
	// outputs are ONNX Runtime 1.23.2's outputs for inputs, by output name.
	outputs map[string]*tensor.Tensor
}

// sharedCases reads every model folder with a ref/ run.
func sharedCases(t *testing.T) []sharedCase {
	t.Helper()
	root := testutil.SharedModels(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var cases []sharedCase
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "ref", "out", "outputs.json")); err != nil {
			continue
		}
		c := sharedCase{name: e.Name(), model: filepath.Join(dir, "model.onnx"),
			inputs: map[string]*tensor.Tensor{}, outputs: map[string]*tensor.Tensor{}}
		files, _ := filepath.Glob(filepath.Join(dir, "ref", "input_*.npy"))
		for _, f := range files {
			x, err := readNPY(f)
			if err != nil {
				t.Fatal(err)
			}
			c.inputs[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "input_"), ".npy")] = x
		}
		var idx struct{ Outputs map[string]string }
		b, err := os.ReadFile(filepath.Join(dir, "ref", "out", "outputs.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for name, file := range idx.Outputs {
			y, err := readNPY(filepath.Join(dir, "ref", "out", file))
			if err != nil {
				t.Fatal(err)
			}
			c.outputs[name] = y
		}
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		t.Fatalf("no model with a ref/ run in %s", root)
	}
	return cases
}

// TestSharedModels runs every shared model and compares with the outputs
// ONNX Runtime 1.23.2 produced through onnxruntime-node (one thread, every
// optimization): the same library, so the match is near exact.
func TestSharedModels(t *testing.T) {
	l := testLibrary(t)
	for _, c := range sharedCases(t) {
		t.Run(c.name, func(t *testing.T) {
			m, err := onnxgraph.Load(c.model)
			if err != nil {
				t.Fatal(err)
			}
			e, err := l.Open(m, SessionOptions{IntraOpThreads: 1, InterOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			got, err := e.Run(context.Background(), c.inputs, runtime.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.outputs) {
				t.Errorf("%d outputs, reference has %d", len(got), len(c.outputs))
			}
			for _, name := range sortedKeys(c.outputs) {
				ref, y := c.outputs[name], got[name]
				if y == nil || y.DType != ref.DType || !slices.Equal(y.Shape, ref.Shape) {
					t.Errorf("output %q: got %v, reference %v", name, y, ref)
					continue
				}
				d, scale := maxAbsDiff(asFloat64(y), asFloat64(ref))
				if d > 1e-6*scale {
					t.Errorf("output %q: max abs diff %g, max |ref| %g", name, d, scale)
				}
				t.Logf("output %q %v: max abs diff %g, max |ref| %g", name, y.Shape, d, scale)
			}
		})
	}
}

func TestOpenDefault(t *testing.T) {
	testLibrary(t)
	m := modelOf(t, testmodels.MLP())
	s, err := Open(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Engine() != "ort" {
		t.Errorf("Engine() = %q", s.Engine())
	}
	in, out := s.Inputs(), s.Outputs()
	if len(in) != 1 || in[0].Name != "input" || !slices.Equal(in[0].Shape, []int64{-1, 16}) || in[0].DimParams[0] != "N" {
		t.Errorf("inputs %+v", in)
	}
	if len(out) != 1 || out[0].Name != "logits" || out[0].DType != tensor.Float {
		t.Errorf("outputs %+v", out)
	}
}

// mlpReference computes the MLP test model in float64 from its weights.
func mlpReference(t *testing.T, m *onnxgraph.Model, x []float32, n int) (gemm1, relu, logits []float64) {
	t.Helper()
	w := func(name string) []float64 {
		v := m.Graph.Value(name)
		if v == nil || v.Const == nil {
			t.Fatalf("no initializer %s", name)
		}
		tt, err := tensor.FromProto(v.Const, nil)
		if err != nil {
			t.Fatal(err)
		}
		return asFloat64(tt)
	}
	gemm := func(in []float64, rows, k int, wt, b []float64) []float64 {
		outs := len(b)
		out := make([]float64, rows*outs)
		for r := range rows {
			for o := range outs {
				s := b[o]
				for i := range k {
					s += in[r*k+i] * wt[o*k+i]
				}
				out[r*outs+o] = s
			}
		}
		return out
	}
	xs := make([]float64, len(x))
	for i, v := range x {
		xs[i] = float64(v)
	}
	gemm1 = gemm(xs, n, 16, w("fc1.weight"), w("fc1.bias"))
	relu = make([]float64, len(gemm1))
	for i, v := range gemm1 {
		relu[i] = math.Max(v, 0)
	}
	logits = gemm(relu, n, 32, w("fc2.weight"), w("fc2.bias"))
	return gemm1, relu, logits
}

func TestTaps(t *testing.T) {
	l := testLibrary(t)
	m := modelOf(t, testmodels.MLP())
	e, err := l.Open(m, SessionOptions{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const n = 3
	x := make([]float32, n*16)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	in := map[string]*tensor.Tensor{"input": tensor.FromFloat32(x, n, 16)}
	gemm1, relu, logits := mlpReference(t, m, x, n)
	want := map[string][]float64{"/fc1/Gemm_output_0": gemm1, "/relu/Relu_output_0": relu, "logits": logits, "input": asFloat64(in["input"])}

	cases := []struct {
		name string
		taps []string
		seen []string
	}{
		{"every computed value", nil, []string{"/fc1/Gemm_output_0", "/relu/Relu_output_0", "logits"}},
		{"chosen values", []string{"/relu/Relu_output_0", "input", "logits"}, []string{"/relu/Relu_output_0", "input", "logits"}},
		{"same set again", []string{"/relu/Relu_output_0", "input", "logits"}, []string{"/relu/Relu_output_0", "input", "logits"}},
		{"output only", []string{"logits"}, []string{"logits"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var seen []string
			tap := func(name string, v *tensor.Tensor) {
				seen = append(seen, name)
				d, scale := maxAbsDiff(asFloat64(v), want[name])
				if d > 1e-5*math.Max(scale, 1) {
					t.Errorf("tap %q: max abs diff %g from the float64 reference", name, d)
				}
			}
			res, err := e.Run(context.Background(), in, runtime.RunOptions{Tap: tap, TapValues: c.taps})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seen, c.seen) {
				t.Errorf("tapped %q, want %q", seen, c.seen)
			}
			if len(res) != 1 || res["logits"] == nil {
				t.Errorf("results %v, want logits only", sortedKeys(res))
			}
		})
	}
	// Two distinct sets of intermediate values: two model copies.
	if len(e.taps) != 2 {
		t.Errorf("%d tap sessions, want 2", len(e.taps))
	}
	_, err = e.Run(context.Background(), in, runtime.RunOptions{Tap: func(string, *tensor.Tensor) {}, TapValues: []string{"nope"}})
	if err == nil || !strings.Contains(err.Error(), `no value "nope"`) {
		t.Errorf("unknown tap value: err = %v", err)
	}
}

// TestTapUntypedValue taps a value that has no value_info, so the added
// graph output carries no type and ONNX Runtime must infer it.
func TestTapUntypedValue(t *testing.T) {
	l := testLibrary(t)
	b := testmodels.New("untyped", 17)
	b.Input("x", tensor.Float, 4).Output("y", tensor.Float, 4)
	b.Node("Neg", "neg", []string{"x"}, []string{"n"})
	b.Node("Abs", "abs", []string{"n"}, []string{"y"})
	m := modelOf(t, b)
	e, err := l.Open(m, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var got []float32
	_, err = e.Run(context.Background(), map[string]*tensor.Tensor{"x": tensor.FromFloat32([]float32{1, -2, 3, -4}, 4)},
		runtime.RunOptions{TapValues: []string{"n"}, Tap: func(_ string, v *tensor.Tensor) { got = slices.Clone(v.Float32s()) }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []float32{-1, 2, -3, 4}) {
		t.Errorf("tapped n = %v", got)
	}
}

// TestExternalData runs a model whose weights live in an external file:
// the engine hands ONNX Runtime the model bytes and the directory.
func TestExternalData(t *testing.T) {
	l := testLibrary(t)
	inline := modelOf(t, testmodels.CNN())
	dir := t.TempDir()
	path := filepath.Join(dir, "cnn.onnx")
	if err := inline.Save(path, onnxgraph.SaveOptions{External: onnxgraph.ExternalAlways, Threshold: 64}); err != nil {
		t.Fatal(err)
	}
	ext, err := onnxgraph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	external := 0
	for _, v := range ext.Graph.Initializers {
		if onnxgraph.IsExternal(v.Const) {
			external++
		}
	}
	if external == 0 {
		t.Fatal("saved model has no external tensors")
	}
	x := tensor.New(tensor.Float, 1, 1, 8, 8)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%7) - 3
	}
	in := map[string]*tensor.Tensor{"input": x}
	var outs [][]float32
	for _, m := range []*onnxgraph.Model{inline, ext} {
		e, err := l.Open(m, SessionOptions{IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Run(context.Background(), in, runtime.RunOptions{})
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, res["logits"].Float32s())
	}
	if !slices.Equal(outs[0], outs[1]) {
		t.Errorf("external-data model gives %v, inline %v", outs[1], outs[0])
	}
}

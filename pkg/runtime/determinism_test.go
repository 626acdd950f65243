package runtime

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// detCase is a model with inputs for the determinism test.
type detCase struct {
	name   string
	model  *onnxgraph.Model
	inputs map[string]*tensor.Tensor
}

// detCases returns the generated test models with random inputs and every
// shared model with its reference inputs.
func detCases(t *testing.T) []detCase { return detCasesB(t) }

// detCasesB is detCases for tests and benchmarks.
func detCasesB(t testing.TB) []detCase {
	t.Helper()
	var cases []detCase
	builders := map[string]*testmodels.Builder{
		"convbn":    convBNReluModel(1),
		"convbn-dw": convBNReluModel(8),
	}
	for name, f := range testmodels.Catalog {
		builders[name] = f()
	}
	for _, name := range sortedKeys(builders) {
		m, err := onnxgraph.LoadBytes(builders[name].Bytes(), "")
		if err != nil {
			t.Fatal(err)
		}
		in, err := randomInputs(m, 3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cases = append(cases, detCase{name: name, model: m, inputs: in})
	}
	dir, _ := testutil.SharedModelsDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Logf("shared models not found at %s (set COREAIQ_SHARED_MODELS): only generated models are checked", dir)
		return cases
	}
	for _, e := range entries {
		md := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(md, "model.onnx")); err != nil {
			continue
		}
		m, err := onnxgraph.Load(filepath.Join(md, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*tensor.Tensor{}
		for _, v := range m.Graph.Inputs {
			x, err := npy.ReadNPYFile(filepath.Join(md, "ref", "input_"+sanitize(v.Name)+".npy"))
			if err != nil {
				t.Fatal(err)
			}
			in[v.Name] = x
		}
		cases = append(cases, detCase{name: e.Name(), model: m, inputs: in})
	}
	return cases
}

// randomInputs draws inputs for m: symbolic dimensions are batch,
// floats are uniform in [-2, 2), integers in [0, 4).
func randomInputs(m *onnxgraph.Model, batch int) (map[string]*tensor.Tensor, error) {
	r := rand.New(rand.NewPCG(7, 11))
	in := map[string]*tensor.Tensor{}
	for _, v := range m.Graph.Inputs {
		dims, ok := v.Shape()
		if !ok {
			return nil, fmt.Errorf("input %q has no shape", v.Name)
		}
		shape := make([]int, len(dims))
		for i, d := range dims {
			shape[i] = int(d.Size)
			if d.Param != "" || d.Size < 0 {
				shape[i] = batch
			}
		}
		x := tensor.New(v.DType(), shape...)
		switch d := x.Data.(type) {
		case []float32:
			for i := range d {
				d[i] = r.Float32()*4 - 2
			}
		case []int64:
			for i := range d {
				d[i] = r.Int64N(4)
			}
		case []bool:
			for i := range d {
				d[i] = r.IntN(2) == 1
			}
		default:
			return nil, fmt.Errorf("input %q: no random data for %s", v.Name, v.DType())
		}
		in[v.Name] = x
	}
	return in, nil
}

// detRun is what one run produced: graph outputs and tapped values, copied.
type detRun map[string]*tensor.Tensor

func runCopy(t *testing.T, s *GoSession, in map[string]*tensor.Tensor, tapAll bool, tapValues []string) detRun {
	t.Helper()
	got, err := runCopyErr(s, in, tapAll, tapValues)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func runCopyErr(s *GoSession, in map[string]*tensor.Tensor, tapAll bool, tapValues []string) (detRun, error) {
	got := detRun{}
	var mu sync.Mutex
	opts := RunOptions{}
	if tapAll || tapValues != nil {
		opts.TapValues = tapValues
		opts.Tap = func(name string, v *tensor.Tensor) {
			mu.Lock()
			defer mu.Unlock()
			got["tap:"+name] = v.Clone()
		}
	}
	outs, err := s.Run(context.Background(), in, opts)
	if err != nil {
		return nil, err
	}
	for name, v := range outs {
		got["out:"+name] = v.Clone()
	}
	return got, nil
}

// sameBits reports the first key whose tensors are not bit-identical,
// over the keys both runs hold.
func sameBits(a, b detRun) error {
	for _, k := range sortedKeys(a) {
		y, ok := b[k]
		if !ok {
			continue
		}
		if err := bitEqual(a[k], y); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func bitEqual(x, y *tensor.Tensor) error {
	if x.DType != y.DType || !slices.Equal(x.Shape, y.Shape) {
		return fmt.Errorf("%s %v vs %s %v", x.DType, x.Shape, y.DType, y.Shape)
	}
	switch xd := x.Data.(type) {
	case []float32:
		yd := y.Data.([]float32)
		for i := range xd {
			if math.Float32bits(xd[i]) != math.Float32bits(yd[i]) {
				return fmt.Errorf("element %d: %g (%#x) vs %g (%#x)", i, xd[i], math.Float32bits(xd[i]), yd[i], math.Float32bits(yd[i]))
			}
		}
	case []float64:
		yd := y.Data.([]float64)
		for i := range xd {
			if math.Float64bits(xd[i]) != math.Float64bits(yd[i]) {
				return fmt.Errorf("element %d: %g vs %g", i, xd[i], yd[i])
			}
		}
	default:
		if fmt.Sprint(x.Data) != fmt.Sprint(y.Data) {
			return fmt.Errorf("%s data differ", x.DType)
		}
	}
	return nil
}

// TestDeterminism runs every model several times, with and without taps,
// alone and concurrently with another run of the same session, and
// requires bit-identical outputs and tapped values: across repeated runs
// and across tap settings at a fixed thread count, and across thread
// counts (1 and 2). The tap settings are none, every value, and an
// explicit list of every third value (which makes fused steps run their
// nodes one by one where a fused-away value is listed).
func TestDeterminism(t *testing.T) {
	for _, c := range detCases(t) {
		t.Run(c.name, func(t *testing.T) {
			var first detRun
			var firstThreads int
			for _, threads := range []int{1, 2} {
				s, err := NewGoSession(c.model, Options{Threads: threads})
				if err != nil {
					t.Fatal(err)
				}
				all := runCopy(t, s, c.inputs, true, nil)
				var some []string
				for i, k := range sortedKeys(all) {
					if i%3 == 0 && len(k) > 4 && k[:4] == "tap:" {
						some = append(some, k[4:])
					}
				}
				runs := []detRun{
					runCopy(t, s, c.inputs, false, nil),
					all,
					runCopy(t, s, c.inputs, false, some),
					runCopy(t, s, c.inputs, false, nil),
				}
				// Two runs at once: the worker pool is busy, chunks run on
				// spare goroutines, buffers come back in another order.
				var wg sync.WaitGroup
				conc := make([]detRun, 2)
				errs := make([]error, 2)
				for i := range conc {
					wg.Go(func() { conc[i], errs[i] = runCopyErr(s, c.inputs, i == 0, nil) })
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				runs = append(runs, conc...)
				runs = append(runs, runCopy(t, s, c.inputs, true, nil))
				for i, r := range runs[1:] {
					if err := sameBits(runs[0], r); err != nil {
						t.Errorf("threads=%d: run %d differs from run 0: %v", threads, i+1, err)
					}
					if err := sameBits(all, r); err != nil {
						t.Errorf("threads=%d: run %d differs from the run tapping everything: %v", threads, i+1, err)
					}
				}
				if first == nil {
					first, firstThreads = all, threads
					continue
				}
				if err := sameBits(first, all); err != nil {
					t.Errorf("threads=%d and threads=%d differ: %v", firstThreads, threads, err)
				}
			}
		})
	}
}

// TestArenaPoison runs every model again on recycled buffers filled with
// NaN: a kernel that asks for an uncleared output buffer (newFloatOut)
// but leaves an element unwritten turns the result into NaN somewhere.
func TestArenaPoison(t *testing.T) {
	for _, c := range detCases(t) {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewGoSession(c.model, Options{Threads: 2, poisonArena: true})
			if err != nil {
				t.Fatal(err)
			}
			fresh := runCopy(t, s, c.inputs, false, nil)
			for i := range 2 {
				if err := sameBits(fresh, runCopy(t, s, c.inputs, false, nil)); err != nil {
					t.Fatalf("run %d on recycled buffers: %v", i+1, err)
				}
			}
		})
	}
}

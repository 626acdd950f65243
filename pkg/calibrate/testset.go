package calibrate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// testSet is one directory in the ONNX test data layout: input_N.pb holds
// a TensorProto for the model's N-th input, batch on axis 0.
type testSet struct {
	dir     string
	files   []string // by input index
	samples int
}

// TestSetSource reads directories in the layout of the ONNX model zoo and
// backend tests (test_data_set_*/input_N.pb). Each set's tensors carry
// their own batch (usually 1); the sets are concatenated in name order.
// Only the set a batch needs is held in memory.
type TestSetSource struct {
	inputs  []runtime.IOInfo
	sets    []testSet
	samples int

	cached int // index of the set in cache, -1 for none
	cache  []*tensor.Tensor
}

// IsTestSetDir reports whether dir holds input_N.pb files or
// test_data_set_* directories.
func IsTestSetDir(dir string) bool {
	if m, _ := filepath.Glob(filepath.Join(dir, "input_*.pb")); len(m) > 0 {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	return len(m) > 0
}

// OpenTestSets opens a test_data_set directory, or a directory of them,
// and checks every tensor's dtype and shape against the model's inputs
// (matched by index, as ONNX's test runner does) before calibration.
func OpenTestSets(inputs []runtime.IOInfo, dir string) (*TestSetSource, error) {
	var dirs []string
	if m, _ := filepath.Glob(filepath.Join(dir, "input_*.pb")); len(m) > 0 {
		dirs = []string{dir}
	} else {
		m, err := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
		if err != nil {
			return nil, err
		}
		for _, d := range m {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				dirs = append(dirs, d)
			}
		}
		slices.SortFunc(dirs, compareNatural)
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s: no input_N.pb files and no test_data_set_* directories", dir)
	}
	s := &TestSetSource{inputs: inputs, cached: -1}
	for _, d := range dirs {
		set, err := s.scan(d)
		if err != nil {
			return nil, err
		}
		s.sets = append(s.sets, set)
		s.samples += set.samples
	}
	return s, nil
}

// scan checks one set: one input_N.pb per model input, nothing more.
func (s *TestSetSource) scan(dir string) (testSet, error) {
	set := testSet{dir: dir, samples: -1}
	m, err := filepath.Glob(filepath.Join(dir, "input_*.pb"))
	if err != nil {
		return set, err
	}
	for _, p := range m {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "input_"), ".pb"))
		if err != nil || n < 0 {
			return set, fmt.Errorf("%s: expected input_N.pb with N a number", p)
		}
		if n >= len(s.inputs) {
			return set, fmt.Errorf("%s: the model has %d inputs (input_0.pb … input_%d.pb)", p, len(s.inputs), len(s.inputs)-1)
		}
	}
	for i, in := range s.inputs {
		p := filepath.Join(dir, fmt.Sprintf("input_%d.pb", i))
		t, err := readTensorProto(p)
		if err != nil {
			return set, fmt.Errorf("input %q: %w", in.Name, err)
		}
		if len(t.Shape) == 0 {
			return set, fmt.Errorf("input %q: %s is a scalar; calibration data has the batch on axis 0", in.Name, p)
		}
		if err := checkInput(in, t.DType, t.Shape[1:], p); err != nil {
			return set, err
		}
		if set.samples >= 0 && t.Shape[0] != set.samples {
			return set, fmt.Errorf("input %q: %s has %d samples, other inputs of the set have %d", in.Name, p, t.Shape[0], set.samples)
		}
		set.samples = t.Shape[0]
		set.files = append(set.files, p)
	}
	return set, nil
}

func readTensorProto(path string) (*tensor.Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tp onnxpb.TensorProto
	if err := proto.Unmarshal(b, &tp); err != nil {
		return nil, fmt.Errorf("%s: not a TensorProto: %w", path, err)
	}
	t, err := tensor.FromProto(&tp, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// compareNatural orders test_data_set_2 before test_data_set_10.
func compareNatural(a, b string) int {
	na, ea := trailingNumber(a)
	nb, eb := trailingNumber(b)
	if ea == nil && eb == nil && strings.TrimRight(a, "0123456789") == strings.TrimRight(b, "0123456789") && na != nb {
		return na - nb
	}
	return strings.Compare(a, b)
}

func trailingNumber(s string) (int, error) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return strconv.Atoi(s[i:])
}

// Samples implements Source.
func (s *TestSetSource) Samples() int { return s.samples }

// Random implements Source.
func (s *TestSetSource) Random() bool { return false }

// Close implements Source.
func (s *TestSetSource) Close() error { s.cache = nil; return nil }

// Batch implements Source.
func (s *TestSetSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	if start < 0 || end > s.samples || start >= end {
		return nil, fmt.Errorf("samples [%d, %d) out of the %d available", start, end, s.samples)
	}
	out := make(map[string]*tensor.Tensor, len(s.inputs))
	first := 0
	for k, set := range s.sets {
		lo, hi := max(start, first), min(end, first+set.samples)
		if lo < hi {
			if err := s.load(k); err != nil {
				return nil, err
			}
			for i, in := range s.inputs {
				if err := appendRows(out, in.Name, s.cache[i], lo-first, hi-first, end-start, lo-start); err != nil {
					return nil, fmt.Errorf("input %q: %s: %w (use --batch-size 1)", in.Name, set.files[i], err)
				}
			}
		}
		first += set.samples
	}
	return out, nil
}

// load reads set k into the cache, re-checking what scan saw (the files
// may have changed since).
func (s *TestSetSource) load(k int) error {
	if s.cached == k {
		return nil
	}
	s.cache, s.cached = s.cache[:0], -1
	set := s.sets[k]
	for i, in := range s.inputs {
		t, err := readTensorProto(set.files[i])
		if err != nil {
			return fmt.Errorf("input %q: %w", in.Name, err)
		}
		if len(t.Shape) == 0 || t.Shape[0] != set.samples {
			return fmt.Errorf("input %q: %s changed while calibrating", in.Name, set.files[i])
		}
		if err := checkInput(in, t.DType, t.Shape[1:], set.files[i]); err != nil {
			return err
		}
		s.cache = append(s.cache, t)
	}
	s.cached = k
	return nil
}

// appendRows copies rows [lo, hi) of src into rows [at, at+hi−lo) of the
// batch tensor out[name] of n rows, allocating it on first use. Samples of
// different sets may differ in symbolic dimensions; a batch cannot.
func appendRows(out map[string]*tensor.Tensor, name string, src *tensor.Tensor, lo, hi, n, at int) error {
	dst := out[name]
	if dst == nil {
		dst = tensor.New(src.DType, append([]int{n}, src.Shape[1:]...)...)
		out[name] = dst
	} else if !slices.Equal(dst.Shape[1:], src.Shape[1:]) {
		return fmt.Errorf("samples of shape %v cannot share a batch with samples of shape %v", src.Shape[1:], dst.Shape[1:])
	}
	row := src.DType.RawSize(tensor.NumElements(src.Shape[1:]))
	copy(tensor.ByteView(dst.Data)[at*row:], tensor.ByteView(src.Data)[lo*row:hi*row])
	return nil
}

package calibrate

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// Source serves calibration samples by index, so that batches of any size
// and shards of the data are cheap slices and memory stays one batch.
type Source interface {
	// Samples is the number of samples available.
	Samples() int
	// Batch returns samples [start, end) of every model input, with the
	// batch on axis 0, keyed by input name.
	Batch(start, end int) (map[string]*tensor.Tensor, error)
	// Random is true when the samples are random rather than real data.
	Random() bool
	Close() error
}

// checkInput checks one input's dtype and per-sample shape (the shape
// without axis 0) against the model input; symbolic model dims accept any
// size.
func checkInput(in runtime.IOInfo, dt tensor.DType, sample []int, where string) error {
	if in.DType != dt {
		return fmt.Errorf("input %q: %s holds %s, the model wants %s", in.Name, where, dt, in.DType)
	}
	if in.Shape == nil {
		return nil
	}
	if len(in.Shape) != len(sample)+1 {
		return fmt.Errorf("input %q: %s has samples of shape %v (rank %d with the batch axis), the model wants rank %d %v",
			in.Name, where, sample, len(sample)+1, len(in.Shape), in.Shape)
	}
	for i, d := range in.Shape[1:] {
		if d >= 0 && int(d) != sample[i] {
			return fmt.Errorf("input %q: %s has samples of shape %v, the model wants %v (dimension %d)", in.Name, where, sample, in.Shape, i+1)
		}
	}
	return nil
}

// npyFile is one input's .npy file, read one batch at a time.
type npyFile struct {
	path string
	f    *os.File
	h    *npy.Header
	row  int64 // bytes per sample
}

// NPYSource reads .npy files with the batch on axis 0, one file per model
// input.
type NPYSource struct {
	files   map[string]*npyFile
	names   []string
	samples int
}

// OpenNPY opens one .npy file per model input: files maps input names to
// paths; a single unnamed file (key "") feeds a model with one input. Each
// file is checked against the model's inputs before any data is read.
func OpenNPY(inputs []runtime.IOInfo, files map[string]string) (_ *NPYSource, err error) {
	if p, ok := files[""]; ok && len(files) == 1 && len(inputs) == 1 {
		files = map[string]string{inputs[0].Name: p}
	}
	s := &NPYSource{files: map[string]*npyFile{}, samples: -1}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, in := range inputs {
		path, ok := files[in.Name]
		if !ok {
			return nil, fmt.Errorf("input %q: no calibration data (give --data %s=FILE.npy)", in.Name, in.Name)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		nf := &npyFile{path: path, f: f}
		s.files[in.Name] = nf
		s.names = append(s.names, in.Name)
		if nf.h, err = npy.ReadHeader(f); err != nil {
			return nil, fmt.Errorf("input %q: %s: %w", in.Name, path, err)
		}
		h := nf.h
		if len(h.Shape) == 0 {
			return nil, fmt.Errorf("input %q: %s is a scalar; calibration data has the batch on axis 0", in.Name, path)
		}
		if h.FortranOrder && tensor.NumElements(h.Shape[1:]) > 1 {
			return nil, fmt.Errorf("input %q: %s is in Fortran order; save it with np.ascontiguousarray", in.Name, path)
		}
		if err := checkInput(in, h.DType, h.Shape[1:], path); err != nil {
			return nil, err
		}
		nf.row = int64(h.DType.RawSize(tensor.NumElements(h.Shape[1:])))
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if need := h.DataOffset + nf.row*int64(h.Shape[0]); st.Size() < need {
			return nil, fmt.Errorf("input %q: %s is truncated: %d bytes, the header needs %d", in.Name, path, st.Size(), need)
		}
		if s.samples >= 0 && h.Shape[0] != s.samples {
			return nil, fmt.Errorf("input %q: %s has %d samples, other inputs have %d", in.Name, path, h.Shape[0], s.samples)
		}
		s.samples = h.Shape[0]
	}
	for name := range files {
		if !slices.Contains(s.names, name) {
			return nil, fmt.Errorf("calibration data for %q, which is not a model input (inputs: %s)", name, strings.Join(s.names, ", "))
		}
	}
	return s, nil
}

// Samples implements Source.
func (s *NPYSource) Samples() int { return max(s.samples, 0) }

// Random implements Source.
func (s *NPYSource) Random() bool { return false }

// Batch implements Source: it reads only the rows asked for.
func (s *NPYSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	if start < 0 || end > s.samples || start >= end {
		return nil, fmt.Errorf("samples [%d, %d) out of the %d available", start, end, s.samples)
	}
	out := make(map[string]*tensor.Tensor, len(s.names))
	for _, name := range s.names {
		nf := s.files[name]
		shape := append([]int{end - start}, nf.h.Shape[1:]...)
		t := tensor.New(nf.h.DType, shape...)
		b := tensor.ByteView(t.Data)
		if _, err := nf.f.ReadAt(b, nf.h.DataOffset+int64(start)*nf.row); err != nil {
			return nil, fmt.Errorf("input %q: %s: reading samples [%d, %d): %w", name, nf.path, start, end, err)
		}
		if nf.h.BigEndian == tensor.NativeLittleEndian() && nf.h.DType.ElemSize() > 1 {
			word := nf.h.DType.ElemSize()
			if nf.h.DType == tensor.Complex64 || nf.h.DType == tensor.Complex128 {
				word /= 2
			}
			tensor.SwapBytes(b, word)
		}
		out[name] = t
	}
	return out, nil
}

// Close implements Source.
func (s *NPYSource) Close() error {
	var first error
	for _, name := range s.names {
		if err := s.files[name].f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// RandomSource makes standard-normal float inputs (uniform 0..9 for integer
// inputs) for smoke tests. Sample i is generated from seed i alone, so a
// batch of any size holds the same samples. Stats made from it are marked
// random_data: true.
type RandomSource struct {
	inputs  []runtime.IOInfo
	samples int
}

// NewRandomSource checks that every input has a fixed shape apart from the
// batch axis.
func NewRandomSource(inputs []runtime.IOInfo, samples int) (*RandomSource, error) {
	for _, in := range inputs {
		if len(in.Shape) == 0 {
			return nil, fmt.Errorf("input %q: random data needs a known shape with a batch axis", in.Name)
		}
		for i, d := range in.Shape[1:] {
			if d < 0 {
				return nil, fmt.Errorf("input %q: dimension %d is symbolic; random data needs a fixed shape", in.Name, i+1)
			}
		}
		switch in.DType {
		case tensor.Float, tensor.Int64, tensor.Int32:
		default:
			return nil, fmt.Errorf("input %q: random data for %s inputs is not supported", in.Name, in.DType)
		}
	}
	return &RandomSource{inputs: inputs, samples: samples}, nil
}

// Samples implements Source.
func (s *RandomSource) Samples() int { return s.samples }

// Random implements Source.
func (s *RandomSource) Random() bool { return true }

// Close implements Source.
func (s *RandomSource) Close() error { return nil }

// Batch implements Source.
func (s *RandomSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	out := map[string]*tensor.Tensor{}
	for k, in := range s.inputs {
		sample := make([]int, len(in.Shape)-1)
		for i, d := range in.Shape[1:] {
			sample[i] = int(d)
		}
		per := tensor.NumElements(sample)
		t := tensor.New(in.DType, append([]int{end - start}, sample...)...)
		for i := start; i < end; i++ {
			r := rand.New(rand.NewPCG(uint64(i), uint64(k)))
			off := (i - start) * per
			for j := range per {
				switch d := t.Data.(type) {
				case []float32:
					d[off+j] = float32(r.NormFloat64())
				case []int64:
					d[off+j] = int64(r.IntN(10))
				case []int32:
					d[off+j] = int32(r.IntN(10))
				}
			}
		}
		out[in.Name] = t
	}
	return out, nil
}

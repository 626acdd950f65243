package calibrate

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// array is one input's NumPy array with the batch on axis 0, read one
// batch at a time. Plain .npy files and uncompressed .npz members are read
// at any offset; deflated .npz members (np.savez_compressed) are streamed
// forwards and reopened when a batch lies behind the stream, which the
// calibration driver's in-order batches never cause.
type array struct {
	where string // the file (and member) for messages
	h     *npy.Header
	row   int64 // bytes per sample
	// axis is the batch axis (0 unless the entry gave one). With axis k a
	// sample is a slice along k, read as one run per index of the axes
	// before k; inner is the bytes of one sample's run.
	axis  int
	inner int64

	ra  io.ReaderAt // random access: the data starts at off
	off int64

	open func() (io.ReadCloser, error) // sequential access
	rc   io.ReadCloser
	next int // the sample rc is positioned at
}

// check validates the header against the model input and the bytes
// available (size < 0: unknown).
func (a *array) check(in runtime.IOInfo, size int64) error {
	h := a.h
	if len(h.Shape) == 0 {
		return fmt.Errorf("input %q: %s is a scalar; calibration data has the batch on axis 0", in.Name, a.where)
	}
	if a.axis >= len(h.Shape) {
		return fmt.Errorf("input %q: %s has shape %v, no axis %d to take samples along", in.Name, a.where, h.Shape, a.axis)
	}
	if h.FortranOrder && tensor.NumElements(h.Shape[1:]) > 1 {
		return fmt.Errorf("input %q: %s is in Fortran order; save it with np.ascontiguousarray", in.Name, a.where)
	}
	if a.axis > 0 {
		if a.ra == nil {
			return fmt.Errorf("input %q: %s is compressed; a batch axis needs a plain .npy file", in.Name, a.where)
		}
		if len(in.Shape) > a.axis {
			// Compare with the batch moved to the front, as for axis 0.
			in.Shape = append(append([]int64{in.Shape[a.axis]}, in.Shape[:a.axis]...), in.Shape[a.axis+1:]...)
		}
	}
	sample := append(slices.Clone(h.Shape[:a.axis]), h.Shape[a.axis+1:]...)
	if err := checkInput(in, h.DType, sample, a.where); err != nil {
		return err
	}
	a.row = int64(h.DType.RawSize(tensor.NumElements(sample)))
	a.inner = int64(h.DType.RawSize(tensor.NumElements(h.Shape[a.axis+1:])))
	if need := a.row * int64(h.Shape[a.axis]); size >= 0 && size < need {
		return fmt.Errorf("input %q: %s is truncated: %d bytes of data, the header needs %d", in.Name, a.where, size, need)
	}
	return nil
}

// read returns samples [start, end).
func (a *array) read(start, end int) (*tensor.Tensor, error) {
	shape := slices.Clone(a.h.Shape)
	shape[a.axis] = end - start
	t := tensor.New(a.h.DType, shape...)
	b := tensor.ByteView(t.Data)
	var err error
	switch {
	case a.axis > 0:
		// One run of end-start samples per index of the outer axes.
		run, n := int64(end-start)*a.inner, int64(a.h.Shape[a.axis])
		for o := range int64(tensor.NumElements(a.h.Shape[:a.axis])) {
			if _, err = a.ra.ReadAt(b[o*run:(o+1)*run], a.off+(o*n+int64(start))*a.inner); err != nil {
				break
			}
		}
	case a.ra != nil:
		_, err = a.ra.ReadAt(b, a.off+int64(start)*a.row)
	default:
		err = a.readStream(b, start)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reading samples [%d, %d): %w", a.where, start, end, err)
	}
	if a.h.BigEndian == tensor.NativeLittleEndian() && a.h.DType.ElemSize() > 1 {
		word := a.h.DType.ElemSize()
		if a.h.DType == tensor.Complex64 || a.h.DType == tensor.Complex128 {
			word /= 2
		}
		tensor.SwapBytes(b, word)
	}
	if a.h.DType == tensor.Bool {
		for i, v := range b {
			b[i] = min(v, 1)
		}
	}
	return t, nil
}

func (a *array) readStream(b []byte, start int) error {
	if a.rc == nil || start < a.next {
		if a.rc != nil {
			a.rc.Close()
		}
		rc, err := a.open()
		if err != nil {
			return err
		}
		a.rc, a.next = rc, 0
		if _, err := npy.ReadHeader(rc); err != nil {
			return err
		}
	}
	if skip := int64(start-a.next) * a.row; skip > 0 {
		if _, err := io.CopyN(io.Discard, a.rc, skip); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(a.rc, b); err != nil {
		return err
	}
	a.next = start + len(b)/int(max(a.row, 1))
	return nil
}

func (a *array) close() error {
	if a.rc != nil {
		return a.rc.Close()
	}
	return nil
}

// NPYSource reads NumPy arrays with the batch on axis 0, one per model
// input: .npy files, or the members of an .npz archive.
type NPYSource struct {
	arrays  map[string]*array
	names   []string
	samples int
	closers []io.Closer
}

// add checks one input's array and records its sample count.
func (s *NPYSource) add(in runtime.IOInfo, a *array, size int64) error {
	if err := a.check(in, size); err != nil {
		return err
	}
	if n := a.h.Shape[a.axis]; s.samples >= 0 && n != s.samples {
		hint := ""
		if a.axis == 0 && len(a.h.Shape) > 1 && slices.Contains(a.h.Shape[1:], s.samples) {
			hint = fmt.Sprintf(" (if its samples lie along another axis, say which: --data %s=FILE.npy:axis=K)", in.Name)
		}
		return fmt.Errorf("input %q: %s has %d samples on axis %d, other inputs have %d%s", in.Name, a.where, n, a.axis, s.samples, hint)
	}
	s.samples = a.h.Shape[a.axis]
	s.arrays[in.Name] = a
	s.names = append(s.names, in.Name)
	return nil
}

// OpenNPY opens one .npy file per model input: files maps input names to
// paths; a single unnamed file (key "") feeds a model with one input. Each
// file is checked against the model's inputs before any data is read.
func OpenNPY(inputs []runtime.IOInfo, files map[string]string) (*NPYSource, error) {
	return OpenNPYAxes(inputs, files, nil)
}

// OpenNPYAxes is OpenNPY with a batch axis per input name (missing: 0).
func OpenNPYAxes(inputs []runtime.IOInfo, files map[string]string, axes map[string]int) (_ *NPYSource, err error) {
	if p, ok := files[""]; ok && len(files) == 1 && len(inputs) == 1 {
		files = map[string]string{inputs[0].Name: p}
		axes = map[string]int{inputs[0].Name: axes[""]}
	}
	s := &NPYSource{arrays: map[string]*array{}, samples: -1}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, name := range slices.Sorted(mapKeys(files)) {
		if name != "" && !slices.ContainsFunc(inputs, func(in runtime.IOInfo) bool { return in.Name == name }) {
			return nil, fmt.Errorf("calibration data %s for %q, which is not a model input (inputs: %s)", files[name], name, inputNames(inputs))
		}
	}
	var pasts []runtime.IOInfo
	for _, in := range inputs {
		path, ok := files[in.Name]
		if !ok && emptyPastShape(in) != nil {
			pasts = append(pasts, in)
			continue
		}
		if !ok {
			return nil, fmt.Errorf("input %q: no calibration data (give --data %s=FILE.npy)", in.Name, in.Name)
		}
		if err := onnxgraph.CheckRegularFile(path); err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		s.closers = append(s.closers, f)
		h, err := npy.ReadHeader(f)
		if err != nil {
			return nil, fmt.Errorf("input %q: %s: %w", in.Name, path, err)
		}
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if err := s.add(in, &array{where: path, h: h, ra: f, off: h.DataOffset, axis: axes[in.Name]}, st.Size()-h.DataOffset); err != nil {
			return nil, err
		}
	}
	for _, in := range pasts {
		if s.samples < 0 {
			return nil, fmt.Errorf("input %q: no calibration data (give --data %s=FILE.npy); an empty past needs another input to count the samples", in.Name, in.Name)
		}
		shape := append([]int{s.samples}, emptyPastShape(in)...)
		slog.Info("calibration: no data for a past key/value input; each sample starts from an empty past", "input", in.Name, "shape", shape)
		h := &npy.Header{DType: in.DType, Shape: shape}
		if err := s.add(in, &array{where: "an empty past", h: h, ra: emptyData{}}, 0); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// emptyPastShape is the shape of one sample of an empty past for in, a
// decoder's key/value cache input (named past_key_values…, past_… or
// past.…, as Hugging Face's and ONNX Runtime GenAI's exports name them)
// whose declared shape after the batch axis has exactly one dynamic
// dimension, the past sequence: that dimension is 0, the others as
// declared. It is nil for any other input. A decoder calibrated this way
// sees each sample as a whole prompt, which is how its first step runs.
func emptyPastShape(in runtime.IOInfo) []int {
	name := strings.ToLower(in.Name)
	if !strings.HasPrefix(name, "past_key_values") && !strings.HasPrefix(name, "past_") && !strings.HasPrefix(name, "past.") {
		return nil
	}
	if len(in.Shape) < 2 {
		return nil
	}
	shape, dynamic := make([]int, len(in.Shape)-1), 0
	for i, d := range in.Shape[1:] {
		if d < 0 {
			dynamic++
			continue
		}
		shape[i] = int(d)
	}
	if dynamic != 1 {
		return nil
	}
	return shape
}

// emptyData is the data of an array with no elements.
type emptyData struct{}

func (emptyData) ReadAt(b []byte, _ int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return 0, io.EOF
}

// OpenNPZ opens an .npz archive (np.savez or np.savez_compressed) whose
// keys are the model's input names. Members are read in place, one batch at
// a time: the archive is never loaded whole.
func OpenNPZ(inputs []runtime.IOInfo, path string) (_ *NPYSource, err error) {
	if err := onnxgraph.CheckRegularFile(path); err != nil {
		return nil, err
	}
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not an .npz archive: %w", path, err)
	}
	s := &NPYSource{arrays: map[string]*array{}, samples: -1, closers: []io.Closer{zr}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, f)
	members := map[string]*zip.File{}
	var keys []string
	for _, m := range zr.File {
		key := strings.TrimSuffix(m.Name, ".npy")
		members[key] = m
		keys = append(keys, key)
	}
	for _, in := range inputs {
		m, ok := members[in.Name]
		if !ok {
			return nil, fmt.Errorf("input %q: %s has no array %q (keys: %s)", in.Name, path, in.Name, strings.Join(keys, ", "))
		}
		where := path + ":" + m.Name
		rc, err := m.Open()
		if err != nil {
			return nil, fmt.Errorf("input %q: %s: %w", in.Name, where, err)
		}
		h, err := npy.ReadHeader(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("input %q: %s: %w", in.Name, where, err)
		}
		a := &array{where: where, h: h}
		if m.Method == zip.Store {
			off, err := m.DataOffset()
			if err != nil {
				return nil, fmt.Errorf("input %q: %s: %w", in.Name, where, err)
			}
			a.ra, a.off = f, off+h.DataOffset
		} else {
			a.open = m.Open
		}
		if err := s.add(in, a, int64(m.UncompressedSize64)-h.DataOffset); err != nil {
			return nil, err
		}
	}
	for _, k := range keys {
		if !slices.Contains(s.names, k) {
			return nil, fmt.Errorf("%s: array %q is not a model input (inputs: %s)", path, k, strings.Join(s.names, ", "))
		}
	}
	return s, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
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
		t, err := s.arrays[name].read(start, end)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// Close implements Source.
func (s *NPYSource) Close() error {
	var errs []error
	for _, name := range s.names {
		errs = append(errs, s.arrays[name].close())
	}
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

package onnxgraph

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// checkTensors validates every tensor's dims and data up front, external
// references included (location, file size, length against the dims), so
// that a bad model fails at load rather than halfway through a run, and
// without reading any external data.
func (m *Model) checkTensors() error {
	var errs []error
	m.AllTensors(func(t *onnxpb.TensorProto) {
		if len(errs) >= maxTensorErrors {
			return
		}
		var length int64
		if IsExternal(t) {
			ref, err := ExternalRefOf(t)
			if err == nil {
				_, length, err = m.openExternal(ref)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("tensor %q: %w", t.GetName(), err))
				return
			}
		}
		if err := tensor.CheckProto(t, length); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

// maxTensorErrors caps the tensor errors one load reports.
const maxTensorErrors = 10

// checkLocation rejects locations that could reach outside the model's
// directory: absolute paths, ".." components, and symbolic links.
func checkLocation(dir, loc string) (string, error) {
	clean := filepath.ToSlash(loc)
	if filepath.IsAbs(loc) || path.IsAbs(clean) || filepath.VolumeName(loc) != "" {
		return "", fmt.Errorf("external data location %q is an absolute path; it must be relative to the model's directory", loc)
	}
	for _, part := range strings.Split(clean, "/") {
		if part == ".." {
			return "", fmt.Errorf("external data location %q leaves the model's directory", loc)
		}
	}
	if dir == "" {
		return "", fmt.Errorf("external data location %q: the model was not loaded from a file, so there is no directory to read it from", loc)
	}
	full := filepath.Join(dir, filepath.FromSlash(clean))
	// Every component below dir must be a plain directory or file, never a link.
	rel := ""
	for _, part := range strings.Split(clean, "/") {
		rel = filepath.Join(rel, part)
		fi, err := os.Lstat(filepath.Join(dir, rel))
		if err != nil {
			return "", fmt.Errorf("external data %q: %w", loc, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("external data location %q is a symbolic link, which is not allowed", loc)
		}
	}
	return full, nil
}

// openExternal checks ref and returns the file's path and the length of
// the range ref names.
func (m *Model) openExternal(ref ExternalRef) (string, int64, error) {
	if s := m.storeOf(ref); s != nil {
		size, err := s.size()
		if err != nil {
			return "", 0, err
		}
		length, err := externalRange(ref, size)
		return "", length, err
	}
	full, err := checkLocation(m.Dir, ref.Location)
	if err != nil {
		return "", 0, err
	}
	fi, err := os.Stat(full)
	if err != nil {
		return "", 0, fmt.Errorf("external data %q: %w", ref.Location, err)
	}
	if !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("external data %q is not a regular file", ref.Location)
	}
	length, err := externalRange(ref, fi.Size())
	if err != nil {
		return "", 0, err
	}
	return full, length, nil
}

// externalRange is the length of the range ref names in a file of size
// bytes, or an error when the range does not lie inside the file. The
// comparisons are written so that no sum can overflow.
func externalRange(ref ExternalRef, size int64) (int64, error) {
	if ref.Offset < 0 || ref.Length < -1 {
		return 0, fmt.Errorf("external data %q: bad offset %d or length %d", ref.Location, ref.Offset, ref.Length)
	}
	if ref.Offset > size {
		return 0, fmt.Errorf("external data %q is %d bytes; the offset %d lies past its end", ref.Location, size, ref.Offset)
	}
	if ref.Length < 0 {
		return size - ref.Offset, nil
	}
	if ref.Length > size-ref.Offset {
		return 0, fmt.Errorf("external data %q is %d bytes; offset %d and length %d run past its end",
			ref.Location, size, ref.Offset, ref.Length)
	}
	return ref.Length, nil
}

// ReadExternal returns the bytes of a tensor stored as external data.
func (m *Model) ReadExternal(t *onnxpb.TensorProto) ([]byte, error) {
	var buf []byte
	err := m.readExternal(t, func(n int64) ([]byte, error) { buf = make([]byte, n); return buf, nil })
	return buf, err
}

// ReadExternalTo reads the bytes of a tensor stored as external data into
// dst, which must be exactly as long as the data: a caller that decodes
// the bytes in place (a float tensor on a little-endian machine) saves a
// copy of the tensor.
func (m *Model) ReadExternalTo(t *onnxpb.TensorProto, dst []byte) error {
	return m.readExternal(t, func(n int64) ([]byte, error) {
		if n != int64(len(dst)) {
			return nil, fmt.Errorf("tensor %q: its external data is %d bytes, not the %d its reader expected", t.GetName(), n, len(dst))
		}
		return dst, nil
	})
}

// readExternal checks t's external range and reads it into the buffer
// alloc returns for its length.
func (m *Model) readExternal(t *onnxpb.TensorProto, alloc func(int64) ([]byte, error)) error {
	ref, err := ExternalRefOf(t)
	if err != nil {
		return err
	}
	full, length, err := m.openExternal(ref)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.GetName(), err)
	}
	// The range must be what the dims need before anything is allocated:
	// the file may have changed since load.
	if err := tensor.CheckProto(t, length); err != nil {
		return err
	}
	buf, err := alloc(length)
	if err != nil {
		return err
	}
	var r io.ReaderAt
	what := fmt.Sprintf("external data %q", ref.Location)
	if s := m.storeOf(ref); s != nil {
		sr, release, err := s.open()
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.GetName(), err)
		}
		defer release()
		r, what = sr, "its bytes"
	} else {
		f, err := os.Open(full)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.GetName(), err)
		}
		defer f.Close()
		r = f
	}
	if _, err := r.ReadAt(buf, ref.Offset); err != nil && !(errors.Is(err, io.EOF) && length == 0) {
		return fmt.Errorf("tensor %q: reading %s: %w", t.GetName(), what, err)
	}
	return nil
}

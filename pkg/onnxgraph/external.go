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
)

// checkExternalData validates every external reference up front, so that a
// bad model fails at load rather than halfway through a run.
func (m *Model) checkExternalData() error {
	var errs []error
	m.AllTensors(func(t *onnxpb.TensorProto) {
		if !IsExternal(t) {
			return
		}
		ref, err := ExternalRefOf(t)
		if err == nil {
			_, err = m.openExternal(ref)
		}
		if err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

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

// openExternal checks ref and returns the file's path.
func (m *Model) openExternal(ref ExternalRef) (string, error) {
	full, err := checkLocation(m.Dir, ref.Location)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(full)
	if err != nil {
		return "", fmt.Errorf("external data %q: %w", ref.Location, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("external data %q is not a regular file", ref.Location)
	}
	end := ref.Offset
	if ref.Length >= 0 {
		end += ref.Length
	}
	if end > fi.Size() {
		return "", fmt.Errorf("external data %q is %d bytes; the model expects at least %d (offset %d, length %d)",
			ref.Location, fi.Size(), end, ref.Offset, ref.Length)
	}
	return full, nil
}

// ReadExternal returns the bytes of a tensor stored as external data.
func (m *Model) ReadExternal(t *onnxpb.TensorProto) ([]byte, error) {
	ref, err := ExternalRefOf(t)
	if err != nil {
		return nil, err
	}
	full, err := m.openExternal(ref)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.GetName(), err)
	}
	f, err := os.Open(full)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.GetName(), err)
	}
	defer f.Close()
	length := ref.Length
	if length < 0 {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		length = fi.Size() - ref.Offset
	}
	buf := make([]byte, length)
	if _, err := f.ReadAt(buf, ref.Offset); err != nil && !(errors.Is(err, io.EOF) && length == 0) {
		return nil, fmt.Errorf("tensor %q: reading external data %q: %w", t.GetName(), ref.Location, err)
	}
	return buf, nil
}

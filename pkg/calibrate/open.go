package calibrate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Open opens the calibration data of a command line or config file
// (--data entries, calibration.data and calibration.images):
//
//	FILE.npy         the data of a one-input model, batch on axis 0
//	NAME=FILE.npy    the data of input NAME (one entry per input)
//	FILE.npz         arrays keyed by input name
//	DIR              ONNX test data: DIR/input_N.pb, or DIR/test_data_set_*/input_N.pb
//	images           the config's calibration.images block
//
// .npy entries together make one source; each .npz, directory and the
// images block is a source of every input; several sources are
// concatenated in the order given. Every source is checked against the
// model's inputs (dtype, rank, fixed dimensions) before any sample is run.
func Open(inputs []runtime.IOInfo, data []string, images *config.Images) (_ Source, err error) {
	var sources []Source
	defer func() {
		if err != nil {
			for _, s := range sources {
				s.Close()
			}
		}
	}()
	npyFiles, axes := map[string]string{}, map[string]int{}
	for _, d := range data {
		entry, err := config.ParseDataEntry(d)
		if err != nil {
			return nil, err
		}
		name, file := entry.Name, entry.File
		named := name != ""
		if entry.Axis != 0 && !strings.EqualFold(filepath.Ext(file), ".npy") {
			return nil, fmt.Errorf("--data %q: a batch axis applies to .npy files only", d)
		}
		axes[name] = entry.Axis
		if st, err := os.Stat(file); err == nil && st.IsDir() {
			if named {
				return nil, fmt.Errorf("--data %q: a directory feeds every input (input_N.pb by index); drop %q", d, name+"=")
			}
			if !IsTestSetDir(file) {
				return nil, fmt.Errorf("%s: no input_N.pb files and no test_data_set_* directories (for image files, use a calibration.images block in the config)", file)
			}
			s, err := OpenTestSets(inputs, file)
			if err != nil {
				return nil, err
			}
			sources = append(sources, s)
			continue
		}
		switch ext := strings.ToLower(filepath.Ext(file)); ext {
		case ".npy":
			if _, dup := npyFiles[name]; dup {
				if name == "" {
					return nil, fmt.Errorf("--data %q: a second unnamed .npy file; name the inputs with NAME=FILE.npy", d)
				}
				return nil, fmt.Errorf("--data %q: input %q given twice", d, name)
			}
			npyFiles[name] = file
		case ".npz":
			if named {
				return nil, fmt.Errorf("--data %q: an .npz archive holds every input under its name; drop %q", d, name+"=")
			}
			s, err := OpenNPZ(inputs, file)
			if err != nil {
				return nil, err
			}
			sources = append(sources, s)
		default:
			if _, err := os.Stat(file); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("--data %q: unknown kind of data %q: give .npy, .npz or a test_data_set directory", d, ext)
		}
	}
	if len(npyFiles) > 0 {
		if _, ok := npyFiles[""]; ok && len(npyFiles) > 1 {
			return nil, errors.New("--data: mix of named (NAME=FILE.npy) and unnamed .npy files")
		}
		s, err := OpenNPYAxes(inputs, npyFiles, axes)
		if err != nil {
			return nil, err
		}
		sources = append([]Source{s}, sources...)
	}
	if images != nil {
		s, err := OpenImages(inputs, images)
		if err != nil {
			return nil, err
		}
		sources = append(sources, s)
	}
	if len(sources) > 1 {
		for name, axis := range axes {
			if axis != 0 {
				return nil, fmt.Errorf("--data %s=...:axis=%d: data with the batch on another axis than 0 cannot be joined with other sources", name, axis)
			}
		}
	}
	switch len(sources) {
	case 0:
		return nil, errors.New("no calibration data: give --data (calibration.data or calibration.images in the config)")
	case 1:
		return sources[0], nil
	}
	return &concatSource{parts: sources}, nil
}

// concatSource serves several sources one after another.
type concatSource struct{ parts []Source }

func (c *concatSource) Samples() int {
	n := 0
	for _, p := range c.parts {
		n += p.Samples()
	}
	return n
}

func (c *concatSource) Random() bool { return false }

func (c *concatSource) Close() error {
	var errs []error
	for _, p := range c.parts {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Batch reads the overlapping range of each part and joins them along the
// batch axis.
func (c *concatSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	if start < 0 || end > c.Samples() || start >= end {
		return nil, fmt.Errorf("samples [%d, %d) out of the %d available", start, end, c.Samples())
	}
	out := map[string]*tensor.Tensor{}
	first := 0
	for _, p := range c.parts {
		n := p.Samples()
		lo, hi := max(start, first), min(end, first+n)
		if lo < hi {
			part, err := p.Batch(lo-first, hi-first)
			if err != nil {
				return nil, err
			}
			for name, t := range part {
				if err := appendRows(out, name, t, 0, hi-lo, end-start, lo-start); err != nil {
					return nil, fmt.Errorf("input %q: %w (use --batch-size 1)", name, err)
				}
			}
		}
		first += n
	}
	return out, nil
}

package onnxgraph

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// ExternalMode says when Save writes tensors to an external data file.
type ExternalMode int

const (
	// ExternalAuto writes external data when the model had external data or
	// when it would not fit in a 2 GiB protobuf.
	ExternalAuto ExternalMode = iota
	// ExternalAlways writes every tensor at or above the threshold externally.
	ExternalAlways
	// ExternalNever writes everything inline (fails over 2 GiB).
	ExternalNever
)

// MaxProtoSize is the largest serialized model ONNX Runtime and the
// reference ONNX tools accept in one protobuf.
const MaxProtoSize = 2<<30 - 1

// externalAlign is the offset alignment of tensors in external data files,
// so that readers can mmap them.
const externalAlign = 4096

// SaveOptions controls Save.
type SaveOptions struct {
	External ExternalMode
	// Threshold is the size in bytes from which a tensor goes external
	// (default 1024, as ONNX's writer).
	Threshold int
	// Location is the data file's name, relative to the output's directory
	// (default: the output's base name + ".data").
	Location string
}

// Save writes the model to path atomically (a temp file renamed into
// place), with deterministic bytes. External data, when written, goes to
// one file beside it with every tensor at a 4 KiB aligned offset. The
// in-memory model is left as it was.
func (m *Model) Save(path string, opts SaveOptions) error {
	if opts.Threshold <= 0 {
		opts.Threshold = 1024
	}
	if opts.Location == "" {
		opts.Location = filepath.Base(path) + ".data"
	}
	if _, err := checkLocation(filepath.Dir(path), opts.Location); err != nil && !os.IsNotExist(unwrapAll(err)) {
		return &FileError{Path: path, Err: err}
	}
	external := opts.External == ExternalAlways
	hadExternal := false
	// Tensors in a store count as held in memory: where they waited does
	// not change what is written.
	m.AllTensors(func(t *onnxpb.TensorProto) { hadExternal = hadExternal || (IsExternal(t) && !m.InStore(t)) })
	if opts.External == ExternalAuto {
		external = hadExternal || m.inlineSize() > MaxProtoSize
	}
	if err := m.save(path, opts, external); err != nil {
		return &FileError{Path: path, Err: err}
	}
	return nil
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// inlineSize is the serialized size with every external tensor inlined.
func (m *Model) inlineSize() int64 {
	size := int64(proto.Size(m.Proto))
	m.AllTensors(func(t *onnxpb.TensorProto) {
		if IsExternal(t) {
			if ref, err := ExternalRefOf(t); err == nil && ref.Length > 0 {
				size += ref.Length + 16
			}
		}
	})
	return size
}

// tensorState is the part of a TensorProto that Save rewrites and restores.
type tensorState struct {
	t        *onnxpb.TensorProto
	raw      []byte
	external []*onnxpb.StringStringEntryProto
	location *onnxpb.TensorProto_DataLocation
}

func (m *Model) save(path string, opts SaveOptions, external bool) (err error) {
	dir := filepath.Dir(path)
	var saved []tensorState
	defer func() {
		for _, s := range saved {
			s.t.RawData, s.t.ExternalData, s.t.DataLocation = s.raw, s.external, s.location
		}
	}()
	var dataTmp *os.File
	var offset int64
	if external {
		dataTmp, err = os.CreateTemp(dir, ".coreaiq-*.data.tmp")
		if err != nil {
			return err
		}
		defer func() {
			if dataTmp != nil {
				dataTmp.Close()
				os.Remove(dataTmp.Name())
			}
		}()
	}
	var walkErr error
	m.AllTensors(func(t *onnxpb.TensorProto) {
		if walkErr != nil {
			return
		}
		st := tensorState{t: t, raw: t.RawData, external: t.ExternalData, location: t.DataLocation}
		raw := t.RawData
		if IsExternal(t) {
			if raw, walkErr = m.ReadExternal(t); walkErr != nil {
				return
			}
		}
		// Small tensors go inline even when the source kept them outside:
		// ONNX Runtime reads some inputs (a Reshape's shape, a Slice's
		// starts) only from inline data when it plans the graph.
		toExternal := external && (t.RawData != nil || IsExternal(t)) && len(raw) >= opts.Threshold
		if !toExternal && !IsExternal(t) {
			return
		}
		saved = append(saved, st)
		if !toExternal {
			t.RawData, t.ExternalData, t.DataLocation = raw, nil, nil
			return
		}
		offset = (offset + externalAlign - 1) / externalAlign * externalAlign
		if _, walkErr = dataTmp.WriteAt(raw, offset); walkErr != nil {
			return
		}
		loc := onnxpb.TensorProto_EXTERNAL
		t.RawData, t.DataLocation = nil, &loc
		t.ExternalData = []*onnxpb.StringStringEntryProto{
			{Key: proto.String("location"), Value: proto.String(opts.Location)},
			{Key: proto.String("offset"), Value: proto.String(strconv.FormatInt(offset, 10))},
			{Key: proto.String("length"), Value: proto.String(strconv.Itoa(len(raw)))},
		}
		offset += int64(len(raw))
	})
	if walkErr != nil {
		return walkErr
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Proto)
	if err != nil {
		return err
	}
	if len(b) > MaxProtoSize {
		return fmt.Errorf("the model is %d bytes, over the 2 GiB protobuf limit; save it with external data", len(b))
	}
	if dataTmp != nil {
		if err := dataTmp.Sync(); err != nil {
			return err
		}
		if err := dataTmp.Close(); err != nil {
			return err
		}
		name := dataTmp.Name()
		// The data file is as readable as the model it belongs to
		// (WriteFileAtomic's mode), not CreateTemp's owner-only 0600.
		if err := os.Chmod(name, 0o644); err != nil {
			return err
		}
		dataTmp = nil
		if err := os.Rename(name, filepath.Join(dir, filepath.FromSlash(opts.Location))); err != nil {
			os.Remove(name)
			return err
		}
	}
	return WriteFileAtomic(path, b)
}

// WriteFileAtomic writes b to a temp file beside path and renames it into
// place, so that a reader never sees a partial file.
func WriteFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

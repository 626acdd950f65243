package onnxgraph

import (
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// A store holds the bytes of tensors that the model keeps out of memory
// although it has no external data file for them: the model file itself
// (a large model loaded without external data keeps its tensors' bytes
// there until they are read) or a Scratch file. Such a tensor carries an
// external reference whose location is the store's, a name that cannot
// be a file (it starts with NUL); readers see an external tensor and read
// it through the model as any other. Save and Marshal treat it as held in
// memory: where it waited does not change what is written.
type store interface {
	storeLocation() string
	// open returns a reader of the store and a function that releases it.
	open() (io.ReaderAt, func(), error)
	size() (int64, error)
}

// fileStore is a model file whose large raw_data fields were left in it
// at load.
type fileStore struct {
	path     string
	location string
}

func (f *fileStore) storeLocation() string { return f.location }

func (f *fileStore) open() (io.ReaderAt, func(), error) {
	r, err := os.Open(f.path)
	if err != nil {
		return nil, nil, err
	}
	return r, func() { r.Close() }, nil
}

func (f *fileStore) size() (int64, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// storeOf returns the store ref points into, or nil.
func (m *Model) storeOf(ref ExternalRef) store {
	for _, s := range m.stores {
		if s.storeLocation() == ref.Location {
			return s
		}
	}
	return nil
}

// InStore reports whether t's bytes wait in one of the model's stores
// (the model file itself, a scratch file) rather than in memory or in an
// external data file of its own.
func (m *Model) InStore(t *onnxpb.TensorProto) bool {
	if len(m.stores) == 0 || !IsExternal(t) {
		return false
	}
	ref, err := ExternalRefOf(t)
	return err == nil && m.storeOf(ref) != nil
}

// Derive wraps mp, a copy or an edit of m's proto, as a model that reads
// external data as m does (same directory, same stores), plus scratch
// when it is not nil.
func (m *Model) Derive(mp *onnxpb.ModelProto, scratch *Scratch) (*Model, error) {
	stores := append([]store(nil), m.stores...)
	if scratch != nil {
		stores = append(stores, scratch)
	}
	return fromProto(mp, m.Dir, stores)
}

// Marshal serializes mp (m's proto or an edited copy of it) with the
// tensors held in m's stores inlined, so that another reader of the bytes
// (ONNX Runtime) finds every tensor inline or in an external data file
// beside the model. mp is left as it was.
func (m *Model) Marshal(mp *onnxpb.ModelProto) ([]byte, error) {
	var saved []tensorState
	defer func() {
		for _, s := range saved {
			s.t.RawData, s.t.ExternalData, s.t.DataLocation = s.raw, s.external, s.location
		}
	}()
	var err error
	allTensors(mp, func(t *onnxpb.TensorProto) {
		if err != nil || !m.InStore(t) {
			return
		}
		var raw []byte
		if raw, err = m.ReadExternal(t); err != nil {
			return
		}
		saved = append(saved, tensorState{t: t, raw: t.RawData, external: t.ExternalData, location: t.DataLocation})
		t.RawData, t.ExternalData, t.DataLocation = raw, nil, nil
	})
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(mp)
	if err != nil {
		return nil, fmt.Errorf("serialize model: %w", err)
	}
	return b, nil
}

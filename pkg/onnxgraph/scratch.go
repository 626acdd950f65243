package onnxgraph

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// Scratch is a temporary file holding the bytes of tensors made while a
// model is built (the quantized weights of a writer), so that a model
// larger than memory can be assembled and saved: a tensor moved here
// keeps only an external reference, which the model it is attached to
// (FromProtoScratch) reads back one tensor at a time, as it reads a source
// model's external data. Save copies such tensors into the output as if
// they were held in memory: the bytes written are the same.
type Scratch struct {
	mu   sync.Mutex
	f    *os.File
	path string // "" once the file is unlinked
	// location is what moved tensors name as their external data location.
	// It starts with NUL, so it is never a file's name.
	location string
	off      int64
}

// scratchMinBytes is the smallest tensor Move takes out of memory: below
// it the bookkeeping costs more than the bytes.
const scratchMinBytes = 64 << 10

// NewScratch creates a scratch file in dir (the output's directory, so
// that it lives on the disk the output goes to). On Unix the file is
// unlinked at once and disappears with the process whatever happens;
// elsewhere Close removes it.
func NewScratch(dir string) (*Scratch, error) {
	f, err := os.CreateTemp(dir, ".coreaiq-scratch-*")
	if err != nil {
		return nil, err
	}
	s := &Scratch{f: f, path: f.Name(), location: "\x00scratch:" + f.Name()}
	if os.Remove(f.Name()) == nil {
		s.path = ""
	}
	return s, nil
}

// Close releases the file. Tensors moved into it can no longer be read.
func (s *Scratch) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.f.Close()
	if s.path != "" {
		if rerr := os.Remove(s.path); err == nil {
			err = rerr
		}
		s.path = ""
	}
	return err
}

// Move writes t's raw data to the scratch file and turns t into an
// external tensor referring to it. Tensors without raw data, or smaller
// than 64 KiB, stay as they are.
func (s *Scratch) Move(t *onnxpb.TensorProto) error {
	if s == nil || len(t.RawData) < scratchMinBytes {
		return nil
	}
	s.mu.Lock()
	off := s.off
	s.off += int64(len(t.RawData))
	s.mu.Unlock()
	if _, err := s.f.WriteAt(t.RawData, off); err != nil {
		return fmt.Errorf("tensor %q: writing to the scratch file: %w", t.GetName(), err)
	}
	loc := onnxpb.TensorProto_EXTERNAL
	t.ExternalData = []*onnxpb.StringStringEntryProto{
		{Key: proto.String("location"), Value: proto.String(s.location)},
		{Key: proto.String("offset"), Value: proto.String(strconv.FormatInt(off, 10))},
		{Key: proto.String("length"), Value: proto.String(strconv.Itoa(len(t.RawData)))},
	}
	t.RawData, t.DataLocation = nil, &loc
	return nil
}

// storeLocation, open and size make a Scratch a store.
func (s *Scratch) storeLocation() string { return s.location }

func (s *Scratch) open() (io.ReaderAt, func(), error) {
	return s.f, func() {}, nil
}

func (s *Scratch) size() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.off, nil
}

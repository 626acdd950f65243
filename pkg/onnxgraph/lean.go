package onnxgraph

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// Field numbers of onnx.proto that the lean loader edits.
const (
	fieldModelGraph         = 7
	fieldGraphInitializer   = 5
	fieldTensorRawData      = 9
	fieldTensorExternalData = 13
	fieldTensorDataLocation = 14
	fieldEntryKey           = 1
	fieldEntryValue         = 2
)

// Lean loading applies to model files of at least leanFileBytes, and
// leaves in the file the raw_data of main-graph initializers of at least
// leanTensorBytes: a model of a few hundred megabytes in one file then
// costs the memory of its graph, not of its weights (decoding a protobuf
// copies every byte of it, so a plain load holds the file twice at once).
const (
	leanFileBytes   = 16 << 20
	leanTensorBytes = 64 << 10
)

// loadLean reads the model file at path field by field. Every field is
// decoded as usual except the raw_data of main-graph initializers of at
// least minRaw bytes, which is skipped over and replaced by an external
// reference to its offset in the file itself (a fileStore): the tensor is
// read from the file when it is decoded, as external data is.
func loadLean(path string, minRaw int64) (*Model, error) {
	f, fi, err := openRegularFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st := &fileStore{path: path, location: "\x00model:" + path}
	l := &leanReader{r: bufio.NewReaderSize(f, 1<<20), minRaw: minRaw, location: st.location}
	b, err := l.message(fi.Size(), func(num protowire.Number, n int64, out []byte) ([]byte, bool, error) {
		if num != fieldModelGraph {
			return out, false, nil
		}
		g, err := l.message(l.off+n, func(num protowire.Number, n int64, out []byte) ([]byte, bool, error) {
			if num != fieldGraphInitializer {
				return out, false, nil
			}
			t, err := l.tensor(l.off + n)
			if err != nil {
				return nil, false, err
			}
			return protowire.AppendBytes(protowire.AppendTag(out, num, protowire.BytesType), t), true, nil
		})
		if err != nil {
			return nil, false, err
		}
		return protowire.AppendBytes(protowire.AppendTag(out, num, protowire.BytesType), g), true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("not a valid ONNX protobuf (truncated or corrupt?): %w", err)
	}
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, mp); err != nil {
		return nil, fmt.Errorf("not a valid ONNX protobuf (truncated or corrupt?): %w", err)
	}
	if mp.Graph == nil {
		return nil, errors.New("not an ONNX model: no graph")
	}
	var stores []store
	if l.moved > 0 {
		stores = []store{st}
	}
	return fromProto(mp, filepath.Dir(path), stores)
}

// leanReader reads protobuf fields from a stream, counting its offset.
type leanReader struct {
	r        *bufio.Reader
	off      int64
	minRaw   int64
	location string
	moved    int
}

// message copies the fields of the message that ends at offset end,
// passing each length-delimited one to edit first: edit returns the
// output with its own encoding of the field appended and true when it
// consumed the field's n bytes, or false to have it copied.
func (l *leanReader) message(end int64, edit func(num protowire.Number, n int64, out []byte) ([]byte, bool, error)) ([]byte, error) {
	var out []byte
	for l.off < end {
		tag, err := l.varint()
		if err != nil {
			return nil, err
		}
		num, typ := protowire.DecodeTag(tag)
		if num <= 0 {
			return nil, fmt.Errorf("bad field number at offset %d", l.off)
		}
		switch typ {
		case protowire.VarintType:
			v, err := l.varint()
			if err != nil {
				return nil, err
			}
			out = protowire.AppendVarint(protowire.AppendTag(out, num, typ), v)
		case protowire.Fixed32Type, protowire.Fixed64Type:
			size := 4
			if typ == protowire.Fixed64Type {
				size = 8
			}
			b, err := l.bytes(int64(size))
			if err != nil {
				return nil, err
			}
			out = append(protowire.AppendTag(out, num, typ), b...)
		case protowire.BytesType:
			n, err := l.varint()
			if err != nil {
				return nil, err
			}
			if n > uint64(end-l.off) {
				return nil, fmt.Errorf("field %d at offset %d runs past the end of its message", num, l.off)
			}
			edited, done, err := edit(num, int64(n), out)
			if err != nil {
				return nil, err
			}
			if done {
				out = edited
				continue
			}
			b, err := l.bytes(int64(n))
			if err != nil {
				return nil, err
			}
			out = protowire.AppendBytes(protowire.AppendTag(out, num, typ), b)
		default:
			return nil, fmt.Errorf("unsupported wire type %d at offset %d", typ, l.off)
		}
	}
	if l.off != end {
		return nil, fmt.Errorf("a message overruns its length at offset %d", l.off)
	}
	return out, nil
}

// tensor copies a TensorProto, leaving a large raw_data in the file.
func (l *leanReader) tensor(end int64) ([]byte, error) {
	var rawOff, rawLen int64 = -1, 0
	out, err := l.message(end, func(num protowire.Number, n int64, out []byte) ([]byte, bool, error) {
		if num != fieldTensorRawData || n < l.minRaw {
			return out, false, nil
		}
		rawOff, rawLen = l.off, n
		if _, err := l.r.Discard(int(n)); err != nil {
			return nil, false, err
		}
		l.off += n
		return out, true, nil
	})
	if err != nil || rawOff < 0 {
		return out, err
	}
	l.moved++
	for _, kv := range [][2]string{{"location", l.location}, {"offset", strconv.FormatInt(rawOff, 10)}, {"length", strconv.FormatInt(rawLen, 10)}} {
		var e []byte
		e = protowire.AppendString(protowire.AppendTag(e, fieldEntryKey, protowire.BytesType), kv[0])
		e = protowire.AppendString(protowire.AppendTag(e, fieldEntryValue, protowire.BytesType), kv[1])
		out = protowire.AppendBytes(protowire.AppendTag(out, fieldTensorExternalData, protowire.BytesType), e)
	}
	out = protowire.AppendTag(out, fieldTensorDataLocation, protowire.VarintType)
	return protowire.AppendVarint(out, uint64(onnxpb.TensorProto_EXTERNAL)), nil
}

func (l *leanReader) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c, err := l.r.ReadByte()
		if err != nil {
			return 0, unexpectedEOF(err)
		}
		l.off++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("varint overflows at offset %d", l.off)
}

func (l *leanReader) bytes(n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(l.r, b); err != nil {
		return nil, unexpectedEOF(err)
	}
	l.off += n
	return b, nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

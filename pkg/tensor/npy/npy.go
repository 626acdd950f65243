// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0
// and 3.0) as tensor.Tensor values.
//
// The reader maps the payload onto the tensor's slice with one bulk read
// (no per-element decoding), swaps bytes for big-endian files, and checks
// the declared size against the bytes actually available before it
// allocates, so a malformed header cannot make it allocate unbounded memory.
// float16 ('<f2') arrays become Float16 tensors holding the bit patterns.
package npy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// magic starts every .npy file.
const magic = "\x93NUMPY"

// maxHeaderLen bounds the header dictionary. numpy itself refuses headers
// over 10000 bytes by default; 1 MiB leaves room for any real shape.
const maxHeaderLen = 1 << 20

// Header is the parsed header of a .npy file.
type Header struct {
	// Major and Minor are the format version (1.0, 2.0 or 3.0).
	Major, Minor int
	// DType is the element type; Descr is numpy's type string ('<f4').
	DType tensor.DType
	Descr string
	// BigEndian is true for '>' type strings.
	BigEndian bool
	// FortranOrder is the header's fortran_order flag.
	FortranOrder bool
	Shape        []int
	// DataOffset is the byte offset of the array data in the file.
	DataOffset int64
}

// itemSize is the size in bytes of one element in the file.
func (h *Header) itemSize() int { return h.DType.ElemSize() }

// descrTypes maps numpy's kind and size (without byte order) to a DType.
var descrTypes = map[string]tensor.DType{
	"f2": tensor.Float16, "f4": tensor.Float, "f8": tensor.Double,
	"i1": tensor.Int8, "i2": tensor.Int16, "i4": tensor.Int32, "i8": tensor.Int64,
	"u1": tensor.Uint8, "u2": tensor.Uint16, "u4": tensor.Uint32, "u8": tensor.Uint64,
	"b1": tensor.Bool, "?": tensor.Bool, "c8": tensor.Complex64, "c16": tensor.Complex128,
}

// ReadHeader reads the magic string, version and header dictionary of a
// .npy stream, leaving r at the start of the array data.
func ReadHeader(r io.Reader) (*Header, error) {
	var pre [10]byte
	if _, err := io.ReadFull(r, pre[:8]); err != nil {
		return nil, fmt.Errorf("not a .npy file: %w", eofAsUnexpected(err))
	}
	if string(pre[:6]) != magic {
		return nil, errors.New("not a .npy file (bad magic string)")
	}
	h := &Header{Major: int(pre[6]), Minor: int(pre[7])}
	var hlen int
	switch h.Major {
	case 1:
		if _, err := io.ReadFull(r, pre[8:10]); err != nil {
			return nil, fmt.Errorf("reading header length: %w", eofAsUnexpected(err))
		}
		hlen = int(pre[8]) | int(pre[9])<<8
		h.DataOffset = 10
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return nil, fmt.Errorf("reading header length: %w", eofAsUnexpected(err))
		}
		hlen = int(uint32(l[0]) | uint32(l[1])<<8 | uint32(l[2])<<16 | uint32(l[3])<<24)
		h.DataOffset = 12
	default:
		return nil, fmt.Errorf("unsupported .npy format version %d.%d", h.Major, h.Minor)
	}
	if hlen > maxHeaderLen {
		return nil, fmt.Errorf("header of %d bytes exceeds the %d byte limit", hlen, maxHeaderLen)
	}
	buf := make([]byte, hlen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("reading %d byte header: %w", hlen, eofAsUnexpected(err))
	}
	h.DataOffset += int64(hlen)
	if err := h.parseDict(string(buf)); err != nil {
		return nil, fmt.Errorf("header %q: %w", strings.TrimSpace(string(buf)), err)
	}
	return h, nil
}

func eofAsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseDict parses the Python dict literal of the header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
func (h *Header) parseDict(s string) error {
	p := &lit{s: s}
	if !p.eat('{') {
		return errors.New("header is not a dictionary")
	}
	seen := map[string]bool{}
	for {
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		if seen[key] {
			return fmt.Errorf("key %q repeated", key)
		}
		seen[key] = true
		if !p.eat(':') {
			return fmt.Errorf("missing ':' after key %q", key)
		}
		switch key {
		case "descr":
			if p.peek() == '[' {
				return errors.New("structured dtypes (record arrays) are not supported")
			}
			d, err := p.str()
			if err != nil {
				return fmt.Errorf("descr: %w", err)
			}
			if err := h.setDescr(d); err != nil {
				return err
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.FortranOrder = true
			case p.word("False"):
			default:
				return errors.New("fortran_order is not True or False")
			}
		case "shape":
			shape, err := p.tuple()
			if err != nil {
				return fmt.Errorf("shape: %w", err)
			}
			h.Shape = shape
		default:
			return fmt.Errorf("unknown key %q", key)
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return errors.New("expected ',' or '}'")
			}
			break
		}
	}
	if p.skip(); p.i != len(p.s) {
		return errors.New("trailing characters after the dictionary")
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return fmt.Errorf("missing key %q", k)
		}
	}
	return nil
}

func (h *Header) setDescr(d string) error {
	h.Descr = d
	code := d
	if code != "" && strings.ContainsRune("<>|=", rune(code[0])) {
		h.BigEndian = code[0] == '>' || code[0] == '=' && !tensor.NativeLittleEndian()
		code = code[1:]
	}
	dt, ok := descrTypes[code]
	if !ok {
		return fmt.Errorf("unsupported dtype %q (supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1 c8 c16)", d)
	}
	h.DType = dt
	return nil
}

// lit is a tiny scanner for the Python literals of a .npy header.
type lit struct {
	s string
	i int
}

func (p *lit) skip() {
	for p.i < len(p.s) && strings.ContainsRune(" \t\r\n", rune(p.s[p.i])) {
		p.i++
	}
}

func (p *lit) peek() byte {
	p.skip()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *lit) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *lit) word(w string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

// str reads a quoted string without escapes (numpy never writes any).
func (p *lit) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", errors.New("expected a quoted string")
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", errors.New("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, nil
}

// tuple reads a tuple of non-negative integers: (), (3,), (2, 3) and
// Python 2's 3L.
func (p *lit) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, errors.New("expected a tuple")
	}
	shape := []int{}
	for {
		if p.eat(')') {
			return shape, nil
		}
		p.skip()
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if start == p.i {
			return nil, errors.New("expected a non-negative integer")
		}
		d, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		if err != nil || d > 1<<48 {
			return nil, fmt.Errorf("dimension %s out of range", p.s[start:p.i])
		}
		if p.i < len(p.s) && p.s[p.i] == 'L' {
			p.i++
		}
		shape = append(shape, int(d))
		if !p.eat(',') {
			if !p.eat(')') {
				return nil, errors.New("expected ',' or ')'")
			}
			return shape, nil
		}
	}
}

// sized is implemented by readers that know how many bytes remain
// (bytes.Reader, strings.Reader, bytes.Buffer).
type sized interface{ Len() int }

// remaining returns the bytes left in r, or -1 when r cannot tell.
func remaining(r io.Reader) int64 {
	switch v := r.(type) {
	case sized:
		return int64(v.Len())
	case *os.File:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		pos, err := v.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1
		}
		return fi.Size() - pos
	}
	return -1
}

// ReadNPY reads one array from a .npy stream. Fortran-order arrays are
// refused unless at most one dimension exceeds 1 (then both orders agree).
func ReadNPY(r io.Reader) (*tensor.Tensor, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	n, err := numElements(h.Shape)
	if err != nil {
		return nil, err
	}
	if h.FortranOrder {
		big := 0
		for _, d := range h.Shape {
			if d > 1 {
				big++
			}
		}
		if big > 1 {
			return nil, fmt.Errorf("array of shape %v is in Fortran (column-major) order, which is not supported; save it with np.ascontiguousarray", h.Shape)
		}
	}
	size := int64(n) * int64(h.itemSize())
	t := &tensor.Tensor{DType: h.DType, Shape: h.Shape}
	if left := remaining(r); left >= 0 {
		if left < size {
			return nil, fmt.Errorf("header declares %s%v (%d bytes of data) but only %d bytes follow", h.Descr, h.Shape, size, left)
		}
		t.Data = tensor.New(h.DType, n).Data
		if _, err := io.ReadFull(r, tensor.ByteView(t.Data)); err != nil {
			return nil, fmt.Errorf("reading %d bytes of data: %w", size, eofAsUnexpected(err))
		}
	} else {
		// Unknown length: let the buffer grow with the data that actually
		// arrives, then copy once into the tensor.
		var buf bytes.Buffer
		if got, err := io.CopyN(&buf, r, size); err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("header declares %s%v (%d bytes of data) but only %d bytes follow", h.Descr, h.Shape, size, got)
			}
			return nil, fmt.Errorf("reading data: %w", err)
		}
		t.Data = tensor.New(h.DType, n).Data
		copy(tensor.ByteView(t.Data), buf.Bytes())
	}
	b := tensor.ByteView(t.Data)
	if h.DType == tensor.Bool {
		// numpy writes 0 and 1; any other byte means true. Normalise before
		// Go reads the bytes as bool.
		for i, v := range b {
			if v > 1 {
				b[i] = 1
			}
		}
	}
	if h.BigEndian == tensor.NativeLittleEndian() {
		word := h.itemSize()
		if h.DType == tensor.Complex64 || h.DType == tensor.Complex128 {
			word /= 2
		}
		tensor.SwapBytes(b, word)
	}
	return t, nil
}

func numElements(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d == 0 {
			return 0, nil
		}
	}
	for _, d := range shape {
		if d > (1<<48)/n {
			return 0, fmt.Errorf("shape %v has more than 2^48 elements", shape)
		}
		n *= d
	}
	return n, nil
}

// ReadNPYFile reads the .npy file at path; errors name the file.
func ReadNPYFile(path string) (*tensor.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ReadNPY(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// descrOf is numpy's little-endian type string for dt.
func descrOf(dt tensor.DType) (string, error) {
	switch dt {
	case tensor.Float:
		return "<f4", nil
	case tensor.Double:
		return "<f8", nil
	case tensor.Float16:
		return "<f2", nil
	case tensor.Int8:
		return "|i1", nil
	case tensor.Uint8:
		return "|u1", nil
	case tensor.Int16:
		return "<i2", nil
	case tensor.Uint16:
		return "<u2", nil
	case tensor.Int32:
		return "<i4", nil
	case tensor.Uint32:
		return "<u4", nil
	case tensor.Int64:
		return "<i8", nil
	case tensor.Uint64:
		return "<u8", nil
	case tensor.Bool:
		return "|b1", nil
	case tensor.Complex64:
		return "<c8", nil
	case tensor.Complex128:
		return "<c16", nil
	}
	return "", fmt.Errorf(".npy has no %s type; cast the tensor to float32 or an integer type first", dt)
}

// header returns the complete .npy preamble for t as numpy writes it:
// version 1.0 (2.0 when the header needs more than 65535 bytes), the
// dictionary padded with spaces and a newline to a multiple of 64 bytes.
func header(t *tensor.Tensor) ([]byte, error) {
	descr, err := descrOf(t.DType)
	if err != nil {
		return nil, err
	}
	var shape strings.Builder
	shape.WriteByte('(')
	for i, d := range t.Shape {
		if i > 0 {
			shape.WriteString(", ")
		}
		shape.WriteString(strconv.Itoa(d))
	}
	if len(t.Shape) == 1 {
		shape.WriteByte(',')
	}
	shape.WriteByte(')')
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape.String())
	pre, major := 10, byte(1)
	if len(dict)+1+pre > 65535 {
		pre, major = 12, 2
	}
	total := (pre + len(dict) + 1 + 63) / 64 * 64
	out := make([]byte, 0, total)
	out = append(out, magic...)
	out = append(out, major, 0)
	hlen := total - pre
	if major == 1 {
		out = append(out, byte(hlen), byte(hlen>>8))
	} else {
		out = append(out, byte(hlen), byte(hlen>>8), byte(hlen>>16), byte(hlen>>24))
	}
	out = append(out, dict...)
	for len(out) < total-1 {
		out = append(out, ' ')
	}
	return append(out, '\n'), nil
}

// WriteNPY writes t as a little-endian, C-order .npy array.
func WriteNPY(w io.Writer, t *tensor.Tensor) error {
	if t == nil {
		return errors.New("nil tensor")
	}
	hdr, err := header(t)
	if err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	data := tensor.ByteView(t.Data)
	if !tensor.NativeLittleEndian() {
		data = bytes.Clone(data)
		word := t.DType.ElemSize()
		if t.DType == tensor.Complex64 || t.DType == tensor.Complex128 {
			word /= 2
		}
		tensor.SwapBytes(data, word)
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// WriteNPYFile writes t to path atomically: to a temporary file in the same
// directory, renamed over path only when complete.
func WriteNPYFile(path string, t *tensor.Tensor) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("%s: %w", path, err)
		}
	}()
	if err = WriteNPY(f, t); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

package tensor

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// nativeLittle reports whether the host stores numbers little-endian, in
// which case raw_data and .npy payloads map onto Go slices with one copy.
var nativeLittle = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// NativeLittleEndian reports whether the host is little-endian.
func NativeLittleEndian() bool { return nativeLittle }

// ByteView returns the memory of a numeric slice as bytes (native byte
// order), without copying. It returns nil for []string and unsupported
// types. bool is one byte per element, as in ONNX and numpy.
func ByteView(data any) []byte {
	switch d := data.(type) {
	case []float32:
		return sliceBytes(d)
	case []float64:
		return sliceBytes(d)
	case []int8:
		return sliceBytes(d)
	case []uint8:
		return d
	case []int16:
		return sliceBytes(d)
	case []uint16:
		return sliceBytes(d)
	case []int32:
		return sliceBytes(d)
	case []uint32:
		return sliceBytes(d)
	case []int64:
		return sliceBytes(d)
	case []uint64:
		return sliceBytes(d)
	case []bool:
		return sliceBytes(d)
	case []complex64:
		return sliceBytes(d)
	case []complex128:
		return sliceBytes(d)
	}
	return nil
}

func sliceBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// ElemSize is the in-memory size in bytes of one element of d's Data slice
// (1 for the sub-byte and 8-bit float types, which hold one code per byte;
// 0 for String).
func (d DType) ElemSize() int { return elemSize(d) }

func elemSize(dt DType) int {
	switch dt {
	case Float, Int32, Uint32:
		return 4
	case Double, Int64, Uint64, Complex64:
		return 8
	case Complex128:
		return 16
	case Int16, Uint16, Float16, BFloat16:
		return 2
	case String:
		return 0
	}
	return 1
}

// SwapBytes reverses the byte order of every size-byte word of b in place
// (size 1 is a no-op; complex types swap each component, so pass the
// component size).
func SwapBytes(b []byte, size int) {
	switch size {
	case 2:
		for i := 0; i+1 < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], binary.BigEndian.Uint16(b[i:]))
		}
	case 4:
		for i := 0; i+3 < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], binary.BigEndian.Uint32(b[i:]))
		}
	case 8:
		for i := 0; i+7 < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], binary.BigEndian.Uint64(b[i:]))
		}
	}
}

// wordSize is the byte-swapping unit of dt (the component size of complex types).
func wordSize(dt DType) int {
	switch dt {
	case Complex64:
		return 4
	case Complex128:
		return 8
	}
	return elemSize(dt)
}

// Validate reports whether t.Data has the Go type t.DType implies and as
// many elements as t.Shape.
func (t *Tensor) Validate() error { return t.checkData() }

// checkData verifies that t.Data has the Go type DType implies and as many
// elements as Shape; every codec calls it before touching the data.
func (t *Tensor) checkData() error {
	if !t.DType.Valid() {
		return fmt.Errorf("invalid dtype %s", t.DType)
	}
	n, err := numElementsChecked(t.Shape)
	if err != nil {
		return err
	}
	want := fmt.Sprintf("%T", makeSlice(t.DType, 0))
	if got := fmt.Sprintf("%T", t.Data); got != want {
		return fmt.Errorf("%s tensor holds %s, want %s", t.DType, got, want)
	}
	if l := dataLen(t.Data); l != n {
		return fmt.Errorf("%s tensor of shape %v holds %d elements, want %d", t.DType, t.Shape, l, n)
	}
	return nil
}

// numElementsChecked is NumElements that refuses negative dimensions and
// products beyond 2^48 (no real tensor has as many elements; it also keeps
// byte counts far from integer overflow).
func numElementsChecked[D int | int64](shape []D) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
		if d == 0 {
			n = 0
			continue
		}
		if n != 0 && int64(d) > (1<<48)/n {
			return 0, fmt.Errorf("shape %v has more than 2^48 elements", shape)
		}
		if n != 0 {
			n *= int64(d)
		}
	}
	return int(n), nil
}

func dataLen(data any) int {
	switch d := data.(type) {
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []int8:
		return len(d)
	case []uint8:
		return len(d)
	case []int16:
		return len(d)
	case []uint16:
		return len(d)
	case []int32:
		return len(d)
	case []uint32:
		return len(d)
	case []int64:
		return len(d)
	case []uint64:
		return len(d)
	case []bool:
		return len(d)
	case []string:
		return len(d)
	case []complex64:
		return len(d)
	case []complex128:
		return len(d)
	}
	return -1
}

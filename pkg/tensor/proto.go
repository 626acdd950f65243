package tensor

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"unsafe"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// ExternalReader returns the bytes of a tensor stored as external data
// (data_location EXTERNAL). onnxgraph.Model implements it.
type ExternalReader interface {
	ReadExternal(t *onnxpb.TensorProto) ([]byte, error)
}

// externalReaderTo is an ExternalReader that also reads into a buffer
// the caller allocated: fromProto then reads a tensor's bytes straight
// into its data, without a second copy of the tensor.
type externalReaderTo interface {
	ReadExternalTo(t *onnxpb.TensorProto, dst []byte) error
}

// protoField names the TensorProto fields that can hold elements.
type protoField int

const (
	fieldNone protoField = iota
	fieldRaw
	fieldFloat
	fieldInt32
	fieldString
	fieldInt64
	fieldDouble
	fieldUint64
)

var fieldNames = [...]string{"no data", "raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data"}

func (f protoField) String() string { return fieldNames[f] }

// typedField is the typed (non-raw) field ONNX stores dt in.
func typedField(dt DType) protoField {
	switch dt {
	case Float, Complex64:
		return fieldFloat
	case Int64:
		return fieldInt64
	case String:
		return fieldString
	case Double, Complex128:
		return fieldDouble
	case Uint32, Uint64:
		return fieldUint64
	}
	return fieldInt32
}

// FromProto decodes the elements of tp into a Tensor. It reads raw_data
// (little-endian, 4- and 2-bit types packed), each typed field as ONNX's
// storage rules define it, and external data through ext. Only the dtype,
// dims and values are kept: name, doc string and metadata are not. Every
// inconsistency between dims and data is an error naming the tensor.
func FromProto(tp *onnxpb.TensorProto, ext ExternalReader) (*Tensor, error) {
	if tp == nil {
		return nil, errors.New("nil tensor proto")
	}
	t, err := fromProto(tp, ext)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", tp.GetName(), err)
	}
	return t, nil
}

// layout is what a TensorProto declares about its elements, checked for
// consistency without decoding them.
type layout struct {
	dt       DType
	shape    []int
	n        int
	field    protoField
	external bool
}

// layoutOf checks tp's dtype, dims and data fields against each other: the
// field that holds the data is the one ONNX assigns to the dtype and its
// length matches the dims. External data is checked by its length only.
func layoutOf(tp *onnxpb.TensorProto) (layout, error) {
	dt := DType(tp.GetDataType())
	if !dt.Valid() {
		return layout{}, fmt.Errorf("unknown data_type %d", tp.GetDataType())
	}
	dims := tp.GetDims()
	n, err := numElementsChecked(dims)
	if err != nil {
		return layout{}, err
	}
	l := layout{dt: dt, shape: make([]int, len(dims)), n: n, field: fieldNone,
		external: tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL}
	for i, d := range dims {
		l.shape[i] = int(d)
	}
	if tp.Segment != nil {
		return l, errors.New("segmented tensors (TensorProto.segment) are not supported")
	}

	var present []protoField
	if tp.RawData != nil {
		present = append(present, fieldRaw)
	}
	for _, f := range []struct {
		field protoField
		n     int
	}{
		{fieldFloat, len(tp.FloatData)}, {fieldInt32, len(tp.Int32Data)}, {fieldString, len(tp.StringData)},
		{fieldInt64, len(tp.Int64Data)}, {fieldDouble, len(tp.DoubleData)}, {fieldUint64, len(tp.Uint64Data)},
	} {
		if f.n > 0 {
			present = append(present, f.field)
		}
	}
	if l.external {
		if len(present) > 0 {
			return l, fmt.Errorf("data_location is EXTERNAL but %s is also set", present[0])
		}
		if dt == String {
			return l, errors.New("string tensor in external data; ONNX stores strings in string_data")
		}
		return l, nil
	}
	if len(present) > 1 {
		return l, fmt.Errorf("both %s and %s hold data; ONNX allows one", present[0], present[1])
	}
	if len(present) == 1 {
		l.field = present[0]
	}
	switch {
	case l.field == fieldRaw:
		if dt == String {
			return l, errors.New("string tensor in raw_data; ONNX stores strings in string_data")
		}
		if want := dt.RawSize(n); len(tp.RawData) != want {
			return l, sizeError(dt, l.shape, "raw_data", len(tp.RawData), want, "bytes")
		}
	case l.field == fieldNone:
		if n != 0 {
			return l, fmt.Errorf("%s tensor of shape %v has no data", dt, l.shape)
		}
	case l.field != typedField(dt):
		return l, fmt.Errorf("%s tensor holds its data in %s; ONNX stores %s in %s", dt, l.field, dt, typedField(dt))
	default:
		if got, want := typedLen(tp, l.field), typedWant(dt, n); got != want {
			return l, sizeError(dt, l.shape, l.field.String(), got, want, "values")
		}
	}
	return l, nil
}

// CheckProto checks tp without decoding it: a known dtype, dimensions that
// are not negative and do not overflow, and data that matches them.
// externalLength is the number of bytes an external tensor's reference
// covers (ignored for tensors stored in the model).
func CheckProto(tp *onnxpb.TensorProto, externalLength int64) error {
	l, err := layoutOf(tp)
	if err == nil && l.external {
		if want := int64(l.dt.RawSize(l.n)); externalLength != want {
			err = sizeError(l.dt, l.shape, "its external data", int(externalLength), int(want), "bytes")
		}
	}
	if err != nil {
		return fmt.Errorf("tensor %q: %w", tp.GetName(), err)
	}
	return nil
}

// FromProtoReadOnly is FromProto for a caller that never writes the
// tensor's data (the engine's constants): raw_data of a fixed-width type
// on a little-endian host becomes the tensor's data without a copy, so a
// model held in memory is not held twice while a session runs it. The
// tensor then shares tp's raw_data: neither may be written in place
// (coreaiq replaces an initializer's raw_data, never writes into it).
func FromProtoReadOnly(tp *onnxpb.TensorProto, ext ExternalReader) (*Tensor, error) {
	if tp != nil && tp.RawData != nil {
		// Anything FromProto would refuse or copy differently (a bad
		// layout, external data, a size mismatch) is left to it.
		if l, err := layoutOf(tp); err == nil && !l.external && l.field == fieldRaw && len(tp.RawData) == l.dt.RawSize(l.n) {
			if d := viewRaw(l.dt, tp.RawData, l.n); d != nil {
				return &Tensor{DType: l.dt, Shape: l.shape, Data: d}, nil
			}
		}
	}
	return FromProto(tp, ext)
}

// viewRaw is raw as the Go slice of n elements that holds dt, sharing its
// memory; nil when dt's elements are not stored as they are in raw bytes
// (packed, bool, string, a big-endian host) or raw is not aligned for them.
func viewRaw(dt DType, raw []byte, n int) any {
	size := elemSize(dt)
	if !inPlace(dt) || size == 0 || n == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%uintptr(size) != 0 {
		return nil
	}
	// The slice type dt's elements are held in, over raw's memory.
	elem := reflect.TypeOf(makeSlice(dt, 0)).Elem()
	return reflect.SliceAt(elem, unsafe.Pointer(unsafe.SliceData(raw)), n).Interface()
}

func fromProto(tp *onnxpb.TensorProto, ext ExternalReader) (*Tensor, error) {
	l, err := layoutOf(tp)
	if err != nil {
		return nil, err
	}
	dt, shape, n := l.dt, l.shape, l.n
	switch {
	case l.external:
		if ext == nil {
			return nil, errors.New("data is external and no external data reader was given")
		}
		if to, ok := ext.(externalReaderTo); ok && inPlace(dt) {
			t := &Tensor{DType: dt, Shape: shape, Data: makeSlice(dt, n)}
			if err := to.ReadExternalTo(tp, ByteView(t.Data)); err != nil {
				return nil, err
			}
			return t, nil
		}
		raw, err := ext.ReadExternal(tp)
		if err != nil {
			return nil, err
		}
		return decodeRaw(dt, shape, n, raw, "its external data")
	case l.field == fieldRaw:
		return decodeRaw(dt, shape, n, tp.RawData, "raw_data")
	case l.field == fieldNone:
		return &Tensor{DType: dt, Shape: shape, Data: makeSlice(dt, 0)}, nil
	}
	return decodeTyped(tp, dt, shape, n, l.field)
}

// typedWant is the number of values of a typed field that n elements of dt
// occupy: two per complex element, 4- and 2-bit types packed per int32.
func typedWant(dt DType, n int) int {
	switch {
	case dt == Complex64 || dt == Complex128:
		return 2 * n
	case dt.Bits() == 4:
		return (n + 1) / 2
	case dt.Bits() == 2:
		return (n + 3) / 4
	}
	return n
}

// typedLen is the number of values in a typed field.
func typedLen(tp *onnxpb.TensorProto, field protoField) int {
	switch field {
	case fieldFloat:
		return len(tp.FloatData)
	case fieldInt32:
		return len(tp.Int32Data)
	case fieldString:
		return len(tp.StringData)
	case fieldInt64:
		return len(tp.Int64Data)
	case fieldDouble:
		return len(tp.DoubleData)
	case fieldUint64:
		return len(tp.Uint64Data)
	}
	return 0
}

// sizeError describes a data field whose length does not match the dims.
func sizeError(dt DType, shape []int, field string, got, want int, unit string) error {
	return fmt.Errorf("%s tensor of shape %v needs %d %s in %s, has %d", dt, shape, want, unit, field, got)
}

// decodeRaw decodes little-endian raw bytes (raw_data or external data).
func decodeRaw(dt DType, shape []int, n int, raw []byte, field string) (*Tensor, error) {
	if want := dt.RawSize(n); len(raw) != want {
		return nil, sizeError(dt, shape, field, len(raw), want, "bytes")
	}
	t := &Tensor{DType: dt, Shape: shape}
	switch dt {
	case Bool:
		d := make([]bool, n)
		for i, b := range raw {
			d[i] = b != 0
		}
		t.Data = d
	case Int4:
		t.Data = Unpack4Signed(raw, n)
	case Uint4, Float4E2M1:
		t.Data = Unpack4(raw, n)
	case Int2:
		t.Data = Unpack2Signed(raw, n)
	case Uint2:
		t.Data = Unpack2(raw, n)
	default:
		t.Data = makeSlice(dt, n)
		b := ByteView(t.Data)
		copy(b, raw)
		if !nativeLittle {
			SwapBytes(b, wordSize(dt))
		}
	}
	return t, nil
}

// inPlace reports whether dt's raw bytes are its data's memory as it is:
// a fixed-width type other than bool and the sub-byte ones, on a
// little-endian machine (decodeRaw's default case without the swap).
func inPlace(dt DType) bool {
	switch dt {
	case Bool, Int4, Uint4, Float4E2M1, Int2, Uint2, String:
		return false
	}
	return nativeLittle
}

// decodeTyped decodes the typed field that ONNX assigns to dt.
func decodeTyped(tp *onnxpb.TensorProto, dt DType, shape []int, n int, field protoField) (*Tensor, error) {
	t := &Tensor{DType: dt, Shape: shape}
	if got, want := typedLen(tp, field), typedWant(dt, n); got != want {
		return nil, sizeError(dt, shape, field.String(), got, want, "values")
	}
	switch dt {
	case Float:
		t.Data = slices.Clone(tp.FloatData)
	case Complex64:
		d := make([]complex64, n)
		for i := range d {
			d[i] = complex(tp.FloatData[2*i], tp.FloatData[2*i+1])
		}
		t.Data = d
	case Double:
		t.Data = slices.Clone(tp.DoubleData)
	case Complex128:
		d := make([]complex128, n)
		for i := range d {
			d[i] = complex(tp.DoubleData[2*i], tp.DoubleData[2*i+1])
		}
		t.Data = d
	case Int64:
		t.Data = slices.Clone(tp.Int64Data)
	case Uint64:
		t.Data = slices.Clone(tp.Uint64Data)
	case Uint32:
		t.Data = convertInts[uint32](tp.Uint64Data)
	case String:
		d := make([]string, n)
		for i, s := range tp.StringData {
			d[i] = string(s)
		}
		t.Data = d
	case Int32:
		t.Data = slices.Clone(tp.Int32Data)
	case Int16:
		t.Data = convertInts[int16](tp.Int32Data)
	case Int8:
		t.Data = convertInts[int8](tp.Int32Data)
	case Uint16, Float16, BFloat16:
		// Bit patterns, stored unsigned; the low 16 bits are the code.
		t.Data = convertInts[uint16](tp.Int32Data)
	case Uint8, Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0:
		t.Data = convertInts[uint8](tp.Int32Data)
	case Bool:
		d := make([]bool, n)
		for i, v := range tp.Int32Data {
			d[i] = v != 0
		}
		t.Data = d
	default: // 4- and 2-bit types: one packed byte per int32
		return decodeRaw(dt, shape, n, convertInts[uint8](tp.Int32Data), "int32_data")
	}
	return t, nil
}

// convertInts converts each element with Go's integer conversion (keeping
// the low bits, as numpy's astype does).
func convertInts[D, S int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64](src []S) []D {
	d := make([]D, len(src))
	for i, v := range src {
		d[i] = D(v)
	}
	return d
}

// ToProto encodes t as a TensorProto named name: raw_data little-endian
// (4- and 2-bit types packed two or four per byte) or string_data for
// strings. Sub-byte values outside their type's range are an error rather
// than silently losing bits.
func ToProto(t *Tensor, name string) (*onnxpb.TensorProto, error) {
	if t == nil {
		return nil, fmt.Errorf("tensor %q: nil tensor", name)
	}
	if err := t.checkData(); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	tp := &onnxpb.TensorProto{
		Name:     &name,
		DataType: new(int32(t.DType)),
		Dims:     make([]int64, len(t.Shape)),
	}
	for i, d := range t.Shape {
		tp.Dims[i] = int64(d)
	}
	raw, err := encodeRaw(t)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	if t.DType == String {
		ss := t.Data.([]string)
		tp.StringData = make([][]byte, len(ss))
		for i, s := range ss {
			tp.StringData[i] = []byte(s)
		}
		return tp, nil
	}
	tp.RawData = raw
	return tp, nil
}

// EncodeRaw returns the ONNX raw_data bytes of t (little-endian, sub-byte
// types packed). It is the encoding of external data as well.
func EncodeRaw(t *Tensor) ([]byte, error) {
	if err := t.checkData(); err != nil {
		return nil, err
	}
	if t.DType == String {
		return nil, errors.New("string tensors have no raw encoding")
	}
	return encodeRaw(t)
}

func encodeRaw(t *Tensor) ([]byte, error) {
	switch t.DType {
	case String:
		return nil, nil
	case Int4, Int2:
		d := t.Data.([]int8)
		lo, hi := int8(-8), int8(7)
		if t.DType == Int2 {
			lo, hi = -2, 1
		}
		for i, v := range d {
			if v < lo || v > hi {
				return nil, fmt.Errorf("%s element %d is %d, outside [%d, %d]", t.DType, i, v, lo, hi)
			}
		}
		if t.DType == Int4 {
			return Pack4(d), nil
		}
		return Pack2(d), nil
	case Uint4, Float4E2M1, Uint2:
		d := t.Data.([]uint8)
		hi := uint8(15)
		if t.DType == Uint2 {
			hi = 3
		}
		for i, v := range d {
			if v > hi {
				return nil, fmt.Errorf("%s element %d is %d, outside [0, %d]", t.DType, i, v, hi)
			}
		}
		if t.DType == Uint2 {
			return Pack2(d), nil
		}
		return Pack4(d), nil
	}
	raw := slices.Clone(ByteView(t.Data))
	if !nativeLittle {
		SwapBytes(raw, wordSize(t.DType))
	}
	return raw, nil
}

package tensor

import "fmt"

// DType is an element type. Its values are ONNX's TensorProto.DataType
// numbers, so a DType converts to and from the protobuf field directly.
type DType int32

// The ONNX element types, numbered as in TensorProto.DataType.
const (
	Undefined      DType = 0
	Float          DType = 1
	Uint8          DType = 2
	Int8           DType = 3
	Uint16         DType = 4
	Int16          DType = 5
	Int32          DType = 6
	Int64          DType = 7
	String         DType = 8
	Bool           DType = 9
	Float16        DType = 10
	Double         DType = 11
	Uint32         DType = 12
	Uint64         DType = 13
	Complex64      DType = 14
	Complex128     DType = 15
	BFloat16       DType = 16
	Float8E4M3FN   DType = 17
	Float8E4M3FNUZ DType = 18
	Float8E5M2     DType = 19
	Float8E5M2FNUZ DType = 20
	Uint4          DType = 21
	Int4           DType = 22
	Float4E2M1     DType = 23
	Float8E8M0     DType = 24
	Uint2          DType = 25
	Int2           DType = 26
)

type dtypeInfo struct {
	name string
	// bits is the storage width of one element in raw_data (4 and 2 for the
	// packed types, 0 for strings).
	bits int
}

var dtypeTable = [...]dtypeInfo{
	Undefined:      {"undefined", 0},
	Float:          {"float32", 32},
	Uint8:          {"uint8", 8},
	Int8:           {"int8", 8},
	Uint16:         {"uint16", 16},
	Int16:          {"int16", 16},
	Int32:          {"int32", 32},
	Int64:          {"int64", 64},
	String:         {"string", 0},
	Bool:           {"bool", 8},
	Float16:        {"float16", 16},
	Double:         {"float64", 64},
	Uint32:         {"uint32", 32},
	Uint64:         {"uint64", 64},
	Complex64:      {"complex64", 64},
	Complex128:     {"complex128", 128},
	BFloat16:       {"bfloat16", 16},
	Float8E4M3FN:   {"float8_e4m3fn", 8},
	Float8E4M3FNUZ: {"float8_e4m3fnuz", 8},
	Float8E5M2:     {"float8_e5m2", 8},
	Float8E5M2FNUZ: {"float8_e5m2fnuz", 8},
	Uint4:          {"uint4", 4},
	Int4:           {"int4", 4},
	Float4E2M1:     {"float4_e2m1", 4},
	Float8E8M0:     {"float8_e8m0fnu", 8},
	Uint2:          {"uint2", 2},
	Int2:           {"int2", 2},
}

// Valid reports whether d is one of the ONNX element types (Undefined is not).
func (d DType) Valid() bool { return d > Undefined && int(d) < len(dtypeTable) }

// String returns the lower-case name used in reports: float32, int4, float8_e4m3fn.
func (d DType) String() string {
	if d == Undefined || d.Valid() {
		return dtypeTable[d].name
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Bits is the width of one element in ONNX raw_data: 4 and 2 for the packed
// types, 0 for String and Undefined.
func (d DType) Bits() int {
	if !d.Valid() {
		return 0
	}
	return dtypeTable[d].bits
}

// RawSize is the number of raw_data bytes that n elements of d occupy,
// packing 4-bit and 2-bit types contiguously over the tensor.
func (d DType) RawSize(n int) int {
	b := d.Bits()
	return (n*b + 7) / 8
}

// IsFloat reports whether d is a floating-point type of any width.
func (d DType) IsFloat() bool {
	switch d {
	case Float, Double, Float16, BFloat16, Float8E4M3FN, Float8E4M3FNUZ,
		Float8E5M2, Float8E5M2FNUZ, Float4E2M1, Float8E8M0:
		return true
	}
	return false
}

// IsInteger reports whether d is a signed or unsigned integer type.
func (d DType) IsInteger() bool {
	switch d {
	case Uint8, Int8, Uint16, Int16, Int32, Int64, Uint32, Uint64, Uint4, Int4, Uint2, Int2:
		return true
	}
	return false
}

// ParseDType returns the DType named s, accepting the names String returns.
func ParseDType(s string) (DType, bool) {
	for i, info := range dtypeTable {
		if i != 0 && info.name == s {
			return DType(i), true
		}
	}
	return Undefined, false
}

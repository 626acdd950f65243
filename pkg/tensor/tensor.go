// Package tensor holds coreaiq's tensor type and its conversions: between
// ONNX TensorProto and Go, between the narrow float formats (float16,
// bfloat16, float8, float4) and float32, and the packing of 4- and 2-bit
// integers.
package tensor

import (
	"fmt"
	"slices"
)

// Tensor is a dense, row-major array of one element type.
//
// Data holds the elements unpacked, one Go value per element, in the slice
// type that DType.GoType names: []float32 for Float, []uint16 bit patterns
// for Float16 and BFloat16, []uint8 bit patterns for the float8 types,
// Float8E8M0 and Float4E2M1 (one code per byte), []int8 for Int8, Int4 and
// Int2, []uint8 for Uint8, Uint4 and Uint2, []bool for Bool, []string for
// String. Packing happens only at the protobuf boundary.
type Tensor struct {
	DType DType
	// Shape is the list of dimensions; empty for a scalar.
	Shape []int
	Data  any
}

// New returns a zero-filled tensor of the given type and shape.
func New(dt DType, shape ...int) *Tensor {
	n := NumElements(shape)
	return &Tensor{DType: dt, Shape: slices.Clone(shape), Data: makeSlice(dt, n)}
}

// FromFloat32 wraps data (not copied) as a Float tensor of the given shape.
func FromFloat32(data []float32, shape ...int) *Tensor {
	return &Tensor{DType: Float, Shape: slices.Clone(shape), Data: data}
}

// FromInt64 wraps data (not copied) as an Int64 tensor of the given shape.
func FromInt64(data []int64, shape ...int) *Tensor {
	return &Tensor{DType: Int64, Shape: slices.Clone(shape), Data: data}
}

// NumElements is the product of the dimensions; 1 for a scalar.
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Len is the number of elements.
func (t *Tensor) Len() int { return NumElements(t.Shape) }

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.Shape) }

// Float32s returns the elements of a Float tensor. It panics for other types.
func (t *Tensor) Float32s() []float32 { return t.Data.([]float32) }

// Int64s returns the elements of an Int64 tensor. It panics for other types.
func (t *Tensor) Int64s() []int64 { return t.Data.([]int64) }

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	c := &Tensor{DType: t.DType, Shape: slices.Clone(t.Shape)}
	switch d := t.Data.(type) {
	case []float32:
		c.Data = slices.Clone(d)
	case []float64:
		c.Data = slices.Clone(d)
	case []int8:
		c.Data = slices.Clone(d)
	case []uint8:
		c.Data = slices.Clone(d)
	case []int16:
		c.Data = slices.Clone(d)
	case []uint16:
		c.Data = slices.Clone(d)
	case []int32:
		c.Data = slices.Clone(d)
	case []uint32:
		c.Data = slices.Clone(d)
	case []int64:
		c.Data = slices.Clone(d)
	case []uint64:
		c.Data = slices.Clone(d)
	case []bool:
		c.Data = slices.Clone(d)
	case []string:
		c.Data = slices.Clone(d)
	case []complex64:
		c.Data = slices.Clone(d)
	case []complex128:
		c.Data = slices.Clone(d)
	case nil:
	default:
		panic(fmt.Sprintf("tensor: Clone of unsupported data %T", t.Data))
	}
	return c
}

// String describes the tensor's type and shape, e.g. "float32[1 3 224 224]".
func (t *Tensor) String() string { return fmt.Sprintf("%s%v", t.DType, t.Shape) }

// makeSlice allocates the Data slice for n elements of dt.
func makeSlice(dt DType, n int) any {
	switch dt {
	case Float:
		return make([]float32, n)
	case Double:
		return make([]float64, n)
	case Int8, Int4, Int2:
		return make([]int8, n)
	case Uint8, Uint4, Uint2, Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0, Float4E2M1:
		return make([]uint8, n)
	case Int16:
		return make([]int16, n)
	case Uint16, Float16, BFloat16:
		return make([]uint16, n)
	case Int32:
		return make([]int32, n)
	case Uint32:
		return make([]uint32, n)
	case Int64:
		return make([]int64, n)
	case Uint64:
		return make([]uint64, n)
	case Bool:
		return make([]bool, n)
	case String:
		return make([]string, n)
	case Complex64:
		return make([]complex64, n)
	case Complex128:
		return make([]complex128, n)
	}
	panic(fmt.Sprintf("tensor: no element storage for %s", dt))
}

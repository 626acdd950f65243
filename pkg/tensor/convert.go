package tensor

import (
	"fmt"
	"math"
	"slices"
)

// AsFloat32 returns the elements of a numeric tensor as float32. For a
// Float tensor it returns Data itself (not a copy); every other type is
// converted into a new slice: narrow floats are decoded exactly, integers
// and float64 round to nearest, bool is 0 or 1. String and complex tensors
// are an error.
func (t *Tensor) AsFloat32() ([]float32, error) {
	if err := t.checkData(); err != nil {
		return nil, err
	}
	switch d := t.Data.(type) {
	case []float32:
		return d, nil
	case []float64:
		return convertToF32(d), nil
	case []int8:
		return convertToF32(d), nil
	case []int16:
		return convertToF32(d), nil
	case []int32:
		return convertToF32(d), nil
	case []int64:
		return convertToF32(d), nil
	case []uint32:
		return convertToF32(d), nil
	case []uint64:
		return convertToF32(d), nil
	case []uint16:
		out := make([]float32, len(d))
		switch t.DType {
		case Float16:
			Float16sToFloat32(out, d)
		case BFloat16:
			BFloat16sToFloat32(out, d)
		default:
			for i, v := range d {
				out[i] = float32(v)
			}
		}
		return out, nil
	case []uint8:
		out := make([]float32, len(d))
		if tab := decodeTable8(t.DType); tab != nil {
			for i, v := range d {
				out[i] = tab[v]
			}
		} else {
			for i, v := range d {
				out[i] = float32(v)
			}
		}
		return out, nil
	case []bool:
		out := make([]float32, len(d))
		for i, v := range d {
			if v {
				out[i] = 1
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot convert a %s tensor to float32", t.DType)
}

func convertToF32[S float64 | int8 | int16 | int32 | int64 | uint32 | uint64](src []S) []float32 {
	out := make([]float32, len(src))
	for i, v := range src {
		out[i] = float32(v)
	}
	return out
}

// CastOptions are ONNX Cast's attributes.
type CastOptions struct {
	// NoSaturate is the inverse of Cast's saturate attribute (default 1):
	// float8 overflow becomes NaN or Inf instead of ±max.
	NoSaturate bool
	// E8M0Rounding is Cast's round_mode for Float8E8M0 (default up).
	E8M0Rounding E8M0Rounding
}

// Cast converts t to dtype to with ONNX Cast semantics and default
// attributes (saturate=1, round_mode=up). See CastWith.
func Cast(t *Tensor, to DType) (*Tensor, error) { return CastWith(t, to, CastOptions{}) }

// CastWith converts t to dtype to:
//   - float to float rounds to nearest even (float8 and float4 saturate per
//     opts, see Float32ToFloat8E4M3FN and friends);
//   - float to 8/16/32/64-bit integer truncates toward zero (numpy's
//     astype), NaN becomes 0 and out-of-range values saturate to the type's
//     range (C leaves them undefined; saturating is deterministic);
//   - anything to int4/uint4/int2/uint2 rounds half to even and clamps, as
//     ONNX's reference does;
//   - integer to integer keeps the low bits (two's complement wrap-around);
//   - to bool is x != 0 (NaN is true); bool is 0 or 1;
//   - complex only to complex; strings are not supported.
//
// A cast to the same type returns a copy.
func CastWith(t *Tensor, to DType, opts CastOptions) (*Tensor, error) {
	if err := t.checkData(); err != nil {
		return nil, err
	}
	if !to.Valid() {
		return nil, fmt.Errorf("cast to invalid dtype %s", to)
	}
	if t.DType == to {
		return t.Clone(), nil
	}
	if t.DType == String || to == String {
		return nil, fmt.Errorf("cast from %s to %s is not supported", t.DType, to)
	}
	out := &Tensor{DType: to, Shape: slices.Clone(t.Shape)}
	n := t.Len()
	saturate := !opts.NoSaturate
	fromComplex := t.DType == Complex64 || t.DType == Complex128
	toComplex := to == Complex64 || to == Complex128
	switch {
	case fromComplex && toComplex:
		switch d := t.Data.(type) {
		case []complex64:
			c := make([]complex128, n)
			for i, v := range d {
				c[i] = complex128(v)
			}
			out.Data = c
		case []complex128:
			c := make([]complex64, n)
			for i, v := range d {
				c[i] = complex64(v)
			}
			out.Data = c
		}
		return out, nil
	case toComplex:
		f, err := castToFloat64(t)
		if err != nil {
			return nil, err
		}
		out.Data = floatsToComplex(f, to)
		return out, nil
	case fromComplex:
		return nil, fmt.Errorf("cast from %s to %s is not supported", t.DType, to)
	}

	// Fast paths for the casts quantization uses on large tensors.
	if src, ok := t.Data.([]float32); ok && to.IsFloat() {
		out.Data = floatsFromF32(src, to, saturate, opts.E8M0Rounding)
		return out, nil
	}
	if t.DType.IsFloat() {
		f, err := castToFloat64(t)
		if err != nil {
			return nil, err
		}
		out.Data = floatsTo(f, to, saturate, opts.E8M0Rounding)
		return out, nil
	}
	ints, unsigned := castToInt64(t)
	out.Data = intsTo(ints, unsigned, to, saturate, opts.E8M0Rounding)
	return out, nil
}

// castToFloat64 widens a float or bool tensor to float64 (exact).
func castToFloat64(t *Tensor) ([]float64, error) {
	if d, ok := t.Data.([]float64); ok {
		return d, nil
	}
	if !t.DType.IsFloat() {
		ints, unsigned := castToInt64(t)
		f := make([]float64, len(ints))
		for i, v := range ints {
			if unsigned {
				f[i] = float64(uint64(v))
			} else {
				f[i] = float64(v)
			}
		}
		return f, nil
	}
	f32, err := t.AsFloat32()
	if err != nil {
		return nil, err
	}
	f := make([]float64, len(f32))
	for i, v := range f32 {
		f[i] = float64(v)
	}
	return f, nil
}

// castToInt64 widens an integer or bool tensor to int64; unsigned reports
// that the values are uint64 bit patterns.
func castToInt64(t *Tensor) (v []int64, unsigned bool) {
	switch d := t.Data.(type) {
	case []int64:
		return d, false
	case []uint64:
		return convertInts[int64](d), true
	case []int8:
		return convertInts[int64](d), false
	case []uint8:
		return convertInts[int64](d), false
	case []int16:
		return convertInts[int64](d), false
	case []uint16:
		return convertInts[int64](d), false
	case []int32:
		return convertInts[int64](d), false
	case []uint32:
		return convertInts[int64](d), false
	case []bool:
		v = make([]int64, len(d))
		for i, b := range d {
			if b {
				v[i] = 1
			}
		}
	}
	return v, false
}

func floatsToComplex(f []float64, to DType) any {
	if to == Complex64 {
		c := make([]complex64, len(f))
		for i, v := range f {
			c[i] = complex(float32(v), 0)
		}
		return c
	}
	c := make([]complex128, len(f))
	for i, v := range f {
		c[i] = complex(v, 0)
	}
	return c
}

// floatsFromF32 converts float32 values to another float type.
func floatsFromF32(src []float32, to DType, saturate bool, mode E8M0Rounding) any {
	switch to {
	case Float:
		return slices.Clone(src)
	case Double:
		d := make([]float64, len(src))
		for i, v := range src {
			d[i] = float64(v)
		}
		return d
	case Float16:
		d := make([]uint16, len(src))
		Float32sToFloat16(d, src)
		return d
	case BFloat16:
		d := make([]uint16, len(src))
		Float32sToBFloat16(d, src)
		return d
	case Float8E8M0:
		d := make([]uint8, len(src))
		for i, v := range src {
			d[i] = Float32ToFloat8E8M0(v, saturate, mode)
		}
		return d
	}
	f := narrowFormat(to)
	d := make([]uint8, len(src))
	for i, v := range src {
		d[i] = uint8(f.encode32(v, saturate))
	}
	return d
}

// floatsTo converts float64 values to any non-string, non-complex type.
func floatsTo(src []float64, to DType, saturate bool, mode E8M0Rounding) any {
	switch to {
	case Float:
		d := make([]float32, len(src))
		for i, v := range src {
			d[i] = float32(v)
		}
		return d
	case Double:
		return slices.Clone(src)
	case Float16, BFloat16:
		f := narrowFormat(to)
		d := make([]uint16, len(src))
		for i, v := range src {
			d[i] = uint16(f.encode(v, false))
		}
		return d
	case Float8E8M0:
		d := make([]uint8, len(src))
		for i, v := range src {
			d[i] = Float32ToFloat8E8M0(float32(v), saturate, mode)
		}
		return d
	case Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float4E2M1:
		f := narrowFormat(to)
		d := make([]uint8, len(src))
		for i, v := range src {
			d[i] = uint8(f.encode(v, saturate))
		}
		return d
	case Bool:
		d := make([]bool, len(src))
		for i, v := range src {
			d[i] = v != 0
		}
		return d
	case Int4, Int2, Uint4, Uint2:
		lo, hi := intRange(to)
		return fillInts(to, len(src), func(i int) int64 {
			v := src[i]
			if math.IsNaN(v) {
				return 0
			}
			return int64(math.Max(float64(lo), math.Min(float64(hi), math.RoundToEven(v))))
		})
	}
	lo, hi := intRange(to)
	if to == Uint64 {
		d := make([]uint64, len(src))
		for i, v := range src {
			v = math.Trunc(v)
			switch {
			case v != v || v <= 0:
				d[i] = 0
			case v >= 1<<64:
				d[i] = math.MaxUint64
			default:
				d[i] = uint64(v)
			}
		}
		return d
	}
	return fillInts(to, len(src), func(i int) int64 {
		v := math.Trunc(src[i])
		switch {
		case v != v:
			return 0
		case v <= float64(lo):
			return lo
		case v >= float64(hi):
			return hi
		}
		return int64(v)
	})
}

// intsTo converts integers (uint64 bit patterns when unsigned) to any
// non-string, non-complex type.
func intsTo(src []int64, unsigned bool, to DType, saturate bool, mode E8M0Rounding) any {
	if to.IsFloat() {
		f := make([]float64, len(src))
		for i, v := range src {
			if unsigned {
				f[i] = float64(uint64(v))
			} else {
				f[i] = float64(v)
			}
		}
		return floatsTo(f, to, saturate, mode)
	}
	switch to {
	case Bool:
		d := make([]bool, len(src))
		for i, v := range src {
			d[i] = v != 0
		}
		return d
	case Int4, Int2, Uint4, Uint2:
		lo, hi := intRange(to)
		return fillInts(to, len(src), func(i int) int64 {
			v := src[i]
			switch {
			case unsigned && v < 0, v > hi:
				return hi
			case v < lo:
				return lo
			}
			return v
		})
	case Uint64:
		return convertInts[uint64](src)
	}
	return fillInts(to, len(src), func(i int) int64 { return src[i] })
}

// intRange is the value range of an integer type (Uint64's upper bound is
// clipped to MaxInt64; callers treat Uint64 apart).
func intRange(dt DType) (lo, hi int64) {
	switch dt {
	case Int8:
		return math.MinInt8, math.MaxInt8
	case Uint8:
		return 0, math.MaxUint8
	case Int16:
		return math.MinInt16, math.MaxInt16
	case Uint16:
		return 0, math.MaxUint16
	case Int32:
		return math.MinInt32, math.MaxInt32
	case Uint32:
		return 0, math.MaxUint32
	case Int4:
		return -8, 7
	case Uint4:
		return 0, 15
	case Int2:
		return -2, 1
	case Uint2:
		return 0, 3
	case Uint64:
		return 0, math.MaxInt64
	}
	return math.MinInt64, math.MaxInt64
}

// fillInts builds the Data slice of integer type dt from value(i), keeping
// the low bits of each value.
func fillInts(dt DType, n int, value func(int) int64) any {
	switch d := makeSlice(dt, n).(type) {
	case []int8:
		return fillFrom(d, value)
	case []uint8:
		return fillFrom(d, value)
	case []int16:
		return fillFrom(d, value)
	case []uint16:
		return fillFrom(d, value)
	case []int32:
		return fillFrom(d, value)
	case []uint32:
		return fillFrom(d, value)
	case []int64:
		return fillFrom(d, value)
	case []uint64:
		return fillFrom(d, value)
	}
	panic("tensor: fillInts on non-integer type " + dt.String())
}

// fillFrom sets d[i] = T(value(i)), truncating to T's width.
func fillFrom[T int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64](d []T, value func(int) int64) []T {
	for i := range d {
		d[i] = T(value(i))
	}
	return d
}

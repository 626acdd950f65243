// Package quant is the quantization arithmetic, in one place: how a float
// becomes a quantized code (ONNX QuantizeLinear) and back (DequantizeLinear),
// with round half to even, saturation, NaN and ±Inf, for every integer and
// narrow float element type, and how a tensor's elements map to their
// per-tensor, per-axis or per-block qparams. The writer, the built-in engine
// and every quantization error metric call it; none carries a copy.
//
// The rules, as ONNX Runtime 1.23 computes them:
//
//   - integer codes: q = clamp(roundHalfEven(x/scale) + zp, lo, hi), the
//     division in float32 and the rest exact;
//   - ±Inf (and every overflow) saturates to hi or lo;
//   - NaN becomes lo, the type's lowest code, whatever the zero point (0 for
//     uint8, −128 for int8): ONNX leaves it undefined, and ONNX Runtime's
//     clamp max(x, lo) yields lo for NaN, so the model we write and the engine
//     that runs it agree with ONNX Runtime;
//   - narrow float codes (float8, float4): x/scale + zp rounded to the nearest
//     even code by the format's codec, saturating to ±max when asked; NaN is
//     the format's NaN (float4, which has none: tensor.Float32ToFloat4E2M1);
//     −0 stays −0;
//   - dequantization: (q − zp)·scale, the difference taken exactly in
//     integers, then one float32 multiplication.
//
// Loops over codes of 8 bits run pkg/kernels' vector versions of these
// rules where the CPU has them (TestQuantize8, TestIntCodesAgainstFloat64
// and TestRoundTripIsQuantizeThenDequantize hold them to the same bits).
package quant

import (
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// RoundHalfEven rounds to the nearest integer, ties to even (ONNX
// QuantizeLinear, torch.round).
func RoundHalfEven(x float64) float64 { return math.RoundToEven(x) }

// IntRange is the saturation range of an integer element type that
// QuantizeLinear writes or DequantizeLinear reads (int32 only as a bias).
func IntRange(dt tensor.DType) (lo, hi int64, ok bool) {
	switch dt {
	case tensor.Uint8:
		return 0, math.MaxUint8, true
	case tensor.Int8:
		return math.MinInt8, math.MaxInt8, true
	case tensor.Uint16:
		return 0, math.MaxUint16, true
	case tensor.Int16:
		return math.MinInt16, math.MaxInt16, true
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32, true
	case tensor.Uint4:
		return 0, 15, true
	case tensor.Int4:
		return -8, 7, true
	case tensor.Uint2:
		return 0, 3, true
	case tensor.Int2:
		return -2, 1, true
	}
	return 0, 0, false
}

// IsNarrowFloat reports whether dt is a float element type of 8 bits or
// fewer, one code per byte.
func IsNarrowFloat(dt tensor.DType) bool {
	switch dt {
	case tensor.Float8E4M3FN, tensor.Float8E4M3FNUZ, tensor.Float8E5M2, tensor.Float8E5M2FNUZ, tensor.Float4E2M1, tensor.Float8E8M0:
		return true
	}
	return false
}

// Int quantizes one value to an integer code in [lo, hi]:
// clamp(roundHalfEven(x/scale) + zp, lo, hi), NaN giving lo.
func Int(x, scale float32, zp, lo, hi int64) int64 {
	return int64(intCode(x, scale, float64(zp), float64(lo), float64(hi)))
}

// intCode is Int's arithmetic, an integral float64 in [lo, hi], small
// enough to inline into the loops over runs (intCodes).
func intCode(x, scale float32, zp, lo, hi float64) float64 {
	// float32 division, as ONNX's reference and ONNX Runtime compute it.
	v := float64(x / scale)
	if v != v {
		return lo
	}
	return min(max(RoundHalfEven(v)+zp, lo), hi)
}

// Dequantize maps an integer code back to its value, (q − zp)·scale; the
// difference is exact even for int32 codes beyond 2^24.
func Dequantize(q, zp int64, scale float32) float32 {
	return float32(q-zp) * scale
}

// Float quantizes one value to the code of a narrow float type:
// encode(x/scale + zp), rounding to the nearest even code, saturating
// to the largest finite value when asked (ONNX's default). A zero point of
// 0 adds nothing, so that −0 keeps its sign, as in ONNX Runtime.
func Float(dt tensor.DType, x, scale, zp float32, saturate bool) uint8 {
	return FloatEncoder(dt, saturate)(x, scale, zp)
}

// FloatEncoder returns Float for one type and saturation, for loops over
// many values.
func FloatEncoder(dt tensor.DType, saturate bool) func(x, scale, zp float32) uint8 {
	if !IsNarrowFloat(dt) {
		panic(fmt.Sprintf("quant.Float: %s is not a narrow float type", dt))
	}
	return func(x, scale, zp float32) uint8 {
		v, c := [1]float32{floatArg(x, scale, zp)}, [1]uint8{}
		_ = tensor.Float32sToFloat8(dt, c[:], v[:], saturate) // dt is checked above
		return c[0]
	}
}

// floatArg is what a narrow float code encodes, x/scale + zp; a zero point
// of 0 adds nothing, so that −0 keeps its sign.
func floatArg(x, scale, zp float32) float32 {
	v := x / scale
	if zp != 0 {
		v += zp
	}
	return v
}

// DequantizeFloat maps a narrow float code back to its value,
// (decode(code) − zp)·scale.
func DequantizeFloat(dt tensor.DType, code uint8, scale, zp float32) float32 {
	return (decodeFloat(dt, code) - zp) * scale
}

func decodeFloat(dt tensor.DType, c uint8) float32 {
	switch dt {
	case tensor.Float8E4M3FN:
		return tensor.Float8E4M3FNToFloat32(c)
	case tensor.Float8E4M3FNUZ:
		return tensor.Float8E4M3FNUZToFloat32(c)
	case tensor.Float8E5M2:
		return tensor.Float8E5M2ToFloat32(c)
	case tensor.Float8E5M2FNUZ:
		return tensor.Float8E5M2FNUZToFloat32(c)
	case tensor.Float4E2M1:
		return tensor.Float4E2M1ToFloat32(c)
	case tensor.Float8E8M0:
		return tensor.Float8E8M0ToFloat32(c)
	}
	panic(fmt.Sprintf("quant.DequantizeFloat: %s is not a narrow float type", dt))
}

// Quantize quantizes x, a tensor of shape laid out in qparam groups by l,
// into a new tensor of element type dt, with scales[g] and the zero point
// zp's element g (zp may be nil: all zero) for group g. saturate applies to
// narrow float types; integer codes always saturate. workers bounds the
// goroutines that share a large tensor (EachParallel): 1 for the engine,
// whose sessions keep to their own thread count; the writer gives all.
func Quantize(x []float32, shape []int, l Layout, scales []float32, zp *tensor.Tensor, dt tensor.DType, saturate bool, workers int) (*tensor.Tensor, error) {
	if err := l.check(len(x), scales, zp); err != nil {
		return nil, err
	}
	out := tensor.New(dt, shape...)
	if lo, hi, ok := IntRange(dt); ok {
		zps, err := intZeroPoints(zp, dt)
		if err != nil {
			return nil, err
		}
		if l.lastAxis() {
			// A row per call, each element its own scale (a MatMul weight
			// per output feature), rather than a call per element.
			// Without zero points, 8-bit rows run the vector kernel.
			symmetric := !slices.ContainsFunc(zps, func(z int64) bool { return z != 0 })
			var row func(start, end int)
			switch d := out.Data.(type) {
			case []int8:
				row = codesRow(kernels.QuantizeColsI8, symmetric, d, x, scales, zps, lo, hi)
			case []uint8:
				row = codesRow(kernels.QuantizeColsU8, symmetric, d, x, scales, zps, lo, hi)
			case []int16:
				row = func(s, e int) { intCodesCols(d[s:e], x[s:e], scales, zps, lo, hi) }
			case []uint16:
				row = func(s, e int) { intCodesCols(d[s:e], x[s:e], scales, zps, lo, hi) }
			case []int32:
				row = func(s, e int) { intCodesCols(d[s:e], x[s:e], scales, zps, lo, hi) }
			default:
				return nil, fmt.Errorf("cannot quantize to %s", dt)
			}
			l.rows(len(x), workers, row)
			return out, nil
		}
		var run func(start, end int, scale float32, z int64)
		switch d := out.Data.(type) {
		case []int8:
			run = func(s, e int, sc float32, z int64) {
				s += kernels.QuantizeI8(d[s:e], x[s:e], sc, float32(lo-z), float32(hi-z), float32(z))
				intCodes(d[s:e], x[s:e], sc, z, lo, hi)
			}
		case []uint8:
			run = func(s, e int, sc float32, z int64) {
				s += kernels.QuantizeU8(d[s:e], x[s:e], sc, float32(lo-z), float32(hi-z), float32(z))
				intCodes(d[s:e], x[s:e], sc, z, lo, hi)
			}
		case []int16:
			run = func(s, e int, sc float32, z int64) { intCodes(d[s:e], x[s:e], sc, z, lo, hi) }
		case []uint16:
			run = func(s, e int, sc float32, z int64) { intCodes(d[s:e], x[s:e], sc, z, lo, hi) }
		case []int32:
			run = func(s, e int, sc float32, z int64) { intCodes(d[s:e], x[s:e], sc, z, lo, hi) }
		default:
			return nil, fmt.Errorf("cannot quantize to %s", dt)
		}
		l.RunsParallel(len(x), workers, func(s, e, g int) {
			var z int64
			if zps != nil {
				z = zps[g]
			}
			run(s, e, scales[g], z)
		})
		return out, nil
	}
	if !IsNarrowFloat(dt) {
		return nil, fmt.Errorf("cannot quantize to %s", dt)
	}
	zps, err := floatZeroPoints(zp, dt)
	if err != nil {
		return nil, err
	}
	// The values first, then the whole tensor through the codec.
	v := make([]float32, len(x))
	l.EachParallel(len(x), workers, func(i, g int) {
		var z float32
		if zps != nil {
			z = zps[g]
		}
		v[i] = floatArg(x[i], scales[g], z)
	})
	if err := tensor.Float32sToFloat8(dt, out.Data.([]uint8), v, saturate); err != nil {
		return nil, err
	}
	return out, nil
}

// DequantizeInto maps the codes of q, laid out in qparam groups by l, back
// to values in y (len q's elements), with scales[g] and zp's element g
// (zp may be nil: all zero).
func DequantizeInto(y []float32, q *tensor.Tensor, l Layout, scales []float32, zp *tensor.Tensor) error {
	n := tensor.NumElements(q.Shape)
	if len(y) != n {
		return fmt.Errorf("%d values for %d codes", len(y), n)
	}
	if err := l.check(n, scales, zp); err != nil {
		return err
	}
	if zp != nil && zp.DType != q.DType {
		return fmt.Errorf("zero point is %s, codes are %s", zp.DType, q.DType)
	}
	if _, _, ok := IntRange(q.DType); ok {
		zps, err := intZeroPoints(zp, q.DType)
		if err != nil {
			return err
		}
		if l.lastAxis() {
			symmetric := !slices.ContainsFunc(zps, func(z int64) bool { return z != 0 })
			var row func(start, end int)
			switch d := q.Data.(type) {
			case []int8:
				row = valuesRow(kernels.DequantizeColsI8, symmetric, y, d, scales, zps)
			case []uint8:
				row = valuesRow(kernels.DequantizeColsU8, symmetric, y, d, scales, zps)
			case []int16:
				row = func(s, e int) { intValuesCols(y[s:e], d[s:e], scales, zps) }
			case []uint16:
				row = func(s, e int) { intValuesCols(y[s:e], d[s:e], scales, zps) }
			case []int32:
				row = func(s, e int) { intValuesCols(y[s:e], d[s:e], scales, zps) }
			default:
				return fmt.Errorf("%s codes held as %T", q.DType, q.Data)
			}
			l.rows(n, 1, row)
			return nil
		}
		var run func(start, end int, scale float32, z int64)
		switch d := q.Data.(type) {
		case []int8:
			run = func(s, e int, sc float32, z int64) {
				s += kernels.DequantizeI8(y[s:e], d[s:e], sc, int32(z))
				intValues(y[s:e], d[s:e], sc, z)
			}
		case []uint8:
			run = func(s, e int, sc float32, z int64) {
				s += kernels.DequantizeU8(y[s:e], d[s:e], sc, int32(z))
				intValues(y[s:e], d[s:e], sc, z)
			}
		case []int16:
			run = func(s, e int, sc float32, z int64) { intValues(y[s:e], d[s:e], sc, z) }
		case []uint16:
			run = func(s, e int, sc float32, z int64) { intValues(y[s:e], d[s:e], sc, z) }
		case []int32:
			run = func(s, e int, sc float32, z int64) { intValues32(y[s:e], d[s:e], sc, z) }
		default:
			return fmt.Errorf("%s codes held as %T", q.DType, q.Data)
		}
		l.Runs(n, func(s, e, g int) {
			var z int64
			if zps != nil {
				z = zps[g]
			}
			run(s, e, scales[g], z)
		})
		return nil
	}
	if !IsNarrowFloat(q.DType) {
		return fmt.Errorf("cannot dequantize %s", q.DType)
	}
	codes, ok := q.Data.([]uint8)
	if !ok {
		return fmt.Errorf("%s codes held as %T", q.DType, q.Data)
	}
	zps, err := floatZeroPoints(zp, q.DType)
	if err != nil {
		return err
	}
	l.Each(n, func(i, g int) {
		var z float32
		if zps != nil {
			z = zps[g]
		}
		y[i] = DequantizeFloat(q.DType, codes[i], scales[g], z)
	})
	return nil
}

// RoundTripInto writes to y (len x) what DequantizeLinear gives back for
// QuantizeLinear's codes of x, in one pass and without the codes: per
// group, (clamp(round(x/scale) + zp, lo, hi) − zp)·scale, for integer
// types of 16 bits or fewer (ok false for others: quantize and dequantize
// then). The engine runs a QuantizeLinear whose only reader is a
// DequantizeLinear this way.
func RoundTripInto(y, x []float32, l Layout, scales []float32, zp *tensor.Tensor, dt tensor.DType) (ok bool, err error) {
	lo, hi, isInt := IntRange(dt)
	if !isInt || lo < math.MinInt16 || hi > math.MaxUint16 {
		return false, nil
	}
	if len(y) != len(x) {
		return false, fmt.Errorf("%d values for %d outputs", len(x), len(y))
	}
	if err := l.check(len(x), scales, zp); err != nil {
		return false, err
	}
	zps, err := intZeroPoints(zp, dt)
	if err != nil {
		return false, err
	}
	l.Runs(len(x), func(s, e, g int) {
		var z int64
		if zps != nil {
			z = zps[g]
		}
		sc, flo, fhi := scales[g], float32(lo-z), float32(hi-z)
		s += kernels.RoundTrip(y[s:e], x[s:e], sc, flo, fhi)
		for i := s; i < e; i++ {
			// The code minus the zero point, an exact integer.
			y[i] = intCode32(x[i], sc, 0, flo, fhi) * sc
		}
	})
	return true, nil
}

// intCodes is Int over a run of values that share one scale and zero
// point, written to dst, in a loop the compiler keeps free of calls.
// Codes of 16 bits or fewer round in float32 (intCode32).
func intCodes[T int8 | uint8 | int16 | uint16 | int32](dst []T, x []float32, scale float32, zp, lo, hi int64) {
	x = x[:len(dst)]
	if lo >= math.MinInt16 && hi <= math.MaxUint16 {
		flo, fhi, fzp := float32(lo), float32(hi), float32(zp)
		for i, xv := range x {
			dst[i] = T(int32(intCode32(xv, scale, fzp, flo, fhi)))
		}
		return
	}
	flo, fhi, fzp := float64(lo), float64(hi), float64(zp)
	for i, xv := range x {
		dst[i] = T(int64(intCode(xv, scale, fzp, flo, fhi)))
	}
}

// intCodesCols is intCodes over a row of a tensor quantized along its
// last axis: element i has scale scales[i] and zero point zps[i] (zps nil:
// 0).
func intCodesCols[T int8 | uint8 | int16 | uint16 | int32](dst []T, x []float32, scales []float32, zps []int64, lo, hi int64) {
	x, scales = x[:len(dst)], scales[:len(dst)]
	if zps != nil {
		zps = zps[:len(dst)]
	}
	if lo >= math.MinInt16 && hi <= math.MaxUint16 {
		flo, fhi := float32(lo), float32(hi)
		for i, xv := range x {
			var z float32
			if zps != nil {
				z = float32(zps[i])
			}
			dst[i] = T(int32(intCode32(xv, scales[i], z, flo, fhi)))
		}
		return
	}
	flo, fhi := float64(lo), float64(hi)
	for i, xv := range x {
		var z float64
		if zps != nil {
			z = float64(zps[i])
		}
		dst[i] = T(int64(intCode(xv, scales[i], z, flo, fhi)))
	}
}

// codesRow quantizes a last-axis row [s, e) of x into d: the 8-bit vector
// kernel first when there are no zero points (symmetric), the loop for
// the rest.
func codesRow[T int8 | uint8](kernel func([]T, []float32, []float32, float32, float32) int, symmetric bool, d []T, x, scales []float32, zps []int64, lo, hi int64) func(s, e int) {
	return func(s, e int) {
		k := 0
		if symmetric {
			k = kernel(d[s:e], x[s:e], scales, float32(lo), float32(hi))
		}
		intCodesCols(d[s+k:e], x[s+k:e], scales[k:], tail(zps, k), lo, hi)
	}
}

// valuesRow is codesRow's inverse: a row of codes d read back into y.
func valuesRow[T int8 | uint8](kernel func([]float32, []T, []float32) int, symmetric bool, y []float32, d []T, scales []float32, zps []int64) func(s, e int) {
	return func(s, e int) {
		k := 0
		if symmetric {
			k = kernel(y[s:e], d[s:e], scales)
		}
		intValuesCols(y[s+k:e], d[s+k:e], scales[k:], tail(zps, k))
	}
}

// tail is zps past its first k (nil stays nil).
func tail(zps []int64, k int) []int64 {
	if zps == nil {
		return nil
	}
	return zps[k:]
}

// intValuesCols is intValues over a row of codes quantized along their
// last axis: code i has scale scales[i] and zero point zps[i] (zps nil: 0);
// the difference is exact.
func intValuesCols[T int8 | uint8 | int16 | uint16 | int32](y []float32, codes []T, scales []float32, zps []int64) {
	codes, scales = codes[:len(y)], scales[:len(y)]
	if zps != nil {
		zps = zps[:len(y)]
	}
	for i, c := range codes {
		var z int64
		if zps != nil {
			z = zps[i]
		}
		y[i] = float32(int64(c)-z) * scales[i]
	}
}

// roundMagic is 1.5·2^23: a float32 in [−2^22, 2^22] plus it lies in
// [2^23, 2^24), where float32 steps by 1, so the sum is rounded to an
// integer, half to even, and subtracting it again leaves that integer.
const roundMagic = 12582912

// intCode32 is intCode for codes of 16 bits or fewer, in float32: the
// same codes, since a quotient within ±2^22 rounds exactly as
// math.RoundToEven does and one beyond it (±Inf included) saturates
// either way.
func intCode32(x, scale, zp, lo, hi float32) float32 {
	v := x / scale
	if v != v {
		return lo
	}
	return min(max((v+roundMagic)-roundMagic+zp, lo), hi)
}

// intValues is Dequantize over a run of codes that share one scale and
// zero point, written to y.
func intValues[T int8 | uint8 | int16 | uint16](y []float32, codes []T, scale float32, zp int64) {
	codes = codes[:len(y)]
	z := int32(zp) // a zero point of the codes' type: the difference is exact
	for i, c := range codes {
		y[i] = float32(int32(c)-z) * scale
	}
}

// intValues32 is intValues for int32 codes (biases), whose difference with
// the zero point needs 64 bits.
func intValues32(y []float32, codes []int32, scale float32, zp int64) {
	codes = codes[:len(y)]
	for i, c := range codes {
		y[i] = float32(int64(c)-zp) * scale
	}
}

// ints reads the integer codes of t exactly.
func ints(t *tensor.Tensor) ([]int64, error) {
	switch d := t.Data.(type) {
	case []int8:
		return widen(d), nil
	case []uint8:
		return widen(d), nil
	case []int16:
		return widen(d), nil
	case []uint16:
		return widen(d), nil
	case []int32:
		return widen(d), nil
	}
	return nil, fmt.Errorf("%s codes held as %T", t.DType, t.Data)
}

func widen[T int8 | uint8 | int16 | uint16 | int32](s []T) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

func intZeroPoints(zp *tensor.Tensor, dt tensor.DType) ([]int64, error) {
	if zp == nil {
		return nil, nil
	}
	if zp.DType != dt {
		return nil, fmt.Errorf("zero point is %s, codes are %s", zp.DType, dt)
	}
	return ints(zp)
}

func floatZeroPoints(zp *tensor.Tensor, dt tensor.DType) ([]float32, error) {
	if zp == nil {
		return nil, nil
	}
	if zp.DType != dt {
		return nil, fmt.Errorf("zero point is %s, codes are %s", zp.DType, dt)
	}
	return zp.AsFloat32()
}

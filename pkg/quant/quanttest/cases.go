// Package quanttest holds the table of quantization cases that the
// arithmetic and each of its users (the writer, the built-in engine) are
// tested against, so that one table pins them all. Test code only.
package quanttest

import (
	"math"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Case quantizes X with one Scale and zero point (ZeroPoint, a code of
// DType) and expects the codes Want: integers for integer types, the
// format's code for narrow float types.
type Case struct {
	Name      string
	DType     tensor.DType
	Scale     float32
	ZeroPoint int64
	// NoSaturate asks narrow float types to map overflow to NaN or Inf
	// (integer codes always saturate).
	NoSaturate bool
	X          []float32
	Want       []int64
}

var (
	nan    = float32(math.NaN())
	negNaN = math.Float32frombits(0xffc00000)
	inf    = float32(math.Inf(1))
	// negZero is −0.
	negZero = float32(math.Copysign(0, -1))
)

// Cases are ties, saturation, NaN and ±Inf for every integer and narrow
// float element type the quantizer writes. NaN rows follow ONNX Runtime
// 1.23: integer NaN is the lowest code.
var Cases = []Case{
	{"int8 ties", tensor.Int8, 1, 0, false, []float32{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49}, []int64{0, 2, 2, 0, -2, -2, 3}},
	{"int8 scale division in float32", tensor.Int8, 0.1, 0, false, []float32{0.25, 0.35, -0.05}, []int64{2, 4, 0}},
	{"int8 saturation", tensor.Int8, 1, 0, false, []float32{127.4, 127.5, 1e9, -128.5, -1e9}, []int64{127, 127, 127, -128, -128}},
	{"int8 NaN and Inf", tensor.Int8, 1, 0, false, []float32{nan, negNaN, inf, -inf}, []int64{-128, -128, 127, -128}},
	{"int8 zero point", tensor.Int8, 0.5, 3, false, []float32{1.25, -1.25, 63, -70, nan}, []int64{5, 1, 127, -128, -128}},
	{"uint8 ties", tensor.Uint8, 1, 128, false, []float32{0.5, -0.5, 1.5, -1.5, 2.5}, []int64{128, 128, 130, 126, 130}},
	{"uint8 saturation", tensor.Uint8, 1, 128, false, []float32{127.5, 126.5, 125.5, -128.5, -1e9, 1e9}, []int64{255, 254, 254, 0, 0, 255}},
	{"uint8 NaN and Inf", tensor.Uint8, 1, 3, false, []float32{nan, negNaN, inf, -inf}, []int64{0, 0, 255, 0}},
	{"int16", tensor.Int16, 1, -5, false, []float32{2.5, 3.5, 32775, -32770, nan, inf, -inf}, []int64{-3, -1, 32767, -32768, -32768, 32767, -32768}},
	{"uint16", tensor.Uint16, 1, 0, false, []float32{3.5, 4.5, 65534.5, 65535.5, -1, nan, inf, -inf}, []int64{4, 4, 65534, 65535, 0, 0, 65535, 0}},
	{"int4", tensor.Int4, 1, 0, false, []float32{2.5, 6.5, 7.5, -8.5, -9, nan, inf, -inf}, []int64{2, 6, 7, -8, -8, -8, 7, -8}},
	{"uint4", tensor.Uint4, 1, 8, false, []float32{0.5, 1.5, -0.5, 7.5, 100, -100, nan, inf, -inf}, []int64{8, 10, 8, 15, 15, 0, 0, 15, 0}},
	{"int32 bias", tensor.Int32, 0.5, 0, false, []float32{1.25, 1.75, -1.25, 1e10, -1e10, nan, inf, -inf}, []int64{2, 4, -2, math.MaxInt32, math.MinInt32, math.MinInt32, math.MaxInt32, math.MinInt32}},
	// float8 e4m3fn: 1 is 0x38, steps of 1/8 up to 2, ±448 0x7e/0xfe, NaN 0x7f/0xff.
	{"float8 e4m3fn ties", tensor.Float8E4M3FN, 1, 0, false, []float32{1.0625, 1.1875, -1.0625, 0.5}, []int64{0x38, 0x3a, 0xb8, 0x30}},
	{"float8 e4m3fn saturation", tensor.Float8E4M3FN, 1, 0, false, []float32{448, 464, 1000, -1000, inf, -inf, nan, negNaN}, []int64{0x7e, 0x7e, 0x7e, 0xfe, 0x7e, 0xfe, 0x7f, 0xff}},
	// A zero point of +0 adds nothing: −0 keeps its sign, as in ONNX Runtime.
	{"float8 e4m3fn signed zero", tensor.Float8E4M3FN, 1, 0, false, []float32{negZero, 0}, []int64{0x80, 0}},
	{"float8 e4m3fn scale", tensor.Float8E4M3FN, 0.5, 0, false, []float32{0.5, 224, 300}, []int64{0x38, 0x7e, 0x7e}},
	{"float8 e4m3fn no saturation", tensor.Float8E4M3FN, 1, 0, true, []float32{1000, -1000, inf, 448}, []int64{0x7f, 0xff, 0x7f, 0x7e}},
	// float8 e5m2: 1 is 0x3c, steps of 1/4 up to 2, ±57344 0x7b/0xfb, ±Inf 0x7c/0xfc.
	{"float8 e5m2 ties", tensor.Float8E5M2, 1, 0, false, []float32{1.125, 1.375, -1.125}, []int64{0x3c, 0x3e, 0xbc}},
	{"float8 e5m2 saturation", tensor.Float8E5M2, 1, 0, false, []float32{57344, 1e6, -1e6, inf, -inf, nan}, []int64{0x7b, 0x7b, 0xfb, 0x7b, 0xfb, 0x7f}},
	{"float8 e5m2 no saturation", tensor.Float8E5M2, 1, 0, true, []float32{1e6, -1e6, inf, -inf}, []int64{0x7c, 0xfc, 0x7c, 0xfc}},
	// float4 e2m1: codes 0–7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign.
	// It has neither Inf nor NaN: both saturate, NaN to +6.
	{"float4 e2m1 ties", tensor.Float4E2M1, 1, 0, false, []float32{0.25, 0.75, 2.5, 3.5, 5, -0.75}, []int64{0, 2, 4, 6, 6, 0xa}},
	{"float4 e2m1 saturation", tensor.Float4E2M1, 1, 0, false, []float32{6, 7, 100, -100, inf, -inf, nan}, []int64{7, 7, 7, 0xf, 7, 0xf, 7}},
}

// DequantizeCase maps the codes Q of DType back with one Scale and zero
// point and expects Want exactly.
type DequantizeCase struct {
	Name      string
	DType     tensor.DType
	Scale     float32
	ZeroPoint int64
	Q         []int64
	Want      []float32
}

// DequantizeCases include int32 codes beyond 2^24, whose difference with
// the zero point must be taken in integers.
var DequantizeCases = []DequantizeCase{
	{"int8", tensor.Int8, 0.5, -3, []int64{-128, -3, 127}, []float32{-62.5, 0, 65}},
	{"uint8", tensor.Uint8, 0.25, 128, []int64{0, 128, 255}, []float32{-32, 0, 31.75}},
	{"int4", tensor.Int4, 2, 1, []int64{-8, 7}, []float32{-18, 12}},
	{"uint4", tensor.Uint4, 1, 8, []int64{0, 15}, []float32{-8, 7}},
	{"int16", tensor.Int16, 1, 0, []int64{-32768, 32767}, []float32{-32768, 32767}},
	{"uint16", tensor.Uint16, 1, 1, []int64{0, 65535}, []float32{-1, 65534}},
	{"int32 beyond 2^24", tensor.Int32, 1, 16777217, []int64{16777219, 16777217}, []float32{2, 0}},
	{"float8 e4m3fn", tensor.Float8E4M3FN, 2, 0, []int64{0x38, 0x7e, 0xfe, 0x7f}, []float32{2, 896, -896, nan}},
	{"float8 e5m2", tensor.Float8E5M2, 0.5, 0, []int64{0x3c, 0x7c, 0xfb}, []float32{0.5, inf, -28672}},
	{"float4 e2m1", tensor.Float4E2M1, 0.5, 0, []int64{7, 0xf, 1}, []float32{3, -3, 0.25}},
}

// Tensor returns the codes of a case as a tensor of dtype dt (integers
// for integer types, codes for narrow float types), shape [len(codes)].
func Tensor(dt tensor.DType, codes ...int64) *tensor.Tensor {
	t := tensor.New(dt, len(codes))
	for i, c := range codes {
		switch d := t.Data.(type) {
		case []int8:
			d[i] = int8(c)
		case []uint8:
			d[i] = uint8(c)
		case []int16:
			d[i] = int16(c)
		case []uint16:
			d[i] = uint16(c)
		case []int32:
			d[i] = int32(c)
		}
	}
	return t
}

// Codes reads the codes of a tensor that Tensor could have built.
func Codes(t *tensor.Tensor) []int64 {
	out := make([]int64, t.Len())
	for i := range out {
		switch d := t.Data.(type) {
		case []int8:
			out[i] = int64(d[i])
		case []uint8:
			out[i] = int64(d[i])
		case []int16:
			out[i] = int64(d[i])
		case []uint16:
			out[i] = int64(d[i])
		case []int32:
			out[i] = int64(d[i])
		}
	}
	return out
}

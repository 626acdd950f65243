// Package spec describes how one tensor is quantized — the coreai-opt
// QuantizationSpec: element type, scheme, granularity, qparam calculator and
// scale type — and computes scales and zero points from observed ranges.
//
// Below it are only the quantization arithmetic (pkg/quant) and tensors, so
// every other package can use it.
package spec

import (
	"fmt"
	"math"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// DType is a quantized element type or a scale type.
type DType uint8

// The element types of quantized data, then the scale-only types.
// DTypeAuto (the zero value) means "not given": a scale type picked from the
// element type.
const (
	DTypeAuto DType = iota
	Int8
	UInt8
	Int16
	UInt16
	Int4
	UInt4
	Int2
	UInt2
	Float8E4M3FN
	Float8E5M2
	Float4E2M1 // float4_e2m1fn_x2 in torch: two values per byte
	Float32
	Float16
	BFloat16
	Float8E8M0FNU
)

type dtypeInfo struct {
	name    string
	aliases []string
	bits    int
	integer bool
	signed  bool
	// data and scale say where the type may appear.
	data, scale bool
	// fmax is the largest finite value of a float data type.
	fmax float64
	// emax is the exponent of the largest power of two a float data type
	// holds (the OCP MX target_max_pow2 for e8m0 scales).
	emax int
}

var dtypeTable = [...]dtypeInfo{
	DTypeAuto:     {name: "auto"},
	Int8:          {name: "int8", bits: 8, integer: true, signed: true, data: true},
	UInt8:         {name: "uint8", bits: 8, integer: true, data: true},
	Int16:         {name: "int16", bits: 16, integer: true, signed: true, data: true},
	UInt16:        {name: "uint16", bits: 16, integer: true, data: true},
	Int4:          {name: "int4", bits: 4, integer: true, signed: true, data: true},
	UInt4:         {name: "uint4", bits: 4, integer: true, data: true},
	Int2:          {name: "int2", bits: 2, integer: true, signed: true, data: true},
	UInt2:         {name: "uint2", bits: 2, integer: true, data: true},
	Float8E4M3FN:  {name: "float8_e4m3fn", bits: 8, signed: true, data: true, fmax: 448, emax: 8},
	Float8E5M2:    {name: "float8_e5m2", bits: 8, signed: true, data: true, fmax: 57344, emax: 15},
	Float4E2M1:    {name: "float4_e2m1fn_x2", aliases: []string{"float4_e2m1", "float4_e2m1fn"}, bits: 4, signed: true, data: true, fmax: 6, emax: 2},
	Float32:       {name: "float32", aliases: []string{"float"}, bits: 32, signed: true, scale: true},
	Float16:       {name: "float16", aliases: []string{"half"}, bits: 16, signed: true, scale: true},
	BFloat16:      {name: "bfloat16", bits: 16, signed: true, scale: true},
	Float8E8M0FNU: {name: "float8_e8m0fnu", aliases: []string{"float8_e8m0"}, bits: 8, scale: true},
}

// String returns the guide's spelling ("int8", "float4_e2m1fn_x2").
func (d DType) String() string {
	if int(d) < len(dtypeTable) {
		return dtypeTable[d].name
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Bits is the width of one element (4 for float4_e2m1fn_x2, whose torch
// storage packs two).
func (d DType) Bits() int { return d.info().bits }

// IsInteger reports whether d is an integer data type.
func (d DType) IsInteger() bool { return d.info().integer }

// IsFloat reports whether d is a float data type (fp8, fp4).
func (d DType) IsFloat() bool { i := d.info(); return i.data && !i.integer }

// IsSigned reports whether d has negative values.
func (d DType) IsSigned() bool { return d.info().signed }

// IsData reports whether d can hold quantized data.
func (d DType) IsData() bool { return d.info().data }

// IsScale reports whether d can hold quantization scales.
func (d DType) IsScale() bool { return d.info().scale }

// Range is the full integer range [qmin, qmax] of an integer type
// (int8: [-128, 127]); zero for float types.
func (d DType) Range() (qmin, qmax int64) {
	i := d.info()
	if !i.integer {
		return 0, 0
	}
	if i.signed {
		return -(1 << (i.bits - 1)), 1<<(i.bits-1) - 1
	}
	return 0, 1<<i.bits - 1
}

// MaxFinite is the largest finite value of a float data type (448 for
// float8_e4m3fn, 57344 for float8_e5m2, 6 for float4_e2m1); zero otherwise.
func (d DType) MaxFinite() float64 { return d.info().fmax }

// TensorType is the ONNX element type of d.
func (d DType) TensorType() (tensor.DType, error) {
	switch d {
	case Int8:
		return tensor.Int8, nil
	case UInt8:
		return tensor.Uint8, nil
	case Int16:
		return tensor.Int16, nil
	case UInt16:
		return tensor.Uint16, nil
	case Int4:
		return tensor.Int4, nil
	case UInt4:
		return tensor.Uint4, nil
	case Int2:
		return tensor.Int2, nil
	case UInt2:
		return tensor.Uint2, nil
	case Float8E4M3FN:
		return tensor.Float8E4M3FN, nil
	case Float8E5M2:
		return tensor.Float8E5M2, nil
	case Float4E2M1:
		return tensor.Float4E2M1, nil
	case Float32:
		return tensor.Float, nil
	case Float16:
		return tensor.Float16, nil
	case BFloat16:
		return tensor.BFloat16, nil
	case Float8E8M0FNU:
		return tensor.Float8E8M0, nil
	}
	return tensor.Undefined, fmt.Errorf("dtype %s has no ONNX element type", d)
}

func (d DType) info() dtypeInfo {
	if int(d) < len(dtypeTable) {
		return dtypeTable[d]
	}
	return dtypeInfo{}
}

// DTypes lists every data and scale type in the guide's spelling, for
// messages and "did you mean" hints.
func DTypes() []string {
	var out []string
	for d := Int8; int(d) < len(dtypeTable); d++ {
		out = append(out, dtypeTable[d].name)
	}
	return out
}

// DTypeSpellings lists the names and aliases ParseDType reads (without the
// "torch." prefix it also takes) of the dtypes keep accepts.
func DTypeSpellings(keep func(DType) bool) []string {
	var out []string
	for d := Int8; int(d) < len(dtypeTable); d++ {
		if keep(d) {
			out = append(append(out, dtypeTable[d].name), dtypeTable[d].aliases...)
		}
	}
	return out
}

// ParseDType reads a dtype in the guide's spelling, also with torch's
// "torch." prefix ("torch.int8") and the aliases float4_e2m1 and
// float8_e8m0.
func ParseDType(s string) (DType, error) {
	name := strings.TrimPrefix(s, "torch.")
	for d := Int8; int(d) < len(dtypeTable); d++ {
		if dtypeTable[d].name == name {
			return d, nil
		}
		for _, a := range dtypeTable[d].aliases {
			if a == name {
				return d, nil
			}
		}
	}
	return DTypeAuto, fmt.Errorf("unknown dtype %q", s)
}

// MarshalText writes the guide's spelling.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what ParseDType reads.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// roundScale rounds a float32 scale to what scale type d can hold. It
// never returns zero or a non-finite value for a positive finite input.
func roundScale(d DType, s float32) float32 {
	switch d {
	case Float16:
		return roundToFloat16(s)
	case BFloat16:
		return roundToBFloat16(s)
	case Float8E8M0FNU:
		// A power of two at or above s, so that nothing saturates.
		e := int(math.Ceil(math.Log2(float64(s))))
		return float32(math.Ldexp(1, clampInt(e, -127, 127)))
	}
	return s
}

// roundToBFloat16 keeps the top 16 bits of s, rounding half to even.
func roundToBFloat16(s float32) float32 {
	b := math.Float32bits(s)
	b += 0x7fff + (b>>16)&1
	r := math.Float32frombits(b &^ 0xffff)
	if r == 0 || math.IsInf(float64(r), 0) {
		return s
	}
	return r
}

// roundToFloat16 rounds s to the nearest IEEE half value (ties to even),
// clamped to the smallest subnormal and the largest finite half.
func roundToFloat16(s float32) float32 {
	const (
		minSub = 5.960464477539063e-08 // 2^-24
		maxF16 = 65504
	)
	x := float64(s)
	switch {
	case x >= maxF16:
		return maxF16
	case x <= minSub:
		return minSub
	}
	// Half has 11 significant bits; below 2^-14 the step is fixed at 2^-24.
	_, e := math.Frexp(x) // x = f·2^e, f in [0.5, 1)
	step := math.Ldexp(1, e-11)
	if e-1 < -14 {
		step = minSub
	}
	return float32(math.RoundToEven(x/step) * step)
}

func clampInt(v, lo, hi int) int {
	return min(max(v, lo), hi)
}

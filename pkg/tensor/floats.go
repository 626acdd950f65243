package tensor

import (
	"math"
	"sync"
)

// minifloat describes a narrow binary floating-point format by its field
// widths and special values, so one rounding routine serves float16,
// bfloat16, the four float8 formats and float4.
type minifloat struct {
	mbits   int    // mantissa (fraction) bits
	ebits   int    // exponent bits
	bias    int    // exponent bias
	signBit uint32 // the sign bit of the code
	maxCode uint32 // the largest finite magnitude code
	// infCode is the magnitude code of infinity; 0 when the format has none.
	infCode uint32
	// nanCode is the code written for NaN. For formats with a signed NaN
	// (fn, IEEE) the input's sign is ORed in; fnuz formats have one NaN.
	nanCode uint32
	// uz marks the fnuz formats: no negative zero, NaN is the sign bit alone.
	uz bool
	// noNaN marks float4 e2m1, which has neither NaN nor infinity: NaN and
	// infinity saturate.
	noNaN bool
}

var (
	fmtFloat16  = minifloat{mbits: 10, ebits: 5, bias: 15, signBit: 0x8000, maxCode: 0x7BFF, infCode: 0x7C00, nanCode: 0x7E00}
	fmtBFloat16 = minifloat{mbits: 7, ebits: 8, bias: 127, signBit: 0x8000, maxCode: 0x7F7F, infCode: 0x7F80, nanCode: 0x7FC0}
	fmtE4M3FN   = minifloat{mbits: 3, ebits: 4, bias: 7, signBit: 0x80, maxCode: 0x7E, nanCode: 0x7F}
	fmtE4M3FNUZ = minifloat{mbits: 3, ebits: 4, bias: 8, signBit: 0x80, maxCode: 0x7F, nanCode: 0x80, uz: true}
	fmtE5M2     = minifloat{mbits: 2, ebits: 5, bias: 15, signBit: 0x80, maxCode: 0x7B, infCode: 0x7C, nanCode: 0x7F}
	fmtE5M2FNUZ = minifloat{mbits: 2, ebits: 5, bias: 16, signBit: 0x80, maxCode: 0x7F, nanCode: 0x80, uz: true}
	fmtE2M1     = minifloat{mbits: 1, ebits: 2, bias: 1, signBit: 0x8, maxCode: 0x7, noNaN: true}
)

// encode rounds x to the nearest code, ties to even. Overflow (a value
// that rounds above the largest finite code) and infinities follow ONNX's
// Cast/QuantizeLinear rules: with saturate they become ±max (fnuz
// infinities become NaN); without, they become infinity where the format
// has one and NaN otherwise. float4 always saturates.
//
// The input is a float64 so that float64 sources round once, not twice.
func (f *minifloat) encode(x float64, saturate bool) uint32 {
	bits := math.Float64bits(x)
	var sign uint32
	if bits>>63 != 0 {
		sign = f.signBit
	}
	abs := bits &^ (1 << 63)
	const expMask = 0x7FF << 52
	switch {
	case abs > expMask: // NaN
		switch {
		case f.noNaN:
			return f.maxCode
		case f.uz:
			return f.nanCode
		}
		return sign | f.nanCode
	case abs == expMask: // ±Inf
		switch {
		case f.noNaN:
			return sign | f.maxCode
		case f.uz:
			return f.nanCode
		case f.infCode != 0 && !saturate:
			return sign | f.infCode
		case saturate:
			return sign | f.maxCode
		}
		return sign | f.nanCode
	}
	e := int(abs >> 52)
	m := abs & (1<<52 - 1)
	exp := e - 1023
	if e == 0 {
		exp = -1022
	} else {
		m |= 1 << 52
	}
	// x = m·2^(exp-52). The format's quantum at exponent E ≥ emin is
	// 2^(E-mbits); below emin the format is subnormal with E = emin.
	emin := 1 - f.bias
	E := max(exp, emin)
	shift := 52 + E - exp - f.mbits
	var n uint64
	if shift < 64 {
		n = m >> shift
		rem := m & (1<<shift - 1)
		half := uint64(1) << (shift - 1)
		if rem > half || (rem == half && n&1 == 1) {
			n++
		}
	}
	// (E-emin)<<mbits + n is the code for normals (n carries the implicit
	// bit, which adds one to the biased exponent) and for subnormals (E =
	// emin); a carry out of the mantissa lands in the exponent.
	return f.finish(sign, uint64(E-emin)<<f.mbits+n, saturate)
}

// finish returns the code of a rounded magnitude code with sign: past the
// largest finite code it saturates or becomes Inf or NaN as the format
// has them; zero has no negative form in the fnuz formats.
func (f *minifloat) finish(sign uint32, code uint64, saturate bool) uint32 {
	if code > uint64(f.maxCode) {
		switch {
		case saturate || f.noNaN:
			return sign | f.maxCode
		case f.infCode != 0:
			return sign | f.infCode
		case f.uz:
			return f.nanCode
		}
		return sign | f.nanCode
	}
	if code == 0 && f.uz {
		return 0
	}
	return sign | uint32(code)
}

// encode32 is encode for float32 inputs, the hot path of quantization. It
// rounds with integer adds on the float32 bits for results that are normal
// in the target format, and with one float32 addition of a power of two
// (which the FPU rounds to nearest even at exactly the target's quantum)
// for results that are subnormal. Special values take the general path.
func (f *minifloat) encode32(x float32, saturate bool) uint32 {
	u := math.Float32bits(x)
	sign := u >> 31 * f.signBit
	u &= 0x7FFFFFFF
	if u >= 0x7F800000 {
		return f.encode(float64(x), saturate)
	}
	mshift := uint(23 - f.mbits)
	var code uint32
	if minNormal := uint32(128-f.bias) << 23; u >= minNormal {
		odd := u >> mshift & 1
		code = (u + uint32(int32(f.bias-127)<<23) + (1<<(mshift-1) - 1) + odd) >> mshift
	} else {
		magic := uint32(128-f.bias+int(mshift)) << 23
		code = math.Float32bits(math.Float32frombits(u)+math.Float32frombits(magic)) - magic
	}
	return f.finish(sign, uint64(code), saturate)
}

// decode returns the value of code c.
func (f *minifloat) decode(c uint32) float64 {
	neg := c&f.signBit != 0
	mag := c &^ f.signBit
	switch {
	case f.uz && c == f.nanCode:
		return math.NaN()
	case !f.uz && !f.noNaN && f.infCode == 0 && mag == f.nanCode:
		return math.NaN() // e4m3fn: S.1111.111
	case f.infCode != 0 && mag == f.infCode:
		if neg {
			return math.Inf(-1)
		}
		return math.Inf(1)
	case f.infCode != 0 && mag > f.infCode:
		return math.NaN()
	}
	expField := int(mag >> f.mbits)
	mant := float64(mag & (1<<f.mbits - 1))
	var v float64
	if expField == 0 {
		v = math.Ldexp(mant, 1-f.bias-f.mbits)
	} else {
		v = math.Ldexp(mant+float64(uint32(1)<<f.mbits), expField-f.bias-f.mbits)
	}
	if neg {
		v = -v
	}
	return v
}

// table256 decodes every 8-bit (or 4-bit) code of f once.
func (f *minifloat) table256() *[256]float32 {
	var t [256]float32
	for c := range t {
		if uint32(c) > f.signBit|f.maxCode|f.infCode|f.nanCode {
			// Codes wider than the format (4-bit formats) decode by their low bits.
			t[c] = float32(f.decode(uint32(c) & (f.signBit<<1 - 1)))
			continue
		}
		t[c] = float32(f.decode(uint32(c)))
	}
	return &t
}

var (
	tabE4M3FN   = fmtE4M3FN.table256()
	tabE4M3FNUZ = fmtE4M3FNUZ.table256()
	tabE5M2     = fmtE5M2.table256()
	tabE5M2FNUZ = fmtE5M2FNUZ.table256()
	tabE2M1     = fmtE2M1.table256()
	tabE8M0     = func() *[256]float32 {
		var t [256]float32
		for c := range 255 {
			t[c] = float32(math.Ldexp(1, c-127))
		}
		t[255] = float32(math.NaN())
		return &t
	}()
)

// f16Table maps every float16 code to its float32 value; built on first use
// (256 KiB) so that programs that never touch float16 do not pay for it.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for c := range t {
		t[c] = float32(fmtFloat16.decode(uint32(c)))
	}
	return &t
})

// Float16ToFloat32 returns the value of the IEEE binary16 code h (exact).
func Float16ToFloat32(h uint16) float32 { return f16Table()[h] }

// Float32ToFloat16 rounds f to the nearest binary16 code, ties to even;
// values beyond the range become ±Inf, NaN stays NaN.
func Float32ToFloat16(f float32) uint16 { return uint16(fmtFloat16.encode32(f, false)) }

// Float64ToFloat16 rounds f to binary16 directly (no double rounding via float32).
func Float64ToFloat16(f float64) uint16 { return uint16(fmtFloat16.encode(f, false)) }

// BFloat16ToFloat32 returns the value of the bfloat16 code h (exact: the
// top half of a float32).
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBFloat16 rounds f to the nearest bfloat16, ties to even. NaN
// stays NaN (quiet, sign kept); overflow becomes ±Inf as in IEEE rounding.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}

// Float64ToBFloat16 rounds f to bfloat16 directly (no double rounding).
func Float64ToBFloat16(f float64) uint16 { return uint16(fmtBFloat16.encode(f, false)) }

// Float8E4M3FNToFloat32 decodes a float8 e4m3fn code (bias 7, no infinity,
// NaN = S.1111.111, max 448).
func Float8E4M3FNToFloat32(c uint8) float32 { return tabE4M3FN[c] }

// Float8E4M3FNUZToFloat32 decodes a float8 e4m3fnuz code (bias 8, NaN = 0x80).
func Float8E4M3FNUZToFloat32(c uint8) float32 { return tabE4M3FNUZ[c] }

// Float8E5M2ToFloat32 decodes a float8 e5m2 code (bias 15, IEEE-like with
// infinities, max 57344).
func Float8E5M2ToFloat32(c uint8) float32 { return tabE5M2[c] }

// Float8E5M2FNUZToFloat32 decodes a float8 e5m2fnuz code (bias 16, NaN = 0x80).
func Float8E5M2FNUZToFloat32(c uint8) float32 { return tabE5M2FNUZ[c] }

// Float8E8M0ToFloat32 decodes a float8 e8m0 code: 2^(c-127), 0xFF is NaN.
func Float8E8M0ToFloat32(c uint8) float32 { return tabE8M0[c] }

// Float4E2M1ToFloat32 decodes the low nibble of c as float4 e2m1:
// ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
func Float4E2M1ToFloat32(c uint8) float32 { return tabE2M1[c&0xF] }

// Float32ToFloat8E4M3FN rounds f to e4m3fn, ties to even. With saturate
// (ONNX's default) overflow and ±Inf become ±448; without, they become NaN.
func Float32ToFloat8E4M3FN(f float32, saturate bool) uint8 {
	return uint8(fmtE4M3FN.encode32(f, saturate))
}

// Float32ToFloat8E4M3FNUZ rounds f to e4m3fnuz, ties to even. Overflow
// becomes ±240 with saturate and NaN without; ±Inf is always NaN; -0 is 0.
func Float32ToFloat8E4M3FNUZ(f float32, saturate bool) uint8 {
	return uint8(fmtE4M3FNUZ.encode32(f, saturate))
}

// Float32ToFloat8E5M2 rounds f to e5m2, ties to even. With saturate,
// overflow and ±Inf become ±57344; without, they become ±Inf.
func Float32ToFloat8E5M2(f float32, saturate bool) uint8 {
	return uint8(fmtE5M2.encode32(f, saturate))
}

// Float32ToFloat8E5M2FNUZ rounds f to e5m2fnuz, ties to even. Overflow
// becomes ±57344 with saturate and NaN without; ±Inf is always NaN.
func Float32ToFloat8E5M2FNUZ(f float32, saturate bool) uint8 {
	return uint8(fmtE5M2FNUZ.encode32(f, saturate))
}

// Float32ToFloat4E2M1 rounds f to float4 e2m1, ties to even, saturating to
// ±6; ±Inf becomes ±6 and NaN +6 (the format has neither).
func Float32ToFloat4E2M1(f float32) uint8 { return uint8(fmtE2M1.encode32(f, true)) }

// E8M0Rounding selects how Float32ToFloat8E8M0 picks a power of two; the
// names are ONNX Cast's round_mode values.
type E8M0Rounding int

const (
	// E8M0Up rounds any value that is not a power of two up (ONNX's default).
	E8M0Up E8M0Rounding = iota
	// E8M0Down truncates to the power of two at or below the value.
	E8M0Down
	// E8M0Nearest rounds at 1.5·2^e, as ONNX's reference does.
	E8M0Nearest
)

// Float32ToFloat8E8M0 converts f to an e8m0 exponent code (no sign: the
// magnitude is used). NaN and ±Inf become 0xFF (NaN); zero and values below
// 2^-127 become 0 (2^-127), the smallest code. With saturate, rounding never
// goes past 0xFE (2^127); without, it may reach 0xFF. This follows ONNX's
// reference (numpy_helper.to_float8e8m0) bit for bit except for float32
// subnormals, which it misreads.
func Float32ToFloat8E8M0(f float32, saturate bool, mode E8M0Rounding) uint8 {
	b := math.Float32bits(f)
	exp := (b >> 23) & 0xFF
	if exp == 0xFF {
		return 0xFF
	}
	if exp == 0 {
		// Zero and float32 subnormals: 2^-127 is the subnormal 0x400000,
		// the smallest code. (ONNX's reference reads the exponent field
		// only and would round every subnormal up to 2^-126.)
		frac := b & 0x7FFFFF
		switch {
		case frac <= 0x400000 || mode == E8M0Down:
			return 0
		case mode == E8M0Up || frac >= 0x600000:
			return 1
		}
		return 0
	}
	var up bool
	switch mode {
	case E8M0Up:
		up = b&0x7FFFFF != 0
	case E8M0Nearest:
		// At or above 1.5·2^e (ONNX's reference also rounds its tie up
		// for every normal input).
		up = b&0x400000 != 0
	}
	if up && !(saturate && exp == 0xFE) {
		exp++
	}
	return uint8(exp)
}

// Float16sToFloat32 decodes src into dst (len(dst) ≥ len(src)).
func Float16sToFloat32(dst []float32, src []uint16) {
	t := f16Table()
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = t[h]
	}
}

// Float32sToFloat16 rounds src into dst (len(dst) ≥ len(src)).
func Float32sToFloat16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = Float32ToFloat16(f)
	}
}

// BFloat16sToFloat32 decodes src into dst (len(dst) ≥ len(src)).
func BFloat16sToFloat32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// Float32sToBFloat16 rounds src into dst (len(dst) ≥ len(src)).
func Float32sToBFloat16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = Float32ToBFloat16(f)
	}
}

// decodeTable8 returns the decoding table of an 8-bit (or 4-bit) float
// type, nil for others.
func decodeTable8(dt DType) *[256]float32 {
	switch dt {
	case Float8E4M3FN:
		return tabE4M3FN
	case Float8E4M3FNUZ:
		return tabE4M3FNUZ
	case Float8E5M2:
		return tabE5M2
	case Float8E5M2FNUZ:
		return tabE5M2FNUZ
	case Float8E8M0:
		return tabE8M0
	case Float4E2M1:
		return tabE2M1
	}
	return nil
}

// Float8sToFloat32 decodes codes of dt (a float8 type, Float8E8M0 or
// Float4E2M1, one code per byte) into dst (len(dst) ≥ len(src)).
func Float8sToFloat32(dt DType, dst []float32, src []uint8) error {
	t := decodeTable8(dt)
	if t == nil {
		return errNotNarrowFloat(dt)
	}
	dst = dst[:len(src)]
	for i, c := range src {
		dst[i] = t[c]
	}
	return nil
}

// Float32sToFloat8 rounds src into codes of dt (a float8 type, Float8E8M0
// with ONNX's default rounding up, or Float4E2M1), saturating as described
// at the scalar functions.
func Float32sToFloat8(dt DType, dst []uint8, src []float32, saturate bool) error {
	dst = dst[:len(src)]
	if dt == Float8E8M0 {
		for i, f := range src {
			dst[i] = Float32ToFloat8E8M0(f, saturate, E8M0Up)
		}
		return nil
	}
	f := narrowFormat(dt)
	if f == nil {
		return errNotNarrowFloat(dt)
	}
	for i, x := range src {
		dst[i] = uint8(f.encode32(x, saturate))
	}
	return nil
}

// narrowFormat returns the minifloat description of dt, nil for types that
// are not narrow floats (and for Float8E8M0, which has no mantissa).
func narrowFormat(dt DType) *minifloat {
	switch dt {
	case Float16:
		return &fmtFloat16
	case BFloat16:
		return &fmtBFloat16
	case Float8E4M3FN:
		return &fmtE4M3FN
	case Float8E4M3FNUZ:
		return &fmtE4M3FNUZ
	case Float8E5M2:
		return &fmtE5M2
	case Float8E5M2FNUZ:
		return &fmtE5M2FNUZ
	case Float4E2M1:
		return &fmtE2M1
	}
	return nil
}

type errNotNarrowFloat DType

func (e errNotNarrowFloat) Error() string {
	return "tensor: " + DType(e).String() + " is not an 8- or 4-bit float type"
}

package kernels

// QuantizeU8 writes the 8-bit codes of a prefix of x to dst (at least as
// long) and returns its length: clamp(round(x/scale), lo, hi) + zp, the
// division in float32, rounding half to even, NaN to lo + zp, lo and hi
// being the codes' range minus the zero point zp (integers). The prefix is
// what the vector kernel covers (none without one); the caller quantizes
// the rest. QuantizeI8 is the same for signed codes.
func QuantizeU8(dst []uint8, x []float32, scale, lo, hi, zp float32) int {
	return quantizeU8(dst, x, scale, lo, hi, zp)
}

// QuantizeI8 is QuantizeU8 for int8 codes.
func QuantizeI8(dst []int8, x []float32, scale, lo, hi, zp float32) int {
	return quantizeI8(dst, x, scale, lo, hi, zp)
}

// QuantizeColsU8 is QuantizeU8 with a scale per element (scales at least
// as long as the prefix) and no zero point: a row of a weight quantized
// symmetrically along its last axis. QuantizeColsI8 is the same for
// signed codes.
func QuantizeColsU8(dst []uint8, x, scales []float32, lo, hi float32) int {
	return quantizeColsU8(dst, x, scales, lo, hi)
}

// QuantizeColsI8 is QuantizeColsU8 for int8 codes.
func QuantizeColsI8(dst []int8, x, scales []float32, lo, hi float32) int {
	return quantizeColsI8(dst, x, scales, lo, hi)
}

// DequantizeColsU8 is DequantizeU8 with a scale per element (codes and
// scales at least as long as the prefix) and no zero point.
// DequantizeColsI8 is the same for signed codes.
func DequantizeColsU8(y []float32, codes []uint8, scales []float32) int {
	return dequantizeColsU8(y, codes, scales)
}

// DequantizeColsI8 is DequantizeColsU8 for int8 codes.
func DequantizeColsI8(y []float32, codes []int8, scales []float32) int {
	return dequantizeColsI8(y, codes, scales)
}

// DequantizeU8 writes (code − zp)·scale for a prefix of y (codes at least
// as long) and returns its length: the difference exact, one float32
// rounding. The prefix is what the vector kernel covers (none without
// one); the caller dequantizes the rest. DequantizeI8 is the same for
// signed codes.
func DequantizeU8(y []float32, codes []uint8, scale float32, zp int32) int {
	return dequantizeU8(y, codes, scale, zp)
}

// DequantizeI8 is DequantizeU8 for int8 codes.
func DequantizeI8(y []float32, codes []int8, scale float32, zp int32) int {
	return dequantizeI8(y, codes, scale, zp)
}

// RoundTrip writes, for a prefix of x, what DequantizeLinear gives back
// for QuantizeLinear's integer codes of x: clamp(round(x/scale), lo, hi)·
// scale, the division in float32, rounding half to even, NaN to lo, lo and
// hi being the codes' range minus the zero point; y is at least as long.
// It returns the prefix's length (0 without a vector kernel); the caller
// computes the rest.
func RoundTrip(y, x []float32, scale, lo, hi float32) int { return roundTrip(y, x, scale, lo, hi) }

package kernels

// QuantSqErrs scores candidate integer grids for one group of values x:
// out[k] is Σ (x − clamp(round(x·inv[k]), lo[k], hi[k])·scale[k])², the
// squared error of quantizing x with scale[k] (inv[k] = 1/scale[k]) and
// the codes, minus the zero point, limited to [lo[k], hi[k]], rounded half
// to even. Each step rounds to float32 as DequantizeLinear does; the
// squares are summed in float32 (the order of summation depends on the
// build, so the sums may differ in their last bits between machines).
// inv, scale, lo and hi are at least as long as out.
func QuantSqErrs(x, inv, scale, lo, hi, out []float32) {
	n := quantSqErrs(x, inv, scale, lo, hi, out)
	if n == len(x) {
		return
	}
	for k := range out {
		out[k] += quantSqErrRef(x[n:], inv[k], scale[k], lo[k], hi[k])
	}
}

// roundMagic is 1.5·2²³: adding it to a float32 of magnitude below 2²²
// leaves no fraction bits, so the addition rounds the value to the nearest
// integer, ties to even, whatever its sign.
const roundMagic = float32(3 << 22)

func quantSqErrRef(x []float32, inv, scale, lo, hi float32) float32 {
	var e float32
	for _, v := range x {
		q := v * inv
		if !(q >= lo) { // NaN too, as VMAXPS
			q = lo
		}
		if q > hi {
			q = hi
		}
		// The conversion keeps the compiler from fusing the product
		// into the subtraction (it does on arm64): DequantizeLinear
		// rounds the product, as the kernels do.
		d := v - float32(((q+roundMagic)-roundMagic)*scale)
		e += d * d
	}
	return e
}

package kernels

// Erf32 is the error function of v as a rational fit evaluated in
// float32, within 4.5e-7 relative error of math.Erf (measured on every
// 7th float32 bit pattern; one subnormal unit for subnormal results):
//
//	erf(v) = v·(P(v²)/Q(v²))   on v clamped to [−4, 4]
//
// with P of degree 6 and Q of degree 4 in v², the rational minimax fit
// Eigen and XNNPACK use for float erf (erf(4) rounds to 1 in float32). It
// needs no exponential and no branch; NaN stays NaN (min and max keep it)
// and erf(−0) = −0. Taking the quotient before the product by v keeps
// tiny arguments from underflowing. The explicit conversions keep every
// Horner step rounded after the product and after the add (no fused
// multiply-add), as the AVX2 and AVX-512 row kernels compute it, so every
// kernel set gives the same bits.
func Erf32(v float32) float32 {
	v = max(-4, min(4, v))
	x2 := v * v
	p := float32(x2*-2.72614225801306e-10) + 2.77068142495902e-08
	p = float32(x2*p) + -2.10102402082508e-06
	p = float32(x2*p) + -5.69250639462346e-05
	p = float32(x2*p) + -7.34990630326855e-04
	p = float32(x2*p) + -2.95459980854025e-03
	p = float32(x2*p) + -1.60960333262415e-02
	q := float32(x2*-1.45660718464996e-05) + -2.13374055278905e-04
	q = float32(x2*q) + -1.68282697438203e-03
	q = float32(x2*q) + -7.37332916720468e-03
	q = float32(x2*q) + -1.42647390514189e-02
	return v * (p / q)
}

// erfGo is Erf element by element in Go.
func erfGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = Erf32(v)
	}
}

// Erf sets dst[i] = Erf32(src[i]) for i < len(dst); src must be at least
// as long. dst and src may be the same slice. Every element goes through
// the same code whatever the length and offset of the call, so results do
// not depend on how a row is split.
func Erf(dst, src []float32) {
	erfRow(dst, src[:len(dst)])
}

//go:build !noasm && amd64

package kernels

// statsVariant is one implementation of the whole-vector kernels with the
// tail finished by the reference, as the dispatchers do.
type statsVariant struct {
	name   string
	ok     bool
	minMax func(x []float32) (float32, float32, int)
	accum  func(x, lo, hi []float32) int
}

func statsVariants() []statsVariant {
	return []statsVariant{
		{name: "avx512", ok: hasAVX512,
			minMax: func(x []float32) (float32, float32, int) {
				n := len(x) &^ 63
				lo, hi, nf := minMaxAVX512(x[:n])
				l, h, f := minMaxRef(x[n:])
				return min(lo, l), max(hi, h), nf + f
			},
			accum: func(x, lo, hi []float32) int {
				n := len(x) &^ 15
				return minMaxAccumAVX512(x[:n], lo, hi) + minMaxAccumRef(x[n:], lo[n:], hi[n:])
			}},
		{name: "avx2", ok: hasAVX2,
			minMax: func(x []float32) (float32, float32, int) {
				n := len(x) &^ 31
				lo, hi, nf := minMaxAVX2(x[:n])
				l, h, f := minMaxRef(x[n:])
				return min(lo, l), max(hi, h), nf + f
			},
			accum: func(x, lo, hi []float32) int {
				n := len(x) &^ 7
				return minMaxAccumAVX2(x[:n], lo, hi) + minMaxAccumRef(x[n:], lo[n:], hi[n:])
			}},
		{name: "dispatch", ok: true, minMax: minMax, accum: minMaxAccum},
	}
}

//go:build !noasm && amd64

package kernels

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
			},
			hist: func(x []float32, exp, start int, counts []uint64) (int, int, int) {
				return histPow2Lanes(histF64AVX512, 16, x, exp, start, counts)
			}},
		{name: "avx512f32", ok: hasAVX512,
			minMax: func(x []float32) (float32, float32, int) { return minMax(x) },
			accum:  func(x, lo, hi []float32) int { return minMaxAccum(x, lo, hi) },
			hist: func(x []float32, exp, start int, counts []uint64) (int, int, int) {
				if !histF32OK(exp, start, len(counts)) {
					return histPow2Lanes(histF64AVX512, 16, x, exp, start, counts)
				}
				return histPow2Lanes(histF32AVX512, 16, x, exp, start, counts)
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
			},
			hist: func(x []float32, exp, start int, counts []uint64) (int, int, int) {
				return histPow2Lanes(histF64AVX2, 8, x, exp, start, counts)
			}},
		{name: "dispatch", ok: true, minMax: minMax, accum: minMaxAccum, hist: histPow2},
	}
}

//go:build !noasm && arm64

package kernels

func statsVariants() []statsVariant {
	return []statsVariant{
		{name: "neon", ok: hasNEON,
			minMax: func(x []float32) (float32, float32, int) {
				n := len(x) &^ 15
				lo, hi, nf := minMaxNEON(x[:n])
				l, h, f := minMaxRef(x[n:])
				return min(lo, l), max(hi, h), nf + f
			},
			accum: func(x, lo, hi []float32) int {
				n := len(x) &^ 3
				return minMaxAccumNEON(x[:n], lo, hi) + minMaxAccumRef(x[n:], lo[n:], hi[n:])
			},
			hist: histPow2Ref},
		{name: "dispatch", ok: true, minMax: minMax, accum: minMaxAccum, hist: histPow2},
	}
}

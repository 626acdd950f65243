//go:build noasm || !amd64

package kernels

type statsVariant struct {
	name   string
	ok     bool
	minMax func(x []float32) (float32, float32, int)
	accum  func(x, lo, hi []float32) int
	hist   func(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int)
}

func statsVariants() []statsVariant {
	return []statsVariant{{name: "dispatch", ok: true, minMax: minMax, accum: minMaxAccum, hist: histPow2}}
}

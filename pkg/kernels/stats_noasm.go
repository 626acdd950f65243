//go:build noasm || !(amd64 || arm64)

package kernels

func minMax(x []float32) (lo, hi float32, nonFinite int) { return minMaxRef(x) }

func minMaxAccum(x, lo, hi []float32) (nonFinite int) { return minMaxAccumRef(x, lo, hi) }

func histPow2(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int) {
	return histPow2Ref(x, exp, start, counts)
}

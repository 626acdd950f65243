//go:build noasm || !amd64

package kernels

func minMax(x []float32) (lo, hi float32, nonFinite int) { return minMaxRef(x) }

func minMaxAccum(x, lo, hi []float32) (nonFinite int) { return minMaxAccumRef(x, lo, hi) }

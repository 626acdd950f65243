package kernels

import "math"

// Clip sets dst[i] = min(max(src[i], lo), hi) with Go's min and max (NaN
// stays NaN, max(−0, +0) = +0, min(−0, +0) = −0) for i < len(dst); src
// must be at least as long and may be dst.
func Clip(dst, src []float32, lo, hi float32) {
	src = src[:len(dst)]
	n := 0
	if clipVecOK(lo, hi) {
		n = clipVec(dst, src, lo, hi)
	}
	clipGo(dst[n:], src[n:], lo, hi)
}

// clipGo is Clip in Go.
func clipGo(dst, src []float32, lo, hi float32) {
	for i, v := range src[:len(dst)] {
		dst[i] = min(max(v, lo), hi)
	}
}

// clipVecOK reports whether the vector kernel gives Go's bits for these
// bounds: not NaN, lo not −0 and hi not ±0, where the vector max and min
// would pick the other zero.
func clipVecOK(lo, hi float32) bool {
	return lo == lo && hi == hi && math.Float32bits(lo) != 0x80000000 && hi != 0
}

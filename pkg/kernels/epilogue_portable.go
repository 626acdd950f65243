package kernels

import "math"

// epilogueRowPortable is epilogueRowGo with its Relu taken without a
// branch: after a convolution about half the outputs go each way, in no
// order a branch predictor learns, and the branch made the row epilogue
// about 5 times as slow (a row of 2^20 random values on amd64, medians of
// 3 runs). y ≤ 0 is y's sign bit set and y not NaN, so clearing the bits
// of exactly those y gives what the comparison gives: +0 for them (−0
// included), y itself for the others, NaN payload and sign included
// (Go's max(y, 0) makes every NaN the same).
func epilogueRowPortable(r []float32, b, s, t float32, relu bool) {
	if !relu {
		epilogueRowGo(r, b, s, t, false)
		return
	}
	for j, v := range r {
		u := math.Float32bits(float32(float32(v+b)*s) + t)
		negative := uint32(int32(u) >> 31)
		nan := uint32(int32(0x7f800000-u&0x7fffffff) >> 31)
		r[j] = math.Float32frombits(u &^ (negative &^ nan))
	}
}

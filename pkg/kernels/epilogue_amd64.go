//go:build !noasm && amd64

package kernels

import "golang.org/x/sys/cpu"

var haveAVX2 = cpu.X86.HasAVX2

// epilogueRow is epilogueRowGo with the bulk in AVX2 (bit-identical: the
// same three roundings, no FMA; Relu as a ≤ 0 mask, false for NaN).
func epilogueRow(r []float32, b, s, t float32, relu bool) {
	n := len(r) &^ 7
	if !haveAVX2 || n == 0 {
		epilogueRowGo(r, b, s, t, relu)
		return
	}
	if relu {
		epilogueRowReluAVX2(&r[0], n, b, s, t)
	} else {
		epilogueRowAVX2(&r[0], n, b, s, t)
	}
	epilogueRowGo(r[n:], b, s, t, relu)
}

// axpy is axpyGo with the bulk in AVX2 (bit-identical: product rounded
// before the add, no FMA).
func axpy(dst, src []float32, w float32) {
	n := len(dst) &^ 7
	if !haveAVX2 || n == 0 {
		axpyGo(dst, src, w)
		return
	}
	src = src[:len(dst)]
	axpyAVX2(&dst[0], &src[0], n, w)
	axpyGo(dst[n:], src[n:], w)
}

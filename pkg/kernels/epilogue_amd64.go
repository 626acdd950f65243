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

// maxRow is maxRowGo with the bulk in AVX2 (bit-identical: VMAXPS selects
// exactly as the Go comparison does); strides above 1 gather.
func maxRow(dst, src []float32, stride int, first bool) {
	n := len(dst) &^ 7
	if !haveAVX2 || n == 0 || stride < 1 || stride >= len(gatherIdx) {
		maxRowGo(dst, src, stride, first)
		return
	}
	src = src[:(len(dst)-1)*stride+1] // bounds for the assembly
	f := 0
	if first {
		f = 1
	}
	if stride == 1 {
		maxRowAVX2(&dst[0], &src[0], n, f)
	} else {
		maxRowGatherAVX2(&dst[0], &src[0], n, f, &gatherIdx[stride][0], stride)
	}
	if n == len(dst) {
		return
	}
	maxRowGo(dst[n:], src[n*stride:], stride, first)
}

// gatherIdx holds the lane offsets i·stride of maxRowGatherAVX2 per stride
// (a package table: a local array would escape to the heap at each call).
var gatherIdx = func() (t [17][8]int32) {
	for s := range t {
		for i := range t[s] {
			t[s][i] = int32(i * s)
		}
	}
	return t
}()

//go:build !noasm && arm64

package kernels

// The element-wise row kernels of internal/asm/neon/rows.go, over n
// values, a positive multiple of 8.

//go:noescape
func epilogueRowNEON(x *float32, n int, b, s, t float32)

//go:noescape
func epilogueRowReluNEON(x *float32, n int, b, s, t float32)

//go:noescape
func axpyNEON(dst, src *float32, n int, w float32)

//go:noescape
func maxRowNEON(dst, src *float32, n int)

//go:noescape
func clipRowNEON(dst, src *float32, n int, lo, hi float32)

//go:noescape
func hardSwishMulRowNEON(dst, src *float32, n int, shift, lo, hi, d float32)

//go:noescape
func hardSwishDivRowNEON(dst, src *float32, n int, shift, lo, hi, d float32)

// epilogueRow is epilogueRowGo with the bulk in NEON (bit-identical: the
// same three roundings, no FMA; Relu as FMAX with +0).
func epilogueRow(r []float32, b, s, t float32, relu bool) {
	n := len(r) &^ 7
	if !hasNEON || n == 0 {
		epilogueRowPortable(r, b, s, t, relu)
		return
	}
	if relu {
		epilogueRowReluNEON(&r[0], n, b, s, t)
	} else {
		epilogueRowNEON(&r[0], n, b, s, t)
	}
	epilogueRowPortable(r[n:], b, s, t, relu)
}

// axpy is axpyGo with the bulk in NEON (bit-identical: product rounded
// before the add, no FMA).
func axpy(dst, src []float32, w float32) {
	n := len(dst) &^ 7
	if !hasNEON || n == 0 {
		axpyGo(dst, src, w)
		return
	}
	src = src[:len(dst)]
	axpyNEON(&dst[0], &src[0], n, w)
	axpyGo(dst[n:], src[n:], w)
}

// maxRow is maxRowGo with the bulk in NEON (bit-identical: a greater
// source replaces the destination, as the Go comparison).
func maxRow(dst, src []float32, first bool) {
	n := len(dst) &^ 7
	if first || !hasNEON || n == 0 {
		maxRowGo(dst, src, first)
		return
	}
	src = src[:len(dst)]
	maxRowNEON(&dst[0], &src[0], n)
	maxRowGo(dst[n:], src[n:], false)
}

// clipVec computes the first len(dst) &^ 7 elements of Clip in NEON and
// returns how many; the caller has checked the bounds (clipVecOK).
func clipVec(dst, src []float32, lo, hi float32) int {
	n := len(dst) &^ 7
	if !hasNEON || n == 0 {
		return 0
	}
	clipRowNEON(&dst[0], &src[0], n, lo, hi)
	return n
}

// hardSwishVec computes the first len(dst) &^ 7 elements of
// HardSwishChain in NEON and returns how many; the caller has checked the
// bounds (clipVecOK).
func hardSwishVec(dst, src []float32, p HardSwishParams) int {
	n := len(dst) &^ 7
	if !hasNEON || n == 0 {
		return 0
	}
	if p.Div {
		hardSwishDivRowNEON(&dst[0], &src[0], n, p.Shift, p.Lo, p.Hi, p.D)
	} else {
		hardSwishMulRowNEON(&dst[0], &src[0], n, p.Shift, p.Lo, p.Hi, p.D)
	}
	return n
}

//go:build !noasm && amd64

package kernels

// epilogueRow is epilogueRowGo with the bulk in AVX2 (bit-identical: the
// same three roundings, no FMA; Relu as a ≤ 0 mask, false for NaN).
func epilogueRow(r []float32, b, s, t float32, relu bool) {
	n := len(r) &^ 7
	if !hasAVX2 || n == 0 {
		epilogueRowPortable(r, b, s, t, relu)
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
	if !hasAVX2 || n == 0 {
		axpyGo(dst, src, w)
		return
	}
	src = src[:len(dst)]
	axpyAVX2(&dst[0], &src[0], n, w)
	axpyGo(dst[n:], src[n:], w)
}

// maxRow is maxRowGo with the bulk in AVX2 (bit-identical: VMAXPS selects
// exactly as the Go comparison does).
func maxRow(dst, src []float32, first bool) {
	n := len(dst) &^ 7
	if !hasAVX2 || n == 0 {
		maxRowGo(dst, src, first)
		return
	}
	src = src[:len(dst)] // bounds for the assembly
	f := 0
	if first {
		f = 1
	}
	maxRowAVX2(&dst[0], &src[0], n, f)
	if n < len(dst) {
		maxRowGo(dst[n:], src[n:], first)
	}
}

// dwRow is dwRowGo with whole vectors of 8 outputs in AVX2
// (bit-identical: the same products and sums in the same order, no FMA)
// for 3×3 kernels over one to three rows and 5×5 kernels over five, and
// the tail in Go. The assembly reads x[r·ldx + stride·j + kx] only for
// the outputs it writes, which the slice bounds below guarantee.
func dwRow(out, x []float32, ldx, nr, size, stride int, w []float32) {
	n := len(out) &^ 7
	if !hasAVX2 || n == 0 || !(size == 3 && nr >= 1 && nr <= 3 || size == 5 && nr == 5) || (stride != 1 && stride != 2) {
		dwRowPortable(out, x, ldx, nr, size, stride, w)
		return
	}
	_ = x[(nr-1)*ldx+stride*(n-1)+size-1]
	_ = w[size*nr-1]
	switch [3]int{size, stride, nr} {
	case [3]int{3, 1, 1}:
		dw3s1r1AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 1, 2}:
		dw3s1r2AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 1, 3}:
		dw3s1r3AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 2, 1}:
		dw3s2r1AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 2, 2}:
		dw3s2r2AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 2, 3}:
		dw3s2r3AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{5, 1, 5}:
		dw5s1r5AVX2(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{5, 2, 5}:
		dw5s2r5AVX2(&out[0], n, &x[0], ldx, &w[0])
	}
	if n < len(out) {
		dwRowGo(out[n:], x[stride*n:], ldx, nr, size, stride, w)
	}
}

// erfRow is erfGo in AVX-512 or AVX2, bit-identical but for NaN
// payloads; the tail of fewer than two vectors goes through the same
// kernel via a buffer, so every element takes the same path however a row
// is split.
func erfRow(dst, src []float32) {
	kernel, step := erfRowAVX2, 16
	switch {
	case hasAVX512:
		kernel, step = erfRowAVX512, 32
	case !hasAVX2:
		erfGo(dst, src)
		return
	}
	n := len(dst) / step * step
	if n > 0 {
		kernel(&dst[0], &src[0], n)
	}
	if n < len(dst) {
		var buf [32]float32
		copy(buf[:], src[n:])
		kernel(&buf[0], &buf[0], step)
		copy(dst[n:], buf[:])
	}
}

// sigmoidRow is sigmoidGo in AVX2, bit-identical but for NaN payloads;
// the tail of fewer than 8 elements goes through the same kernel via a
// buffer, so every element takes the same path however a row is split.
func sigmoidRow(dst, src []float32, silu bool) {
	if !hasAVX2 {
		sigmoidGo(dst, src, silu)
		return
	}
	mode := 0
	if silu {
		mode = 1
	}
	n := len(dst) &^ 7
	if n > 0 {
		sigmoidRowAVX2(&dst[0], &src[0], n, mode)
	}
	if n < len(dst) {
		var buf [8]float32
		copy(buf[:], src[n:])
		sigmoidRowAVX2(&buf[0], &buf[0], 8, mode)
		copy(dst[n:], buf[:])
	}
}

// tanhRow is tanhGo in AVX2, bit-identical but for NaN payloads; the tail
// of fewer than 8 elements goes through the same kernel via a buffer.
func tanhRow(dst, src []float32) {
	if !hasAVX2 {
		tanhGo(dst, src)
		return
	}
	n := len(dst) &^ 7
	if n > 0 {
		tanhRowAVX2(&dst[0], &src[0], n)
	}
	if n < len(dst) {
		var buf [8]float32
		copy(buf[:], src[n:])
		tanhRowAVX2(&buf[0], &buf[0], 8)
		copy(dst[n:], buf[:])
	}
}

// clipVec computes the first len(dst) &^ 7 elements of Clip in AVX2 and
// returns how many; the caller has checked the bounds (clipVecOK).
func clipVec(dst, src []float32, lo, hi float32) int {
	n := len(dst) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	clipRowAVX2(&dst[0], &src[0], n, lo, hi)
	return n
}

// binaryVec computes the first len(o) &^ 7 elements of Binary in AVX2
// (bit-identical: one IEEE operation each) and returns how many.
func binaryVec(op BinOp, o, a, b []float32) int {
	n := len(o) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	switch op {
	case BinAdd:
		binAddAVX2(&o[0], &a[0], &b[0], n)
	case BinSub:
		binSubAVX2(&o[0], &a[0], &b[0], n)
	case BinMul:
		binMulAVX2(&o[0], &a[0], &b[0], n)
	default:
		binDivAVX2(&o[0], &a[0], &b[0], n)
	}
	return n
}

// binaryScalarVec is binaryVec for BinaryScalar.
func binaryScalarVec(op BinOp, o, a []float32, s float32, rev bool) int {
	n := len(o) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	switch op {
	case BinAdd:
		binAddScalarAVX2(&o[0], &a[0], s, n, rev)
	case BinSub:
		binSubScalarAVX2(&o[0], &a[0], s, n, rev)
	case BinMul:
		binMulScalarAVX2(&o[0], &a[0], s, n, rev)
	default:
		binDivScalarAVX2(&o[0], &a[0], s, n, rev)
	}
	return n
}

// expSubRow is expSubRowGo in AVX-512 or AVX2 with a polynomial e^x (a
// few float32 ulp from math.Exp, the same bits in both); the tail of
// fewer than a vector goes through the same kernel via a buffer padded
// with −Inf (e^−Inf adds +0 to the sum), so a row's result never depends
// on how it is stored.
func expSubRow(dst, src []float32, m float32) float64 {
	kernel, step := expSubRowAVX2, 8
	switch {
	case hasAVX512:
		kernel, step = expSubRowAVX512, 16
	case !hasAVX2:
		return expSubRowGo(dst, src, m)
	}
	n := len(dst) / step * step
	var s float64
	if n > 0 {
		s = kernel(&dst[0], &src[0], n, m)
	}
	if n < len(dst) {
		var buf [16]float32
		for i := range buf {
			buf[i] = float32negInf
		}
		copy(buf[:], src[n:len(dst)])
		s += kernel(&buf[0], &buf[0], step, m)
		copy(dst[n:], buf[:])
	}
	return s
}

// sumRow is sumRowGo with the first len(x) &^ 7 elements summed in AVX2
// (two float64 accumulators of 4 lanes) and the tail added after them.
func sumRow(x []float32) float64 {
	n := len(x) &^ 7
	if !hasAVX2 || n == 0 {
		return sumRowGo(x)
	}
	return sumRowAVX2(&x[0], n) + sumRowGo(x[n:])
}

// sqDevRow is sqDevRowGo in AVX2, summed as sumRow.
func sqDevRow(x []float32, mu float64) float64 {
	n := len(x) &^ 7
	if !hasAVX2 || n == 0 {
		return sqDevRowGo(x, mu)
	}
	return sqDevRowAVX2(&x[0], n, mu) + sqDevRowGo(x[n:], mu)
}

// normRow is normRowGo in AVX-512 or AVX2, bit-identical element by
// element; bias may be nil.
func normRow(y, x, scale, bias []float32, mu, inv float64) {
	n := 0
	if hasAVX2 {
		n = len(y) &^ 7
	}
	var pb *float32
	if n > 0 && bias != nil {
		pb = &bias[0]
	}
	if m := len(y) &^ 15; hasAVX512 && m > 0 {
		normRowAVX512(&y[0], &x[0], &scale[0], pb, m, mu, inv)
		y, x, scale = y[m:], x[m:], scale[m:]
		if bias != nil {
			bias = bias[m:]
			if len(bias) > 0 {
				pb = &bias[0]
			}
		}
		n -= m
	}
	if n > 0 {
		normRowAVX2(&y[0], &x[0], &scale[0], pb, n, mu, inv)
	}
	var tail []float32
	if bias != nil {
		tail = bias[n:]
	}
	normRowGo(y[n:], x[n:], scale[n:], tail, mu, inv)
}

// haveMaxPoolS2 reports whether maxPoolS2Rows has a kernel.
var haveMaxPoolS2 = hasAVX512

// maxPoolS2Rows computes count rows of n outputs of stride-2 max pooling
// whose windows of rows × taps (taps 2 or 3) lie inside x: output row i's
// window o has tap (ky, kx) at x[at + i·xstep + ky·ldx + 2·o + kx] and goes
// to y[i·ystep + o], folded as maxPoolPlan.window does. It reports false,
// computing nothing, when the build has no kernel for it or the kernel's
// reads (34 floats from each block's start in every row) would leave x.
func maxPoolS2Rows(x []float32, at, ldx, rows, taps, n int, y []float32, count, xstep, ystep int) bool {
	if !hasAVX512 || n <= 0 || count <= 0 || (taps != 2 && taps != 3) || rows < 1 {
		return false
	}
	if at+(count-1)*xstep+(rows-1)*ldx+32*((n-1)/16)+34 > len(x) {
		return false
	}
	y = y[:(count-1)*ystep+n]
	maxPoolS2AVX512(&x[at], ldx, rows, taps, n, &y[0], count, xstep, ystep)
	return true
}

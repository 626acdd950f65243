//go:build !noasm && arm64

package kernels

// The row kernels of internal/asm/neon/depthwise.go: out[j] for
// j < n (a positive multiple of 8) over nr rows of pitch ldx.
//
//go:noescape
func dw3s1r1NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw3s1r2NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw3s1r3NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw3s2r1NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw3s2r2NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw3s2r3NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw5s1r5NEON(out *float32, n int, x *float32, ldx int, w *float32)

//go:noescape
func dw5s2r5NEON(out *float32, n int, x *float32, ldx int, w *float32)

// dwRow is dwRowGo with whole vectors of 8 outputs in NEON
// (bit-identical: the same products and sums in the same order, each
// rounded, no FMA) for 3×3 kernels over one to three rows and 5×5
// kernels over five, strides 1 and 2, and the tail and every other
// shape in Go. The assembly reads x[r·ldx + stride·j + kx] only for the
// outputs it writes, which the slice bounds below guarantee.
func dwRow(out, x []float32, ldx, nr, size, stride int, w []float32) {
	n := len(out) &^ 7
	if !hasNEON || n == 0 || !(size == 3 && nr >= 1 && nr <= 3 || size == 5 && nr == 5) || (stride != 1 && stride != 2) {
		dwRowPortable(out, x, ldx, nr, size, stride, w)
		return
	}
	_ = x[(nr-1)*ldx+stride*(n-1)+size-1]
	_ = w[size*nr-1]
	switch [3]int{size, stride, nr} {
	case [3]int{3, 1, 1}:
		dw3s1r1NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 1, 2}:
		dw3s1r2NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 1, 3}:
		dw3s1r3NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 2, 1}:
		dw3s2r1NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 2, 2}:
		dw3s2r2NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{3, 2, 3}:
		dw3s2r3NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{5, 1, 5}:
		dw5s1r5NEON(&out[0], n, &x[0], ldx, &w[0])
	case [3]int{5, 2, 5}:
		dw5s2r5NEON(&out[0], n, &x[0], ldx, &w[0])
	}
	if n < len(out) {
		dwRowPortable(out[n:], x[stride*n:], ldx, nr, size, stride, w)
	}
}

//go:build !noasm && amd64

package kernels

// rowMax is rowMaxGo with the whole vectors in AVX-512 or AVX2 and the
// tail after them in Go.
func rowMax(x []float32) float32 {
	var n int
	m := float32negInf
	switch {
	case hasAVX512:
		if n = len(x) &^ 15; n > 0 {
			m = rowMaxAVX512(&x[0], n)
		}
	case hasAVX2:
		if n = len(x) &^ 7; n > 0 {
			m = rowMaxAVX2(&x[0], n)
		}
	}
	return max(m, rowMaxGo(x[n:]))
}

// softmaxRows computes Softmax's rows in one AVX-512 call when the rows
// are whole vectors long, the same bits as the row-by-row path; it
// reports whether it did.
func softmaxRows(x, y []float32, rows, n int) bool {
	if !hasAVX512 || n == 0 || n%16 != 0 || rows == 0 {
		return false
	}
	_, _ = x[rows*n-1], y[rows*n-1]
	softmaxRowsAVX512(&x[0], &y[0], rows, n)
	return true
}

package kernels

// maxRowGo folds one input row into a row of max-pooling outputs: with
// v = src[i],
//
//	dst[i] = v                          (first)
//	dst[i] = v > dst[i] ? v : dst[i]    (otherwise)
//
// the running maximum of the pooling loop, one lane per output column.
func maxRowGo(dst, src []float32, first bool) {
	src = src[:len(dst)]
	if first {
		copy(dst, src)
		return
	}
	for i, a := range dst {
		if v := src[i]; v > a {
			dst[i] = v
		}
	}
}

// takeEvery sets dst[i] = src[i·step].
//
// Kept out of line: inlined into its caller's loops, the index spilled to
// the stack and the loop ran at about half the speed.
//
//go:noinline
func takeEvery(dst, src []float32, step int) {
	if len(dst) == 0 {
		return
	}
	if step == 1 {
		copy(dst, src[:len(dst)])
		return
	}
	src = src[:(len(dst)-1)*step+1]
	for i, j := 0, 0; i < len(dst); i, j = i+1, j+step {
		dst[i] = src[j]
	}
}

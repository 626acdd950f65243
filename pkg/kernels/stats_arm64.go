//go:build !noasm && arm64

package kernels

// minMaxNEON is minMax over the first len(x) &^ 15 elements of x, which
// must number at most minMaxChunk (the kernel counts in int32 lanes);
// see internal/asm/neon/stats.go.
//
//go:noescape
func minMaxNEON(x []float32) (lo, hi float32, nonFinite int)

// minMaxAccumNEON is minMaxAccum over the first len(x) &^ 3 elements of
// x, at most minMaxChunk of them; lo and hi are at least as long as x.
//
//go:noescape
func minMaxAccumNEON(x, lo, hi []float32) (nonFinite int)

// minMax runs the NEON kernel over whole iterations of 16 values and the
// reference over the tail; both give the same bits (see stats.go).
func minMax(x []float32) (lo, hi float32, nonFinite int) {
	if !hasNEON {
		return minMaxRef(x)
	}
	n := len(x) &^ 15
	lo, hi, nonFinite = minMaxNEON(x[:n])
	l, h, nf := minMaxRef(x[n:])
	return min(lo, l), max(hi, h), nonFinite + nf
}

func minMaxAccum(x, lo, hi []float32) (nonFinite int) {
	if !hasNEON {
		return minMaxAccumRef(x, lo, hi)
	}
	n := len(x) &^ 3
	lo, hi = lo[:len(x)], hi[:len(x)]
	for i := 0; i < n; i += minMaxChunk {
		j := min(n, i+minMaxChunk)
		nonFinite += minMaxAccumNEON(x[i:j], lo[i:j], hi[i:j])
	}
	return nonFinite + minMaxAccumRef(x[n:], lo[n:], hi[n:])
}

// histPow2 is the reference on arm64. The amd64 kernels gain by
// computing 8 or 16 float64 bin indices an instruction; NEON holds two
// float64 lanes and has no scatter, so its index pass would cost about
// as many instructions per value as the scalar loop (reasoned from the
// instruction counts, not measured on arm64 hardware).
func histPow2(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int) {
	return histPow2Ref(x, exp, start, counts)
}

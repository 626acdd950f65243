//go:build !noasm && amd64

package kernels

import "golang.org/x/sys/cpu"

var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL
	hasAVX2   = cpu.X86.HasAVX2
)

//go:generate sh -c "cd ../../internal/asm/stats && go run . -out ../../../pkg/kernels/stats_amd64.s -stubs ../../../pkg/kernels/stats_stubs_amd64.go -pkg kernels"

// minMax runs the widest available kernel over whole vectors and the
// reference over the tail.
func minMax(x []float32) (lo, hi float32, nonFinite int) {
	var n int
	switch {
	case hasAVX512:
		n = len(x) &^ 63
		lo, hi, nonFinite = minMaxAVX512(x[:n])
	case hasAVX2:
		n = len(x) &^ 31
		lo, hi, nonFinite = minMaxAVX2(x[:n])
	default:
		return minMaxRef(x)
	}
	l, h, nf := minMaxRef(x[n:])
	return min(lo, l), max(hi, h), nonFinite + nf
}

func minMaxAccum(x, lo, hi []float32) (nonFinite int) {
	var n int
	switch {
	case hasAVX512:
		n = len(x) &^ 15
		nonFinite = minMaxAccumAVX512(x[:n], lo, hi)
	case hasAVX2:
		n = len(x) &^ 7
		nonFinite = minMaxAccumAVX2(x[:n], lo, hi)
	default:
		return minMaxAccumRef(x, lo, hi)
	}
	return nonFinite + minMaxAccumRef(x[n:], lo[n:], hi[n:])
}

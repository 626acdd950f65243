//go:build !noasm && amd64

package kernels

import (
	"math"
	"sync"
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

// Histogram dispatch. The kernels count into histCopies interleaved uint16
// sub-histograms (see internal/asm/stats/hist.go) that are summed into the
// uint64 counts after each chunk.
const (
	// histCopies must match histPow2Copies of the generator.
	histCopies = 8
	// histChunk bounds one kernel call so that no uint16 counter
	// overflows: the kernels send value i of each vector to copy
	// i % histCopies, so a counter sees at most histChunk/histCopies values.
	histChunk = histCopies * math.MaxUint16 &^ 15
	// histBlock is the kernels' block of values: their indices (4 KiB)
	// stay in L1 between the vector pass and the scatter.
	histBlock = 1024
)

// histScratchBufs are a call's zeroed sub-histograms and index block.
type histScratchBufs struct {
	sub []uint16
	idx []uint32
}

var histScratch = sync.Pool{New: func() any {
	return &histScratchBufs{idx: make([]uint32, histBlock)}
}}

func histPow2(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int) {
	// Summing the copies costs about as much as counting a few values per
	// bin, so short inputs go straight to the reference.
	if !histKernelOK(start, len(counts)) || len(x) < histMinLen(len(counts)) {
		return histPow2Ref(x, exp, start, counts)
	}
	switch {
	case hasAVX512 && histF32OK(exp, start, len(counts)):
		return histPow2Lanes(histF32AVX512, 16, x, exp, start, counts)
	case hasAVX512:
		return histPow2Lanes(histF64AVX512, 16, x, exp, start, counts)
	case hasAVX2:
		return histPow2Lanes(histF64AVX2, 8, x, exp, start, counts)
	}
	return histPow2Ref(x, exp, start, counts)
}

// A histKernelFunc counts the whole vectors of x into the sub-histograms
// sub of len(sub)/histCopies − 1 bins from start.
// idx is the kernels' index scratch.
type histKernelFunc func(x []float32, exp, start int, sub []uint16, idx []uint32) (under, over, nonFinite int)

func histF64AVX512(x []float32, exp, start int, sub []uint16, idx []uint32) (int, int, int) {
	n := len(sub)/histCopies - 1
	return histPow2AVX512(x, math.Ldexp(1, -exp), float64(start), float64(start+n), sub, n, idx)
}

func histF64AVX2(x []float32, exp, start int, sub []uint16, idx []uint32) (int, int, int) {
	n := len(sub)/histCopies - 1
	return histPow2AVX2(x, math.Ldexp(1, -exp), float64(start), float64(start+n), sub, n, idx)
}

// histF32OK reports whether histPow2F32AVX512 takes the layout: 2^−exp
// is a product of two float32 powers of two and every bin edge index is
// exact in float32.
func histF32OK(exp, start, n int) bool {
	return exp >= -254 && exp <= 149 && start >= -(1<<24) && start <= 1<<24-n
}

func histF32AVX512(x []float32, exp, start int, sub []uint16, idx []uint32) (int, int, int) {
	n := len(sub)/histCopies - 1
	s1, s2 := float32(math.Ldexp(1, -exp)), float32(1)
	if exp < -127 {
		s1, s2 = float32(math.Ldexp(1, 127)), float32(math.Ldexp(1, -exp-127))
	}
	return histPow2F32AVX512(x, s1, s2, float32(start), float32(start+n), start, sub, n, idx)
}

// histPow2Lanes runs kernel over whole vectors of x and the reference over
// the tail; histKernelOK(start, len(counts)) must hold.
func histPow2Lanes(kernel histKernelFunc, lanes int, x []float32, exp, start int, counts []uint64) (under, over, nonFinite int) {
	n := len(counts)
	size := (n + 1) * histCopies
	bufs := histScratch.Get().(*histScratchBufs)
	if cap(bufs.sub) < size {
		bufs.sub = make([]uint16, size)
	}
	sub, idx := bufs.sub[:size], bufs.idx
	for len(x) >= lanes {
		chunk := x[:min(len(x), histChunk)&^(lanes-1)]
		u, o, nf := kernel(chunk, exp, start, sub, idx)
		under, over, nonFinite = under+u, over+o, nonFinite+nf
		histMerge(sub, counts)
		x = x[len(chunk):]
	}
	histScratch.Put(bufs)
	u, o, nf := histPow2Ref(x, exp, start, counts)
	return under + u, over + o, nonFinite + nf
}

// histMinLen is the shortest input for which the kernels beat the
// reference with n bins: clearing and summing the sub-histograms costs
// about as much as counting n values with the reference (measured at 2048
// bins: equal at 2048 values, 2× faster at 4096 and 8192).
func histMinLen(n int) int { return 2 * n }

// histMerge adds the sub-histograms into counts and zeroes them, trash bin
// included.
func histMerge(sub []uint16, counts []uint64) {
	// The sum names every copy: a histCopies below 8 fails to compile.
	for j := range counts {
		s := (*[histCopies]uint16)(sub[j*histCopies:])
		counts[j] += uint64(s[0]) + uint64(s[1]) + uint64(s[2]) + uint64(s[3]) +
			uint64(s[4]) + uint64(s[5]) + uint64(s[6]) + uint64(s[7])
	}
	clear(sub)
}

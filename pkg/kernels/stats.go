package kernels

import (
	"fmt"
	"math"
)

// Statistics kernels for calibration observers.
//
// Non-finite values: NaN and ±Inf are skipped by every statistics kernel and
// counted, never folded into a minimum, maximum or histogram (DESIGN §5).
// Signed zeros: −0 and +0 compare equal, so a minimum or maximum of zero is
// returned as +0 whatever the sign of the zeros seen; this makes the result a
// function of the multiset of values, independent of the order in which SIMD
// lanes visit them, and so the assembly versions are bit-identical to the
// references below.

// minMaxChunk bounds one assembly call so that the int32 per-lane
// non-finite counters cannot overflow.
const minMaxChunk = 1 << 28

// FiniteMinMax returns the smallest and largest finite value of x and the number
// of NaN and ±Inf elements skipped. With no finite value, lo is +Inf and hi
// is −Inf. Reference loop:
//
//	lo, hi = +Inf, −Inf
//	for each v in x:
//	    if v is NaN: nan++; continue
//	    if v is ±Inf: inf++; continue
//	    v += 0               // −0 becomes +0
//	    lo = min(lo, v); hi = max(hi, v)
func FiniteMinMax(x []float32) (lo, hi float32, nan, inf int) {
	lo, hi = float32(math.Inf(1)), float32(math.Inf(-1))
	for len(x) > 0 {
		chunk := x[:min(len(x), minMaxChunk)]
		l, h, nonFinite := minMax(chunk)
		lo, hi = min(lo, l), max(hi, h)
		if nonFinite > 0 {
			// Rare: split the count into NaN and ±Inf with a second pass.
			a, b := CountNonFinite(chunk)
			nan, inf = nan+a, inf+b
		}
		x = x[len(chunk):]
	}
	return lo, hi, nan, inf
}

// minMaxRef is the pure-Go FiniteMinMax over x, returning the number of
// non-finite elements. v−v is 0 for finite v and NaN otherwise.
func minMaxRef(x []float32) (lo, hi float32, nonFinite int) {
	lo, hi = float32(math.Inf(1)), float32(math.Inf(-1))
	for _, v := range x {
		if v-v != 0 {
			nonFinite++
			continue
		}
		v += 0
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi, nonFinite
}

// FiniteAbsMax returns the largest |v| over the finite values of x (0 when there
// is none) and the number of NaN and ±Inf skipped. It is exactly
// max(−lo, hi) of FiniteMinMax, which reads memory at the same speed.
func FiniteAbsMax(x []float32) (absmax float32, nan, inf int) {
	lo, hi, nan, inf := FiniteMinMax(x)
	if lo > hi {
		return 0, nan, inf
	}
	return max(-lo, hi) + 0, nan, inf
}

// CountNonFinite counts the NaN and the ±Inf elements of x:
//
//	for each v in x: if v is NaN: nan++ else if v is ±Inf: inf++
func CountNonFinite(x []float32) (nan, inf int) {
	for _, v := range x {
		if v != v {
			nan++
		} else if v-v != 0 {
			inf++
		}
	}
	return nan, inf
}

// FiniteMinMaxAccum folds x elementwise into running minimums and maximums,
// skipping and counting non-finite values; lo and hi must be at least as
// long as x and start at +Inf and −Inf (or hold earlier results):
//
//	for i, v in x:
//	    if v is NaN or ±Inf: count it; continue
//	    v += 0
//	    lo[i] = min(lo[i], v); hi[i] = max(hi[i], v)
//
// It is the inner step of channels-last per-channel min/max: each row of
// an (N, …, C) tensor is folded into lo[:C], hi[:C].
func FiniteMinMaxAccum(x, lo, hi []float32) (nan, inf int) {
	if len(lo) < len(x) || len(hi) < len(x) {
		panic(fmt.Sprintf("kernels: FiniteMinMaxAccum of %d values into %d/%d accumulators", len(x), len(lo), len(hi)))
	}
	if minMaxAccum(x, lo, hi) > 0 {
		return CountNonFinite(x)
	}
	return 0, 0
}

// minMaxAccumRef is the pure-Go FiniteMinMaxAccum returning the non-finite count.
func minMaxAccumRef(x, lo, hi []float32) (nonFinite int) {
	lo, hi = lo[:len(x)], hi[:len(x)]
	for i, v := range x {
		if v-v != 0 {
			nonFinite++
			continue
		}
		v += 0
		if v < lo[i] {
			lo[i] = v
		}
		if v > hi[i] {
			hi[i] = v
		}
	}
	return nonFinite
}

// FiniteMinMaxChannels folds x, laid out as outer × channels × inner (row-major),
// into per-channel running minimums and maximums lo[:channels] and
// hi[:channels], skipping and counting non-finite values. NCHW activations
// with channel axis 1 have outer = N, inner = H·W; channels-last (NHWC)
// activations have outer = N·H·W, inner = 1:
//
//	for o < outer, c < channels, i < inner:
//	    v = x[(o·channels + c)·inner + i]
//	    if v is finite: lo[c] = min(lo[c], v+0); hi[c] = max(hi[c], v+0)
func FiniteMinMaxChannels(x []float32, outer, channels, inner int, lo, hi []float32) (nan, inf int) {
	if outer < 0 || channels < 0 || inner < 0 || len(x) != outer*channels*inner || len(lo) < channels || len(hi) < channels {
		panic(fmt.Sprintf("kernels: FiniteMinMaxChannels of %d values as %d×%d×%d into %d/%d accumulators",
			len(x), outer, channels, inner, len(lo), len(hi)))
	}
	if inner == 1 {
		for o := range outer {
			a, b := FiniteMinMaxAccum(x[o*channels:(o+1)*channels], lo, hi)
			nan += a
			inf += b
		}
		return nan, inf
	}
	for o := range outer {
		for c := range channels {
			off := (o*channels + c) * inner
			l, h, a, b := FiniteMinMax(x[off : off+inner])
			lo[c], hi[c] = min(lo[c], l), max(hi[c], h)
			nan += a
			inf += b
		}
	}
	return nan, inf
}

// HistogramPow2 counts the finite values of x into len(counts) bins of
// width 2^exp anchored at 0: bin j covers [(start+j)·2^exp, (start+j+1)·2^exp).
// Because the width is a power of two, v·2^−exp is exact in float64 for
// every float32 v and |exp| ≤ 900, so the bin of a value never depends on
// rounding. Values outside the bins are not counted in a bin; they are
// returned as under and over so that the caller can widen the range and
// never lose them silently:
//
//	for each v in x:
//	    if v is NaN or ±Inf: nonFinite++; continue
//	    j = floor(v · 2^−exp) − start
//	    if j < 0: under++ else if j ≥ len(counts): over++ else counts[j]++
func HistogramPow2(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int) {
	if exp < -900 || exp > 900 {
		panic(fmt.Sprintf("kernels: HistogramPow2 bin width 2^%d out of range", exp))
	}
	return histPow2(x, exp, start, counts)
}

const (
	// histMaxBins bounds the kernels' scratch (4 uint32 copies of 64 Ki
	// bins are 1 MiB); larger histograms use the reference.
	histMaxBins = 1 << 16
	// histMaxIndex keeps start and start+len(counts) exact in float64, so
	// that floor(f)−fs is an exact bin index in every lane.
	histMaxIndex = 1 << 52
)

// histKernelOK reports whether the assembly kernels take n bins from start.
func histKernelOK(start, n int) bool {
	return n > 0 && n <= histMaxBins && start > -histMaxIndex && start < histMaxIndex-n
}

// histPow2Ref is the pure-Go HistogramPow2; the assembly kernels compute
// the same float64 expressions lane by lane.
func histPow2Ref(x []float32, exp, start int, counts []uint64) (under, over, nonFinite int) {
	scale := math.Ldexp(1, -exp)
	fs, fe := float64(start), float64(start+len(counts))
	for _, v := range x {
		if v-v != 0 {
			nonFinite++
			continue
		}
		f := float64(v) * scale
		switch {
		case f < fs:
			under++
		case f >= fe:
			over++
		default:
			counts[int(math.Floor(f)-fs)]++
		}
	}
	return under, over, nonFinite
}

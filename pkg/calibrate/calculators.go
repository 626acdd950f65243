package calibrate

import (
	"math"

	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// percentileRange is the percentile calculator. Symmetric: the p-th
// percentile t of |v| gives [−t, t] (ONNX Runtime's default, a histogram of
// |v|). Two-tailed: (100−p)/2 percent is cut from each tail. Both are
// clamped to the observed [Min, Max].
func percentileRange(h *Histogram, p float64, symmetric bool) (lo, hi float32) {
	if symmetric {
		abs, w := h.absCounts(maxPercentileAbsBins)
		return clampedSym(h, quantileOf(abs, p, 0, w))
	}
	tail := (100 - p) / 2
	return h.quantile(tail), h.quantile(100 - tail)
}

// maxPercentileAbsBins bounds the |v| histogram the symmetric percentile
// reads (8 MiB of counts): coarser bins only for data whose spread is
// under 1/512 of its largest magnitude, where a bin of max/2^20 still
// resolves far finer than any integer grid over [−max, max].
const maxPercentileAbsBins = 1 << 20

// entropyAbsBinsPerBin bounds the |v| histogram the entropy search reads,
// in bins of the source histogram: the search is quadratic in its length.
// Coarser bins only for data whose smallest magnitude lies above 3/4 of
// its largest, where the search has no tail to weigh anyway.
const entropyAbsBinsPerBin = 4

// clampedSym is [−t, t] clamped to the observed range.
func clampedSym(h *Histogram, t float64) (lo, hi float32) {
	return float32(clamp(-t, float64(h.Min), float64(h.Max))), float32(clamp(t, float64(h.Min), float64(h.Max)))
}

// entropyRange is TensorRT's KL-divergence calibration on the histogram of
// |v|: for every candidate threshold i ≥ levels bins, the reference
// distribution P is the first i bins with the outliers added to the last,
// Q is those i bins quantized to levels levels and expanded back over the
// non-empty bins; the threshold is the upper edge of the i that minimises
// KL(P‖Q), clamped to the observed range (as ONNX Runtime does).
//
// levels is the number of grid steps that cover [0, threshold]: half the
// grid for signed data, the whole grid when the data is non-negative and
// the grid asymmetric (a Relu's output uses all 256 uint8 codes on
// [0, t]). The bin holding zero counts as its neighbour does, as
// pytorch-quantization's entropy calibrator does: a Relu output is mostly
// exact zeros, and that spike, which any threshold represents exactly,
// would otherwise dominate KL and pull the threshold down to a few percent
// of the range (every candidate wider than levels bins merges the spike
// with its neighbours).
func entropyRange(h *Histogram, levels int) (lo, hi float32) {
	abs, w := h.absCounts(entropyAbsBinsPerBin * max(h.Bins, len(h.Counts)))
	n := len(abs)
	if n <= levels {
		return float32(h.Min), float32(h.Max)
	}
	abs[0] = abs[1]
	// suffix[i] is the sum of abs[i:].
	suffix := make([]float64, n+1)
	for i := n - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + abs[i]
	}
	p := make([]float64, n)
	q := make([]float64, n)
	best, bestI := math.Inf(1), n
	for i := levels; i <= n; i++ {
		copy(p, abs[:i])
		p[i-1] += suffix[i]
		expandQuantized(abs[:i], p[:i], q[:i], levels)
		d := klDivergence(p[:i], q[:i])
		if d < best {
			best, bestI = d, i
		}
	}
	return clampedSym(h, float64(bestI)*w)
}

// expandQuantized merges the i = len(ref) bins into nq groups of i/nq bins
// (the last group takes the remainder) and spreads each group's total
// evenly over the group's bins that are non-zero in p.
func expandQuantized(ref, p, q []float64, nq int) {
	i := len(ref)
	m := i / nq
	clear(q)
	for j := range nq {
		start, stop := j*m, (j+1)*m
		if j == nq-1 {
			stop = i
		}
		sum, nonzero := 0.0, 0
		for k := start; k < stop; k++ {
			sum += ref[k]
			if p[k] != 0 {
				nonzero++
			}
		}
		if nonzero == 0 {
			continue
		}
		v := sum / float64(nonzero)
		for k := start; k < stop; k++ {
			if p[k] != 0 {
				q[k] = v
			}
		}
	}
}

// smoothEps moves a little probability mass onto empty bins so that KL is
// finite, as MXNet's and ONNX Runtime's _smooth_distribution do.
const smoothEps = 1e-4

// klDivergence is KL(P‖Q) of the normalised, smoothed distributions; +Inf
// when either is empty. Smoothing gives each empty bin smoothEps and takes
// the same total evenly from the non-empty ones, so it keeps each sum.
func klDivergence(p, q []float64) float64 {
	zp, sp, okp := smoothing(p)
	zq, sq, okq := smoothing(q)
	if !okp || !okq {
		return math.Inf(1)
	}
	d := 0.0
	for k := range p {
		a, b := smoothEps, smoothEps
		if p[k] != 0 {
			a = p[k] - zp
		}
		if q[k] != 0 {
			b = q[k] - zq
		}
		if a > 0 {
			a /= sp
			d += a * math.Log(a/(b/sq))
		}
	}
	return d
}

// smoothing returns what each non-empty bin of p gives up to the empty
// ones and the sum of p; ok is false when p is empty.
func smoothing(p []float64) (take, sum float64, ok bool) {
	zeros := 0
	for _, v := range p {
		if v == 0 {
			zeros++
		}
		sum += v
	}
	nonzero := len(p) - zeros
	if nonzero == 0 {
		return 0, 0, false
	}
	return smoothEps * float64(zeros) / float64(nonzero), sum, true
}

// mseRange is torch's HistogramObserver search (_non_linear_param_search):
// starting from the occupied bins, it advances a lower and an upper
// quantile by steps of 1e−5, moves inward whichever of the start or end bin
// the step moves further (the end on ties), and stops as soon as the L2
// error of quantizing the histogram to dst levels rises.
func mseRange(h *Histogram, dst int) (lo, hi float32) {
	first, last := -1, -1
	for j, c := range h.Counts {
		if c != 0 {
			if first < 0 {
				first = j
			}
			last = j
		}
	}
	if first < 0 {
		return float32(h.Min), float32(h.Max)
	}
	hist := h.countsF()[first : last+1]
	bins := len(hist)
	total := 0.0
	csum := make([]float64, bins)
	for j, c := range hist {
		total += c
		csum[j] = total
	}
	w := h.width()
	const step = 1e-5
	alpha, beta := 0.0, 1.0
	startBin, endBin := 0, bins-1
	normMin := math.Inf(1)
	for alpha < beta {
		nextAlpha, nextBeta := alpha+step, beta-step
		l, r := startBin, endBin
		for l < endBin && csum[l] < nextAlpha*total {
			l++
		}
		for r > startBin && csum[r] > nextBeta*total {
			r--
		}
		nextStart, nextEnd := startBin, endBin
		if l-startBin > endBin-r {
			nextStart, alpha = l, nextAlpha
		} else {
			nextEnd, beta = r, nextBeta
		}
		if nextStart == startBin && nextEnd == endBin {
			continue
		}
		norm := quantError(hist, w, nextStart, nextEnd, dst)
		if norm > normMin {
			break
		}
		normMin, startBin, endBin = norm, nextStart, nextEnd
	}
	origin := h.edge(first)
	nlo := origin + w*float64(startBin)
	nhi := origin + w*float64(endBin+1)
	return float32(clamp(nlo, float64(h.Min), float64(h.Max))), float32(clamp(nhi, float64(h.Min), float64(h.Max)))
}

// quantError is torch's _compute_quantization_error: the L2 error of
// quantizing the histogram (uniform density inside each source bin) onto dst
// levels spanning source bins [start, end].
func quantError(hist []float64, w float64, start, end, dst int) float64 {
	dw := w * float64(end-start+1) / float64(dst)
	if dw == 0 {
		return 0
	}
	norm := 0.0
	getNorm := func(a, b, density float64) float64 { return density * (b*b*b - a*a*a) / 3 }
	for j, c := range hist {
		if c == 0 {
			continue
		}
		density := c / w
		begin := float64(j-start) * w
		endv := begin + w
		db := clamp(math.Floor(begin/dw), 0, float64(dst-1))
		de := clamp(math.Floor(endv/dw), 0, float64(dst-1))
		dbCenter := (db + 0.5) * dw
		norm += getNorm(begin-dbCenter, dw/2, density)
		norm += (de - db - 1) * getNorm(-dw/2, dw/2, density)
		deCenter := de*dw + dw/2
		norm += getNorm(-dw/2, endv-deCenter, density)
	}
	return norm
}

// mseSteps is the number of candidate ranges WeightMSERange tries below the
// full one: factors 1, 1−0.5/mseSteps, …, 0.5.
const mseSteps = 100

// WeightMSERange is the mse calculator of weights on a float grid (fp8,
// fp4; integer grids use WeightRanges, held to this grid's error): the range, to hand to the spec's qparam formula, whose
// quantize-dequantize round trip of the group g has the smallest squared
// error. Weights have their data, so it searches on the values themselves,
// where activations search their histogram (mseRange). The
// candidates are the group's range shrunk by factors 1, 0.995, …, 0.5 and,
// for symmetric integer specs, the same factors applied to the range whose
// scale makes the grid end exactly at the group's extreme value: the
// formula's scale (absmax/7.5 for int4) puts a positive extreme at 7.5
// steps, which rounds to the clamped code 7, so without that candidate a
// block's largest weight always lost 1/15 of its value (and a block of one
// weight could never be exact). Ties keep the earlier candidate (the
// formula's range first, so no clipping wins a tie).
func WeightMSERange(g []float32, lo, hi float32, s *spec.QuantizationSpec) (float32, float32) {
	bestLo, bestHi := lo, hi
	best := math.Inf(1)
	bases := [][2]float32{{lo, hi}}
	if fl, fh, ok := fitRange(lo, hi, s); ok {
		bases = append(bases, [2]float32{fl, fh})
	}
	for _, b := range bases {
		for step := 0; step <= mseSteps; step++ {
			f := float32(1 - 0.5*float64(step)/mseSteps)
			l, h := b[0]*f, b[1]*f
			sc, zp, err := s.QParams([]float32{l}, []float32{h})
			if err != nil {
				break
			}
			e := roundTripError(g, sc[0], zp[0], s)
			if e < best {
				best, bestLo, bestHi = e, l, h
			}
		}
	}
	return bestLo, bestHi
}

// fitRange is, for a symmetric integer spec, the range [-r, r] whose
// formula scale r/((qmax−qmin)/2) maps the group's extremes onto the ends
// of the grid without clamping: scale = max(hi/(qmax−zp), lo/(qmin−zp)).
// ok is false for other specs and when the formula's scale already fits.
func fitRange(lo, hi float32, s *spec.QuantizationSpec) (float32, float32, bool) {
	if s.QScheme == spec.Asymmetric {
		return 0, 0, false
	}
	g, ok := s.IntGrid()
	if !ok {
		return 0, 0, false
	}
	return fitGrid(lo, hi, g)
}

// roundTripError is the sum of squared differences between g and its
// quantize-dequantize round trip, in pkg/quant's arithmetic (this runs for
// every candidate of every group, so per value, without tensors).
func roundTripError(g []float32, scale float32, zp int32, s *spec.QuantizationSpec) float64 {
	var e float64
	if qmin, qmax, ok := s.QuantRange(); ok {
		for _, x := range g {
			d := float64(x) - float64(quant.Dequantize(quant.Int(x, scale, int64(zp), qmin, qmax), int64(zp), scale))
			e += d * d
		}
		return e
	}
	dt, err := s.DType.TensorType()
	if err != nil || !quant.IsNarrowFloat(dt) {
		return math.Inf(1)
	}
	enc := quant.FloatEncoder(dt, true)
	for _, x := range g {
		d := float64(x) - float64(quant.DequantizeFloat(dt, enc(x, scale, 0), scale, 0))
		e += d * d
	}
	return e
}

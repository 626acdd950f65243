package compare

import (
	"math"
)

// HistogramBins is the number of bins of a Histogram.
const HistogramBins = 2048

// Histogram counts values in HistogramBins equal bins over [−Limit, Limit).
// Limit is a power of two that doubles when a larger value arrives; doubling
// merges pairs of bins exactly (every old bin lies inside one new bin), so
// the histogram needs one pass and fixed memory, and the result does not
// depend on how the data was split into batches.
type Histogram struct {
	Limit float64
	Bins  []int64
	// Min and Max are the extreme finite values seen; Count is the number of
	// finite values, NonFinite the number of NaN and ±Inf values skipped.
	Min, Max         float64
	Count, NonFinite int64
}

// Add counts the finite values of x.
func (h *Histogram) Add(x []float32) {
	if h.Bins == nil {
		h.Bins = make([]int64, HistogramBins)
		h.Min, h.Max = math.Inf(1), math.Inf(-1)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range x {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			h.NonFinite++
			continue
		}
		lo, hi = math.Min(lo, f), math.Max(hi, f)
	}
	if lo > hi {
		return
	}
	h.Min, h.Max = math.Min(h.Min, lo), math.Max(h.Max, hi)
	h.grow(math.Max(-lo, hi))
	width := 2 * h.Limit / HistogramBins
	for _, v := range x {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		i := int(math.Floor((f + h.Limit) / width))
		h.Bins[min(max(i, 0), HistogramBins-1)]++
		h.Count++
	}
}

// grow raises Limit to a power of two ≥ absmax, merging bins.
func (h *Histogram) grow(absmax float64) {
	if h.Limit == 0 {
		// Start at the smallest power of two covering absmax (1 for all-zero
		// data) so that later doublings keep bin edges aligned.
		h.Limit = 1
		if absmax > 0 {
			frac, e := math.Frexp(absmax) // absmax = frac·2^e, frac in [0.5, 1)
			if frac == 0.5 {
				e--
			}
			h.Limit = math.Ldexp(1, e)
		}
		return
	}
	for h.Limit < absmax {
		// Old bin i covers [−2L + (i+N/2)·w, …) in units of the new range, so
		// it lands in new bin (i+N/2)/2.
		merged := make([]int64, HistogramBins)
		for i, c := range h.Bins {
			merged[(i+HistogramBins/2)/2] += c
		}
		h.Bins = merged
		h.Limit *= 2
	}
}

// Coarse returns the counts over [lo, hi) in n equal bins, taken from the
// fine bins whose centre falls in each; it is what the HTML report draws.
func (h *Histogram) Coarse(lo, hi float64, n int) []int64 {
	out := make([]int64, n)
	if h.Bins == nil || hi <= lo || n <= 0 {
		return out
	}
	width := 2 * h.Limit / HistogramBins
	for i, c := range h.Bins {
		if c == 0 {
			continue
		}
		centre := -h.Limit + (float64(i)+0.5)*width
		j := int(math.Floor((centre - lo) / (hi - lo) * float64(n)))
		out[min(max(j, 0), n-1)] += c
	}
	return out
}

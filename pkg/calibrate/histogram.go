package calibrate

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/kernels"
)

// Histogram counts the finite values of a tensor in Bins bins of width
// 2^Exp anchored at 0: bin j covers [(Start+j)·2^Exp, (Start+j+1)·2^Exp).
//
// Exp is the smallest exponent ≥ MinHistogramExp at which every value seen
// fits in Bins bins (and bin indices stay below 2^40), and Start is
// floor(Min/2^Exp). Both depend only on the data's minimum and maximum, and
// widening the range merges bins 2:1 (floor(floor(v/w)/2) = floor(v/2w)),
// so no count is ever split or lost: the histogram of a data set is the
// same whatever the batch size, batch order or sharding, and merging
// histograms is exact. The price is resolution: between Bins/2 and Bins
// bins span the data.
type Histogram struct {
	Exp   int `json:"exp"`
	Start int `json:"start"`
	Bins  int `json:"bins"`
	// Counts has trailing empty bins trimmed in the stats file.
	Counts []uint64 `json:"counts"`
	// Min and Max are the exact extremes of the values counted.
	Min   Float  `json:"min"`
	Max   Float  `json:"max"`
	Total uint64 `json:"total"`

	scratch []uint64
}

// MinHistogramExp is the smallest bin width exponent: 2^-140 resolves float32
// subnormals apart from zero.
const MinHistogramExp = -140

// maxBinIndex keeps bin indices exact in float64 and int.
const maxBinIndex = 1 << 40

// NewHistogram returns an empty histogram of bins bins.
func NewHistogram(bins int) *Histogram {
	return &Histogram{Exp: MinHistogramExp, Bins: bins, Counts: make([]uint64, bins)}
}

func floorDiv(v float32, exp int) int {
	return int(math.Floor(float64(v) * math.Ldexp(1, -exp)))
}

// fitExp is the smallest exponent ≥ from at which [lo, hi] fits the bins.
// Both conditions only get easier as the exponent grows, so starting from
// the current exponent finds the same answer as starting from the minimum.
//
// The bin indices are compared in float64 before any conversion to int:
// at small exponents v·2^−e exceeds the int range, and Go's conversion of
// such a float is implementation-defined (amd64 gives math.MinInt64, which
// once made [0, 0.99] look like it fitted at 2^−140).
func (h *Histogram) fitExp(lo, hi float32, from int) int {
	e := from
	for {
		a := math.Floor(float64(lo) * math.Ldexp(1, -e))
		b := math.Floor(float64(hi) * math.Ldexp(1, -e))
		if b-a < float64(h.Bins) && a > -maxBinIndex && b < maxBinIndex {
			return e
		}
		e++
	}
}

// rebin moves the counts to bins of width 2^exp starting at start; exp ≥
// h.Exp and the new bins must cover every counted value.
func (h *Histogram) rebin(exp, start int) {
	if exp == h.Exp && start == h.Start {
		return
	}
	if h.Total == 0 {
		h.Exp, h.Start = exp, start
		return
	}
	if h.scratch == nil {
		h.scratch = make([]uint64, h.Bins)
	}
	clear(h.scratch)
	shift := uint(exp - h.Exp)
	for j, c := range h.Counts {
		if c != 0 {
			h.scratch[((h.Start+j)>>shift)-start] += c
		}
	}
	h.Counts, h.scratch = h.scratch, h.Counts
	h.Exp, h.Start = exp, start
}

// widen makes room for [lo, hi] and returns the new range.
func (h *Histogram) widen(lo, hi float32) {
	if h.Total > 0 {
		lo, hi = min(lo, float32(h.Min)), max(hi, float32(h.Max))
	}
	e := h.fitExp(lo, hi, h.Exp)
	h.rebin(e, floorDiv(lo, e))
	h.Min, h.Max = Float(lo), Float(hi)
}

// Add counts the finite values of x and returns the number of NaN and ±Inf
// skipped.
func (h *Histogram) Add(x []float32) (nan, inf int, err error) {
	lo, hi, nan, inf := kernels.FiniteMinMax(x)
	if lo > hi {
		return nan, inf, nil
	}
	h.widen(lo, hi)
	under, over, nonFinite := kernels.HistogramPow2(x, h.Exp, h.Start, h.Counts)
	if under != 0 || over != 0 {
		return nan, inf, fmt.Errorf("histogram: %d values below and %d above the bins after widening to [%g, %g]", under, over, lo, hi)
	}
	h.Total += uint64(len(x) - nonFinite)
	return nan, inf, nil
}

// Merge adds the counts of o; the result is the histogram of both data sets.
func (h *Histogram) Merge(o *Histogram) error {
	if h.Bins != o.Bins {
		return fmt.Errorf("histograms of %d and %d bins", h.Bins, o.Bins)
	}
	if o.Total == 0 {
		return nil
	}
	h.widen(float32(o.Min), float32(o.Max))
	shift := uint(h.Exp - o.Exp)
	for j, c := range o.Counts {
		if c != 0 {
			h.Counts[((o.Start+j)>>shift)-h.Start] += c
		}
	}
	h.Total += o.Total
	return nil
}

// width is the bin width 2^Exp.
func (h *Histogram) width() float64 { return math.Ldexp(1, h.Exp) }

// edge is the lower edge of bin j.
func (h *Histogram) edge(j int) float64 { return float64(h.Start+j) * h.width() }

// absCounts folds the histogram onto |v| and returns the folded counts
// and their bin width w: bin k covers [k·w, (k+1)·w); a negative bin
// [−(k+1)·w, −k·w) lands in bin k (values exactly at −k·w are one bin low,
// a measure-zero difference). w is the histogram's width, or a power-of-two
// multiple of it that keeps the folded bins at most limit: data far from
// zero against its spread (values in [1e6, 1e6 + 1]) would otherwise need
// a bin for every width step from zero up to them, billions of them. Data
// whose live bins reach zero folds onto at most len(Counts) bins.
func (h *Histogram) absCounts(limit int) (counts []float64, width float64) {
	hi := 0
	for j, c := range h.Counts {
		if c != 0 {
			i := h.Start + j
			if i < 0 {
				i = -i - 1
			}
			hi = max(hi, i+1)
		}
	}
	shift := 0
	for (hi-1)>>shift >= max(limit, 1) {
		shift++
	}
	out := make([]float64, ((hi-1)>>shift)+1)
	for j, c := range h.Counts {
		if c != 0 {
			i := h.Start + j
			if i < 0 {
				i = -i - 1
			}
			out[i>>shift] += float64(c)
		}
	}
	return out, math.Ldexp(h.width(), shift)
}

// quantile returns the value below which q percent of the counts lie,
// interpolating linearly inside the bin, clamped to [Min, Max].
func (h *Histogram) quantile(q float64) float32 {
	return float32(clamp(quantileOf(h.countsF(), q, h.edge(0), h.width()), float64(h.Min), float64(h.Max)))
}

func (h *Histogram) countsF() []float64 {
	out := make([]float64, len(h.Counts))
	for i, c := range h.Counts {
		out[i] = float64(c)
	}
	return out
}

// quantileOf is the value below which q percent of counts lie, for bins of
// width w starting at origin, with linear interpolation inside a bin. The
// target count q·total/100 is computed in that order so that round
// percentages of round totals are exact.
func quantileOf(counts []float64, q, origin, w float64) float64 {
	total := 0.0
	for _, c := range counts {
		total += c
	}
	target := q * total / 100
	if r := math.Round(target); math.Abs(target-r) <= 1e-9*total {
		// 100 − 99.8 is 0.20000000000000284 in float64: snap such dust so
		// that a percentage that names a whole count selects it.
		target = r
	}
	cum := 0.0
	for j, c := range counts {
		if c > 0 && cum+c >= target {
			return origin + (float64(j)+(target-cum)/c)*w
		}
		cum += c
	}
	return origin + float64(len(counts))*w
}

func clamp(v, lo, hi float64) float64 { return max(lo, min(hi, v)) }

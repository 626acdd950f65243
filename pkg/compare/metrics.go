// Package compare measures how closely a candidate model (usually a
// quantized one) follows its reference: per-output SQNR, cosine similarity,
// absolute errors and top-k agreement, per-layer SQNR of quantized
// activations, quality gates, and the table, JSON and HTML reports of
// `coreaiq compare`. Everything is accumulated while streaming batches, so
// memory does not grow with the number of samples.
package compare

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Stats accumulates the agreement of a candidate tensor x̂ with a reference
// tensor x over any number of batches. Sums are float64 so that long runs
// over float32 data do not lose the small error terms.
type Stats struct {
	// N is the number of finite element pairs compared.
	N int64
	// SumRef2 is Σx², SumCand2 is Σx̂², SumErr2 is Σ(x−x̂)², SumDot is Σx·x̂
	// and SumAbs is Σ|x−x̂|, over the finite pairs.
	SumRef2, SumCand2, SumErr2, SumDot, SumAbs float64
	// MaxAbs is max |x−x̂| over the finite pairs.
	MaxAbs float64
	// NonFinite counts pairs where x or x̂ is NaN or ±Inf and the two differ
	// (both NaN, or the same infinity, agree and are not counted). Such pairs
	// are left out of the sums; any of them makes SQNR −Inf.
	NonFinite int64
}

// Add accumulates one pair of equally long slices.
func (s *Stats) Add(ref, cand []float32) error {
	if len(ref) != len(cand) {
		return fmt.Errorf("reference has %d elements, candidate %d", len(ref), len(cand))
	}
	var r2, c2, e2, dot, abs, maxAbs float64
	var n, bad int64
	for i, rv := range ref {
		x, y := float64(rv), float64(cand[i])
		if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
			if !(math.IsNaN(x) && math.IsNaN(y)) && x != y {
				bad++
			}
			continue
		}
		d := x - y
		r2 += x * x
		c2 += y * y
		e2 += d * d
		dot += x * y
		ad := math.Abs(d)
		abs += ad
		if ad > maxAbs {
			maxAbs = ad
		}
		n++
	}
	s.N += n
	s.NonFinite += bad
	s.SumRef2 += r2
	s.SumCand2 += c2
	s.SumErr2 += e2
	s.SumDot += dot
	s.SumAbs += abs
	s.MaxAbs = math.Max(s.MaxAbs, maxAbs)
	return nil
}

// Merge adds the sums of o.
func (s *Stats) Merge(o Stats) {
	s.N += o.N
	s.NonFinite += o.NonFinite
	s.SumRef2 += o.SumRef2
	s.SumCand2 += o.SumCand2
	s.SumErr2 += o.SumErr2
	s.SumDot += o.SumDot
	s.SumAbs += o.SumAbs
	s.MaxAbs = math.Max(s.MaxAbs, o.MaxAbs)
}

// SQNR is the signal-to-quantization-noise ratio in dB,
// 20·log10(‖x‖/‖x−x̂‖) = 10·log10(Σx²/Σ(x−x̂)²): +Inf when the tensors are
// identical, −Inf when x is all zeros but x̂ is not, or when a non-finite
// value appears on one side only.
func (s *Stats) SQNR() DB {
	switch {
	case s.NonFinite > 0:
		return DB(math.Inf(-1))
	case s.SumErr2 == 0:
		return DB(math.Inf(1))
	}
	return DB(10 * math.Log10(s.SumRef2/s.SumErr2))
}

// NoiseRatio is the noise power relative to the signal's that an SQNR of
// d means, 10^(−d/10): the measure in which independent errors add.
func (d DB) NoiseRatio() float64 { return math.Pow(10, -float64(d)/10) }

// DBOfNoiseRatio is the SQNR of a noise power r relative to the signal's
// (NoiseRatio's inverse).
func DBOfNoiseRatio(r float64) DB { return DB(-10 * math.Log10(r)) }

// FiniteSQNR is SQNR over the finite pairs only: the figure for values in
// which infinities are expected, such as attention masks of −Inf that a
// quantizer clips to the end of its range. It is −Inf when there are
// non-finite pairs and no finite one.
func (s *Stats) FiniteSQNR() DB {
	if s.N == 0 && s.NonFinite > 0 {
		return DB(math.Inf(-1))
	}
	f := *s
	f.NonFinite = 0
	return f.SQNR()
}

// Cosine is the cosine similarity Σx·x̂ / (‖x‖·‖x̂‖); 1 when the tensors
// are identical (all zeros included), 0 when only one is all zeros.
func (s *Stats) Cosine() float64 {
	if s.SumErr2 == 0 && s.NonFinite == 0 {
		return 1 // identical: avoid a rounding error of 2⁻⁵²
	}
	if s.SumRef2 == 0 || s.SumCand2 == 0 {
		if s.SumRef2 == s.SumCand2 {
			return 1
		}
		return 0
	}
	c := s.SumDot / (math.Sqrt(s.SumRef2) * math.Sqrt(s.SumCand2))
	// Rounding can push identical vectors a hair above 1.
	return math.Max(-1, math.Min(1, c))
}

// MeanAbs is the mean absolute error over the finite pairs.
func (s *Stats) MeanAbs() float64 {
	if s.N == 0 {
		return 0
	}
	return s.SumAbs / float64(s.N)
}

// DB is a figure in decibels. It marshals to JSON as a number, or as the
// string "inf" or "-inf" for infinities (JSON has no infinity), and prints
// as "inf" in tables.
type DB float64

// String formats with two decimals, or "inf"/"-inf".
func (d DB) String() string {
	switch {
	case math.IsInf(float64(d), 1):
		return "inf"
	case math.IsInf(float64(d), -1):
		return "-inf"
	case math.IsNaN(float64(d)):
		return "nan"
	}
	return strconv.FormatFloat(float64(d), 'f', 2, 64)
}

// MarshalJSON writes a number rounded to 1e-4 dB, or "inf", "-inf", "nan".
func (d DB) MarshalJSON() ([]byte, error) {
	f := float64(d)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return json.Marshal(d.String())
	}
	return []byte(strconv.FormatFloat(math.Round(f*1e4)/1e4, 'f', -1, 64)), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *DB) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		switch s {
		case "inf":
			*d = DB(math.Inf(1))
		case "-inf":
			*d = DB(math.Inf(-1))
		case "nan":
			*d = DB(math.NaN())
		default:
			return fmt.Errorf("decibel value %q: want a number, \"inf\", \"-inf\" or \"nan\"", s)
		}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("decibel value %s: %w", b, err)
	}
	*d = DB(f)
	return nil
}

// TopK counts how often a candidate's class ranking agrees with the
// reference's on [batch, classes] outputs (logits or probabilities), and,
// with labels, how often each is right.
type TopK struct {
	// Samples is the number of rows compared.
	Samples int64
	// Top1 counts rows where both pick the same class; Top5 rows where the
	// reference's class is among the candidate's five highest.
	Top1, Top5 int64
	// Labeled counts rows that had a label; RefCorrect and CandCorrect count
	// rows where the model's top-1 class equals the label.
	Labeled, RefCorrect, CandCorrect int64
}

// Add accumulates rows of [rows, classes] data. labels, when not nil, holds
// one class index per row.
func (k *TopK) Add(ref, cand []float32, rows, classes int, labels []int64) error {
	if rows*classes != len(ref) || len(ref) != len(cand) {
		return fmt.Errorf("%d reference and %d candidate elements for %d rows of %d classes", len(ref), len(cand), rows, classes)
	}
	if labels != nil && len(labels) != rows {
		return fmt.Errorf("%d labels for %d rows", len(labels), rows)
	}
	for r := range rows {
		x := ref[r*classes : (r+1)*classes]
		y := cand[r*classes : (r+1)*classes]
		want := argmax(x)
		got := argmax(y)
		k.Samples++
		if want == got {
			k.Top1++
		}
		if inTopK(y, want, 5) {
			k.Top5++
		}
		if labels != nil {
			k.Labeled++
			if int64(want) == labels[r] {
				k.RefCorrect++
			}
			if int64(got) == labels[r] {
				k.CandCorrect++
			}
		}
	}
	return nil
}

// Merge adds the counts of o.
func (k *TopK) Merge(o TopK) {
	k.Samples += o.Samples
	k.Top1 += o.Top1
	k.Top5 += o.Top5
	k.Labeled += o.Labeled
	k.RefCorrect += o.RefCorrect
	k.CandCorrect += o.CandCorrect
}

// argmax returns the first index of the largest value, as numpy does for
// finite data; NaN never wins unless every value is NaN (then 0).
func argmax(x []float32) int {
	best := -1
	for i, v := range x {
		if v != v {
			continue
		}
		if best < 0 || v > x[best] {
			best = i
		}
	}
	return max(best, 0)
}

// inTopK reports whether class c is among the k highest values of x, ties
// broken towards lower indices as argmax does.
func inTopK(x []float32, c, k int) bool {
	v := x[c]
	if v != v {
		return false
	}
	above := 0
	for i, w := range x {
		if w > v || (w == v && i < c) {
			above++
			if above >= k {
				return false
			}
		}
	}
	return true
}

// percent returns 100·n/d, or nil when d is 0.
func percent(n, d int64) *float64 {
	if d == 0 {
		return nil
	}
	p := 100 * float64(n) / float64(d)
	return &p
}

package compare

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistogramBatchingInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 10000)
	for i := range x {
		// Growing magnitudes force several doublings of the range.
		x[i] = float32(rng.NormFloat64() * (0.01 + float64(i)/500))
	}
	var whole Histogram
	whole.Add(x)
	var parts Histogram
	for lo := 0; lo < len(x); lo += 333 {
		parts.Add(x[lo:min(lo+333, len(x))])
	}
	if whole.Limit != parts.Limit || !slices.Equal(whole.Bins, parts.Bins) {
		t.Fatalf("batched histogram differs: limits %v and %v", whole.Limit, parts.Limit)
	}
	if whole.Count != int64(len(x)) {
		t.Errorf("count = %d, want %d", whole.Count, len(x))
	}
	var sum int64
	for _, c := range whole.Bins {
		sum += c
	}
	if sum != whole.Count {
		t.Errorf("bins sum to %d, want %d", sum, whole.Count)
	}
	absmax := math.Max(-whole.Min, whole.Max)
	if whole.Limit < absmax || whole.Limit >= 2*absmax {
		t.Errorf("limit %v for absmax %v: want the smallest power of two above", whole.Limit, absmax)
	}
}

func TestHistogramBins(t *testing.T) {
	var h Histogram
	h.Add([]float32{0.5, -0.5, 1, float32(math.NaN()), float32(math.Inf(-1))})
	if h.Limit != 1 || h.Count != 3 || h.NonFinite != 2 {
		t.Fatalf("limit %v count %d nonfinite %d, want 1 3 2", h.Limit, h.Count, h.NonFinite)
	}
	// Bin width 2/2048: 0.5 is bin 1536, −0.5 bin 512, 1 (== limit) the last.
	for _, i := range []int{512, 1536, HistogramBins - 1} {
		if h.Bins[i] != 1 {
			t.Errorf("bin %d = %d, want 1", i, h.Bins[i])
		}
	}
	h.Add([]float32{3})
	if h.Limit != 4 {
		t.Fatalf("limit %v after adding 3, want 4", h.Limit)
	}
	// Two doublings move −0.5 from bin 512 to (512+1024)/2 = 768, then to
	// (768+1024)/2 = 896, which is where it falls at limit 4: 3.5·256.
	for _, i := range []int{896, 1152, 1792} {
		if h.Bins[i] != 1 {
			t.Errorf("bin %d = %d, want 1", i, h.Bins[i])
		}
	}
	coarse := h.Coarse(-4, 4, 8)
	want := []int64{0, 0, 0, 1, 2, 0, 0, 1}
	if !slices.Equal(coarse, want) {
		t.Errorf("coarse = %v, want %v", coarse, want)
	}
}

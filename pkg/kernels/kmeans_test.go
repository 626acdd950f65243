package kernels

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sse is the weighted squared error of x against its nearest centroids.
func sse(x, w, c []float32) float64 {
	var s float64
	for i, v := range x {
		e := float64(v) - float64(c[NearestSorted(c, v)])
		wi := 1.0
		if w != nil {
			wi = float64(w[i])
		}
		s += wi * e * e
	}
	return s
}

// bruteKMeans1D is the optimum by the O(k·n²) programme over sorted
// values, with costs summed directly.
func bruteKMeans1D(x, w []float32, k int) float64 {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(x[a], x[b]) })
	n := len(x)
	cost := func(a, b int) float64 { // sorted a..b−1
		var sw, s float64
		for _, i := range idx[a:b] {
			sw += float64(w[i])
			s += float64(w[i]) * float64(x[i])
		}
		m := s / sw
		var e float64
		for _, i := range idx[a:b] {
			d := float64(x[i]) - m
			e += float64(w[i]) * d * d
		}
		return e
	}
	best := make([]float64, n+1)
	for i := 1; i <= n; i++ {
		best[i] = cost(0, i)
	}
	for j := 2; j <= k; j++ {
		next := make([]float64, n+1)
		for i := 1; i <= n; i++ {
			next[i] = math.Inf(1)
			for m := j - 1; m < i; m++ {
				next[i] = min(next[i], best[m]+cost(m, i))
			}
			if i < j {
				next[i] = 0
			}
		}
		best = next
	}
	return best[n]
}

// TestKMeans1DExact: the programme reaches the optimum of a brute-force
// search on small weighted sets (seeded data).
func TestKMeans1DExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, k int }{{5, 2}, {40, 4}, {97, 8}, {200, 16}, {150, 3}} {
		x, w := make([]float32, tc.n), make([]float32, tc.n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			w[i] = float32(0.1 + r.Float64())
		}
		c := KMeans1D(x, w, tc.k)
		if len(c) != tc.k || !slices.IsSorted(c) {
			t.Fatalf("n=%d k=%d: centroids %v", tc.n, tc.k, c)
		}
		got, want := sse(x, w, c), bruteKMeans1D(x, w, tc.k)
		if got > want*(1+1e-6)+1e-9 {
			t.Errorf("n=%d k=%d: error %g, optimum %g", tc.n, tc.k, got, want)
		}
	}
}

// TestKMeans1DFewValues: with at most k distinct values the centroids are
// the values and the error is zero.
func TestKMeans1DFewValues(t *testing.T) {
	x := []float32{3, -1, 3, 0.5, -1, 0.5, 3}
	c := KMeans1D(x, nil, 4)
	if !slices.Equal(c, []float32{-1, 0.5, 3}) || sse(x, nil, c) != 0 {
		t.Errorf("centroids %v", c)
	}
}

// TestKMeans1DLarge: above MaxExactKMeansPoints distinct values the result
// is deterministic, sorted, a fixed point of Lloyd's step, and no worse
// than the optimum on the runs alone.
func TestKMeans1DLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 50000)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Exp(r.NormFloat64()*0.3))
	}
	c := KMeans1D(x, nil, 16)
	again := KMeans1D(slices.Clone(x), nil, 16)
	if !slices.Equal(c, again) || !slices.IsSorted(c) || len(c) != 16 {
		t.Fatalf("centroids %v / %v", c, again)
	}
	p := sortedPoints(x, nil)
	if fixed := p.lloyd(slices.Clone(c)); !slices.Equal(fixed, c) {
		t.Errorf("not a Lloyd fixed point: %v → %v", c, fixed)
	}
	// Uniform quantiles as a baseline: k-means must beat them.
	q := make([]float32, 16)
	s := slices.Sorted(slices.Values(x))
	for i := range q {
		q[i] = s[(2*i+1)*len(s)/32]
	}
	if a, b := sse(x, nil, c), sse(x, nil, q); a >= b {
		t.Errorf("k-means error %g not below quantiles' %g", a, b)
	}
}

// TestKMeansVectors: deterministic across thread counts, exact when the
// vectors are at most k, and better than the scalar clustering of the
// same budget on correlated pairs.
func TestKMeansVectors(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, d = 6000, 2
	x := make([]float32, n*d)
	for i := range n {
		a := r.NormFloat64()
		x[i*d] = float32(a)
		x[i*d+1] = float32(0.9*a + 0.3*r.NormFloat64())
	}
	c1, a1 := KMeansVectors(x, d, nil, 16, 1)
	c4, a4 := KMeansVectors(x, d, nil, 16, 4)
	if !slices.Equal(c1, c4) || !slices.Equal(a1, a4) {
		t.Fatal("result depends on the thread count")
	}
	var vecErr float64
	for i := range n {
		for j := range d {
			e := float64(x[i*d+j] - c1[int(a1[i])*d+j])
			vecErr += e * e
		}
	}
	// 16 two-vectors cost 2 bits per element, as do 4 scalar centroids.
	sc := KMeans1D(x, nil, 4)
	if scalar := sse(x, nil, sc); vecErr >= scalar {
		t.Errorf("vector error %g not below scalar 2-bit error %g", vecErr, scalar)
	}
	few := []float32{1, 2, 1, 2, 3, 4, 5, 6}
	c, a := KMeansVectors(few, 2, nil, 8, 2)
	for i := range 4 {
		for j := range 2 {
			if c[int(a[i])*2+j] != few[i*2+j] {
				t.Fatalf("vectors %v not reproduced: centroids %v assign %v", few, c, a)
			}
		}
	}
}

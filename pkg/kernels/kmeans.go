package kernels

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// MaxExactKMeansPoints is how many distinct values KMeans1D clusters by
// exact dynamic programming; above it the programme runs over as many
// equal-count runs of the sorted values and Lloyd's iteration refines the
// result on every value.
const MaxExactKMeansPoints = 4096

// maxLloydSteps bounds the 1-D refinement; each step is exact and the
// cost never rises, so it stops far earlier, when no centroid moves.
const maxLloydSteps = 500

// Vector k-means stops when no assignment changes, when a step lowers the
// squared error by less than vectorSettled of it, or after maxVectorSteps
// steps: a step costs n·k·d multiply-adds, and the last steps of Lloyd's
// iteration move a few vectors between neighbouring centroids for a
// vanishing gain (300 000 seeded normal 2-vectors, 16 centroids: 39 steps
// to settle at 1e-4, 77 at 1e-5).
const (
	maxVectorSteps = 100
	vectorSettled  = 1e-4
)

// KMeans1D returns at most k centroids, ascending, minimising the weighted
// squared error Σ w_i (x_i − c(x_i))² with each value taken to its nearest
// centroid; w nil weighs every value 1. The result is optimal when x has
// at most MaxExactKMeansPoints distinct values: the clusters of an optimal
// 1-D solution are contiguous runs of the sorted values, so a dynamic
// programme over cluster counts and run ends finds it (with the
// divide-and-conquer speed-up that the monotone split points allow). With
// fewer than k distinct values the centroids are those values. Ties and
// sums run in a fixed order: the result depends on the data only.
func KMeans1D(x, w []float32, k int) []float32 {
	pts := sortedPoints(x, w)
	if len(pts.x) == 0 || k <= 0 {
		return nil
	}
	if len(pts.x) <= k {
		return slices.Clone(pts.x)
	}
	// Units of the programme: single values, or equal-count runs.
	units := len(pts.x)
	if units > MaxExactKMeansPoints {
		units = MaxExactKMeansPoints
	}
	ends := make([]int, units) // ends[u] is one past the last value of unit u
	for u := range units {
		ends[u] = (u + 1) * len(pts.x) / units
	}
	starts := func(u int) int {
		if u == 0 {
			return 0
		}
		return ends[u-1]
	}
	cost := func(a, b int) float64 { return pts.cost(starts(a), ends[b]) }
	k = min(k, units)
	prev := make([]float64, units)
	for i := range units {
		prev[i] = cost(0, i)
	}
	// split[j][i]: first unit of the last of j+1 clusters covering 0..i.
	split := make([][]int32, k)
	split[0] = make([]int32, units)
	cur := make([]float64, units)
	for j := 1; j < k; j++ {
		split[j] = make([]int32, units)
		for i := range j {
			cur[i] = math.Inf(1)
		}
		var solve func(lo, hi, optLo, optHi int)
		solve = func(lo, hi, optLo, optHi int) {
			if lo > hi {
				return
			}
			mid := (lo + hi) / 2
			best, arg := math.Inf(1), max(optLo, j)
			for m := max(optLo, j); m <= min(mid, optHi); m++ {
				if c := prev[m-1] + cost(m, mid); c < best {
					best, arg = c, m
				}
			}
			cur[mid], split[j][mid] = best, int32(arg)
			solve(lo, mid-1, optLo, arg)
			solve(mid+1, hi, arg, optHi)
		}
		solve(j, units-1, j, units-1)
		prev, cur = cur, prev
	}
	c := make([]float32, 0, k)
	for j, end := k-1, units-1; j >= 0; j-- {
		first := int(split[j][end])
		c = append(c, pts.mean(starts(first), ends[end]))
		end = first - 1
	}
	slices.Reverse(c)
	if units < len(pts.x) {
		c = pts.lloyd(c)
	}
	return c
}

// NearestSorted returns the index of the centroid of ascending c nearest
// to v (the lower one on a tie).
func NearestSorted(c []float32, v float32) int {
	i := sort.Search(len(c), func(i int) bool { return c[i] >= v })
	switch {
	case i == 0:
		return 0
	case i == len(c):
		return len(c) - 1
	case v-c[i-1] <= c[i]-v:
		return i - 1
	}
	return i
}

// points are distinct sorted values with their total weights and prefix
// sums (float64, about the weighted mean) for O(1) cluster costs.
type points struct {
	x          []float32
	p0, p1, p2 []float64 // prefix sums of w, w·(x−mu), w·(x−mu)²
	mu         float64
}

func sortedPoints(x, w []float32) *points {
	type xw struct{ x, w float32 }
	finite := func(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }
	var all []xw
	if w == nil {
		// Unweighted: sorting the values alone is several times faster.
		vals := make([]float32, 0, len(x))
		for _, v := range x {
			if finite(v) {
				vals = append(vals, v)
			}
		}
		slices.Sort(vals)
		all = make([]xw, len(vals))
		for i, v := range vals {
			all[i] = xw{v, 1}
		}
	} else {
		all = make([]xw, 0, len(x))
		for i, v := range x {
			if finite(v) {
				all = append(all, xw{v, w[i]})
			}
		}
		slices.SortFunc(all, func(a, b xw) int {
			if c := cmp.Compare(a.x, b.x); c != 0 {
				return c
			}
			return cmp.Compare(a.w, b.w)
		})
	}
	p := &points{}
	var ws []float64
	var sw, swx float64
	for _, e := range all {
		if n := len(p.x); n > 0 && p.x[n-1] == e.x {
			ws[n-1] += float64(e.w)
		} else {
			p.x = append(p.x, e.x)
			ws = append(ws, float64(e.w))
		}
		sw += float64(e.w)
		swx += float64(e.w) * float64(e.x)
	}
	if sw > 0 {
		p.mu = swx / sw
	}
	n := len(p.x)
	p.p0, p.p1, p.p2 = make([]float64, n+1), make([]float64, n+1), make([]float64, n+1)
	for i, v := range p.x {
		d := float64(v) - p.mu
		p.p0[i+1] = p.p0[i] + ws[i]
		p.p1[i+1] = p.p1[i] + ws[i]*d
		p.p2[i+1] = p.p2[i] + ws[i]*d*d
	}
	return p
}

// cost is the weighted squared error of values a..b−1 about their mean.
func (p *points) cost(a, b int) float64 {
	w := p.p0[b] - p.p0[a]
	if w <= 0 {
		return 0
	}
	s := p.p1[b] - p.p1[a]
	return max(p.p2[b]-p.p2[a]-s*s/w, 0)
}

// mean is the weighted mean of values a..b−1 (their midpoint when they
// weigh nothing).
func (p *points) mean(a, b int) float32 {
	w := p.p0[b] - p.p0[a]
	if w <= 0 {
		return float32((float64(p.x[a]) + float64(p.x[b-1])) / 2)
	}
	return float32(p.mu + (p.p1[b]-p.p1[a])/w)
}

// lloyd runs Lloyd's iteration from ascending centroids c: the values
// nearest each centroid form contiguous runs, found by binary search, and
// the prefix sums give each run's mean. Empty clusters are dropped.
func (p *points) lloyd(c []float32) []float32 {
	bounds := make([]int, 0, len(c)+1)
	for range maxLloydSteps {
		bounds = bounds[:0]
		bounds = append(bounds, 0)
		for i := 0; i+1 < len(c); i++ {
			mid := float32((float64(c[i]) + float64(c[i+1])) / 2)
			// Values equal to the midpoint go to the lower centroid (NearestSorted).
			bounds = append(bounds, sort.Search(len(p.x), func(j int) bool { return p.x[j] > mid }))
		}
		bounds = append(bounds, len(p.x))
		next := make([]float32, 0, len(c))
		for i := 0; i+1 < len(bounds); i++ {
			if bounds[i] < bounds[i+1] {
				next = append(next, p.mean(bounds[i], bounds[i+1]))
			}
		}
		if slices.Equal(next, c) {
			break
		}
		c = next
	}
	return c
}

// KMeansVectors clusters the n = len(x)/d vectors of x (row-major, weights
// w per vector, nil for ones) into at most k centroids of length d, and
// returns them (row-major) with each vector's centroid. The start is
// deterministic: the vectors are projected on their principal direction
// (power iteration from the all-ones vector) and the optimal 1-D clusters
// of the projections give the first assignment; Lloyd's iteration then
// runs until it settles (maxVectorSteps). Assignment steps run on threads; sums
// run in vector order, so the result does not depend on threads.
func KMeansVectors(x []float32, d int, w []float32, k, threads int) (centroids []float32, assign []int32) {
	n := len(x) / d
	assign = make([]int32, n)
	if n == 0 || k <= 0 {
		return nil, assign
	}
	weight := func(i int) float64 {
		if w == nil {
			return 1
		}
		return float64(w[i])
	}
	// Principal direction of the centred vectors.
	mean := make([]float64, d)
	var sw float64
	for i := range n {
		wi := weight(i)
		sw += wi
		for j := range d {
			mean[j] += wi * float64(x[i*d+j])
		}
	}
	for j := range mean {
		if sw > 0 {
			mean[j] /= sw
		}
	}
	dir := make([]float64, d)
	for j := range dir {
		dir[j] = 1 / math.Sqrt(float64(d))
	}
	next := make([]float64, d)
	for range 30 {
		clear(next)
		for i := range n {
			var dot float64
			for j := range d {
				dot += (float64(x[i*d+j]) - mean[j]) * dir[j]
			}
			dot *= weight(i)
			for j := range d {
				next[j] += dot * (float64(x[i*d+j]) - mean[j])
			}
		}
		var norm float64
		for _, v := range next {
			norm += v * v
		}
		if norm == 0 {
			break
		}
		norm = math.Sqrt(norm)
		for j := range dir {
			dir[j] = next[j] / norm
		}
	}
	proj := make([]float32, n)
	for i := range n {
		var dot float64
		for j := range d {
			dot += float64(x[i*d+j]) * dir[j]
		}
		proj[i] = float32(dot)
	}
	c1 := KMeans1D(proj, w, k)
	for i, v := range proj {
		assign[i] = int32(NearestSorted(c1, v))
	}
	k = len(c1)
	centroids = make([]float32, k*d)
	sums := make([]float64, k*d)
	counts := make([]float64, k)
	update := func() {
		clear(sums)
		clear(counts)
		for i, a := range assign {
			wi := weight(i)
			counts[a] += wi
			for j := range d {
				sums[int(a)*d+j] += wi * float64(x[i*d+j])
			}
		}
		for c := range k {
			if counts[c] > 0 { // an emptied cluster keeps its centroid
				for j := range d {
					centroids[c*d+j] = float32(sums[c*d+j] / counts[c])
				}
			}
		}
	}
	update()
	changed := make([]bool, n)
	norms := make([]float64, k)
	best := make([]float64, n) // ‖c‖² − 2·x·c of each vector's centroid
	var sumX2 float64          // Σ w·‖x‖², which turns Σ w·best into the error
	for i := range n {
		for j := range d {
			v := float64(x[i*d+j])
			sumX2 += weight(i) * v * v
		}
	}
	prevErr := math.Inf(1)
	for range maxVectorSteps {
		// ‖x−c‖² ranks as ‖c‖² − 2·x·c.
		for c := range k {
			var s float64
			for j := range d {
				v := float64(centroids[c*d+j])
				s += v * v
			}
			norms[c] = s
		}
		Parallel(threads, n, 4096, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v := x[i*d : (i+1)*d]
				low, arg := math.Inf(1), assign[i]
				for c := range k {
					row := centroids[c*d : (c+1)*d]
					var dot float64
					for j, e := range v {
						dot += float64(e) * float64(row[j])
					}
					if dist := norms[c] - 2*dot; dist < low {
						low, arg = dist, int32(c)
					}
				}
				changed[i] = arg != assign[i]
				assign[i] = arg
				best[i] = low
			}
		})
		moved := 0
		sqErr := sumX2 // summed in vector order: the same for any threads
		for i, c := range changed {
			if c {
				moved++
			}
			sqErr += weight(i) * best[i]
		}
		if moved == 0 {
			break
		}
		update()
		if prevErr-sqErr <= vectorSettled*sqErr {
			break
		}
		prevErr = sqErr
	}
	return centroids, assign
}

package passes

import (
	"cmp"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/quant"
)

// gptqBlock is the panel width of the blocked factorizations and of
// GPTQ's lazy batches: wide enough that the updates outside a panel run
// in the SGEMM kernels, narrow enough that the scalar work inside one
// stays a small share.
const gptqBlock = 128

// gramChunkRows bounds the rows whose products one SGEMM sums in float32
// before they join the float64 sum: the float32 partial sums stay short.
const gramChunkRows = 512

// threadCount resolves a thread setting (0: one per CPU).
func threadCount(threads int) int {
	if threads <= 0 {
		return goruntime.GOMAXPROCS(0)
	}
	return threads
}

// gramAccumulator sums XᵀX (K×K, float64) over the rows of one value,
// batch by batch: memory holds K² numbers, never the activations.
type gramAccumulator struct {
	value   string
	k       int
	sum     []float64 // the upper triangle (j ≥ i) is kept
	rows    int
	threads int
	scratch []float32
	// users counts the layers still to round from this sum; factors
	// holds what they share, computed by the first of them.
	users   int
	factors *hessianFactors
}

// add accumulates the rows of x (its last axis of size k). The products
// run in the SGEMM kernels, chunks of gramChunkRows rows summed in
// float32 and added into the float64 sum, column panel by column panel
// of the upper triangle. SGEMM computes each element by the same
// operations for any thread count, so the sum does not depend on it.
func (g *gramAccumulator) add(x []float32, shape []int) error {
	if len(shape) == 0 || shape[len(shape)-1] != g.k {
		return fmt.Errorf("value %q of shape %v: want %d features on the last axis", g.value, shape, g.k)
	}
	k := g.k
	rows := len(x) / k
	for r0 := 0; r0 < rows; r0 += gramChunkRows {
		r1 := min(rows, r0+gramChunkRows)
		xs := x[r0*k : r1*k]
		g.product(func(c []float32, j0, j1, threads int) {
			// Column panel [j0, j1) of rows [0, j1): the upper triangle
			// and a little of the lower, which is not read.
			kernels.SgemmParallel(threads, true, false, j1, j1-j0, r1-r0, 1, xs, k, xs[j0:], k, 0, c[j0:], k)
		})
		g.flush()
	}
	g.rows += rows
	return nil
}

// addColumns accumulates the columns of the k×cols matrices in ps, each
// with rows ld apart (a convolution's patches, image by image: feature by
// output position), as add accumulates rows: up to gramChunkRows columns,
// across the matrices, summed in float32 before they join the float64 sum.
func (g *gramAccumulator) addColumns(ps [][]float32, cols, ld int) {
	k := g.k
	pending := 0
	for _, p := range ps {
		for c0 := 0; c0 < cols; c0 += gramChunkRows {
			c1 := min(cols, c0+gramChunkRows)
			if pending > 0 && pending+c1-c0 > gramChunkRows {
				g.flush()
				pending = 0
			}
			beta := float32(min(pending, 1))
			g.product(func(c []float32, j0, j1, threads int) {
				kernels.SgemmParallel(threads, false, true, j1, j1-j0, c1-c0, 1, p[c0:], ld, p[j0*ld+c0:], ld, beta, c[j0:], k)
			})
			pending += c1 - c0
		}
	}
	if pending > 0 {
		g.flush()
	}
	g.rows += cols * len(ps)
}

// smallGramFeatures is the width below which a gram is summed by
// addColumnsDirect: narrower than one tile of the SGEMM kernels, whose
// packing would cost more than the products.
const smallGramFeatures = 32

// addColumnsDirect accumulates the columns of the k×cols matrices in ps
// (rows ld apart) as addColumns does, each element of XᵀX a float64 dot
// product of two rows: for the narrow grams of depthwise and stem
// convolutions, with no scratch.
func (g *gramAccumulator) addColumnsDirect(ps [][]float32, cols, ld int) {
	k := g.k
	for _, p := range ps {
		for a := range k {
			ra := p[a*ld : a*ld+cols]
			for b := a; b < k; b++ {
				g.sum[a*k+b] += dot(ra, p[b*ld:b*ld+cols])
			}
		}
	}
	g.rows += cols * len(ps)
}

// dot is Σ a[i]·b[i] in float64 over len(a) ≤ len(b), in four
// interleaved partial sums (independent chains the CPU overlaps), added
// in a fixed order: the patch grams' float32 rows and the factorization's
// float64 ones.
func dot[T float32 | float64](a, b []T) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// product writes (or adds to) the scratch's panels: fn(c, j0, j1,
// threads) computes rows [0, j1) of column panel [j0, j1) of a chunk's
// XᵀX into c (k×k).
func (g *gramAccumulator) product(fn func(c []float32, j0, j1, threads int)) {
	threads := threadCount(g.threads)
	if g.scratch == nil {
		g.scratch = make([]float32, g.k*g.k)
	}
	for j0 := 0; j0 < g.k; j0 += gptqBlock {
		fn(g.scratch, j0, min(g.k, j0+gptqBlock), threads)
	}
}

// flush adds the scratch's upper triangle into the float64 sum.
func (g *gramAccumulator) flush() {
	k, c := g.k, g.scratch
	kernels.Parallel(threadCount(g.threads), k, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out, in := g.sum[i*k+i:(i+1)*k], c[i*k+i:(i+1)*k]
			for j, v := range in {
				out[j] += float64(v)
			}
		}
	})
}

// full returns the symmetric matrix (the sum keeps the upper triangle).
func (g *gramAccumulator) full() []float64 {
	h := slices.Clone(g.sum)
	mirrorUpper(h, g.k)
	return h
}

// mirrorTile is the side of the tiles mirrorUpper copies: a tile's rows
// and columns stay in cache, where element-by-element copies across the
// diagonal of a large matrix miss on every write.
const mirrorTile = 64

// mirrorUpper copies the upper triangle of the k×k matrix a onto its
// lower triangle, tile by tile.
func mirrorUpper[T float32 | float64](a []T, k int) {
	for i0 := 0; i0 < k; i0 += mirrorTile {
		for j0 := i0; j0 < k; j0 += mirrorTile {
			for i := i0; i < min(k, i0+mirrorTile); i++ {
				for j := max(j0, i+1); j < min(k, j0+mirrorTile); j++ {
					a[j*k+i] = a[i*k+j]
				}
			}
		}
	}
}

// release drops the scratch buffer once the data is in.
func (g *gramAccumulator) release() { g.scratch = nil }

// hessianFactors is what every layer reading one value needs from its
// XᵀX: H itself in float32 (for the weighted errors) and the upper
// triangular U with (H + λI)⁻¹ = UᵀU (for the rounding).
type hessianFactors struct {
	h32 []float32
	u   []float32
	// perm, when set, is the order the factors' rows and columns take
	// the features in: row i is feature perm[i].
	perm []int
}

// factorize returns g's factors for damping damp, computed once; with
// actOrder, of the features in decreasing order of H's diagonal (perm).
func (g *gramAccumulator) factorize(damp float64, actOrder bool) (*hessianFactors, error) {
	if g.factors != nil {
		return g.factors, nil
	}
	k := g.k
	var perm []int
	if actOrder {
		perm = g.actOrder()
	}
	h32 := make([]float32, k*k)
	for i := range k {
		for j := i; j < k; j++ {
			h32[i*k+j] = float32(g.sum[i*k+j])
		}
	}
	mirrorUpper(h32, k)
	// The factorization works in the sum, which nothing reads after.
	u, err := dampedInverseFactor(g.sum, k, damp, g.threads)
	g.sum = nil
	if err != nil {
		return nil, err
	}
	g.factors = &hessianFactors{h32: h32, u: u, perm: perm}
	return g.factors, nil
}

// actOrder returns the features in decreasing order of H's diagonal
// (ties in feature order) and permutes the sum to that order: GPTQ then
// rounds the features that weigh most first, while the most features
// remain to take their errors (the "act-order" of Frantar et al.). The
// qparams are prepare's, fixed before any rounding, so the order changes
// only which codes are chosen, never the grid.
func (g *gramAccumulator) actOrder() []int {
	k := g.k
	perm := make([]int, k)
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int { return cmp.Compare(g.sum[b*k+b], g.sum[a*k+a]) })
	// In place, with one row aside (a second K×K matrix would be a
	// decoder's largest allocation here): mirrored, the rows are moved
	// along the permutation's cycles, then each row is gathered.
	mirrorUpper(g.sum, k)
	row := func(a int) []float64 { return g.sum[a*k : (a+1)*k] }
	moved := make([]bool, k)
	aside := make([]float64, k)
	for start := range k {
		if moved[start] {
			continue
		}
		copy(aside, row(start))
		for a := start; ; a = perm[a] {
			moved[a] = true
			if perm[a] == start {
				copy(row(a), aside)
				break
			}
			copy(row(a), row(perm[a]))
		}
	}
	for a := range k {
		r := row(a)
		for b, j := range perm {
			aside[b] = r[j]
		}
		copy(r, aside)
	}
	return perm
}

// done marks one user of g finished; the last frees the sum and factors.
func (g *gramAccumulator) done() {
	g.users--
	if g.users <= 0 {
		g.sum, g.factors = nil, nil
	}
}

// dampedInverseFactor returns the upper triangular U (float32, k×k
// row-major) with (H + λI)⁻¹ = UᵀU for the symmetric H whose upper
// triangle is upper, λ = damp·mean(diag H). A feature the data never
// activates (zero diagonal) gets 1 there: its error costs nothing and
// spreads nowhere. U comes from one Cholesky factor: with J the
// reversal, JHJ = MMᵀ (M lower) gives H = RRᵀ for R = JMJ upper, and
// U = R⁻¹ = JM⁻¹J.
//
// The factorization works in upper, which it overwrites: it reads the
// lower triangle of JHJ, which is the reversed upper triangle of H, so H's
// lower triangle is never read.
func dampedInverseFactor(upper []float64, k int, damp float64, threads int) ([]float32, error) {
	h := upper
	var mean float64
	for i := range k {
		if h[i*k+i] == 0 {
			h[i*k+i] = 1
		}
		mean += h[i*k+i]
	}
	mean /= float64(k)
	if math.IsNaN(mean) || math.IsInf(mean, 0) {
		// The layer's calibration inputs held NaN or ±Inf (or values whose
		// squares overflow): no rounding can be fitted to them.
		return nil, fmt.Errorf("the Hessian of the calibration inputs is not finite (mean diagonal %g): the inputs hold NaN, ±Inf or values too large to square", mean)
	}
	for i := range k {
		h[i*k+i] += damp * mean
	}
	slices.Reverse(h) // JHJ, as flat indices i·k+j ↔ k²−1−(i·k+j)
	if err := choleskyLower(h, k, threads); err != nil {
		return nil, fmt.Errorf("the dampened Hessian: %w", err)
	}
	u := invertLower(h, k, threads)
	slices.Reverse(u)
	return u, nil
}

// choleskyLower factors a symmetric positive definite a = LLᵀ in place
// (L in the lower triangle; the upper is left as is), panel by panel:
// each panel of gptqBlock columns is factored in float64 and its update
// of the rows below runs in the SGEMM kernels, in strips.
func choleskyLower(a []float64, k, threads int) error {
	threads = threadCount(threads)
	const nb = gptqBlock
	var panel, prod []float32
	for j0 := 0; j0 < k; j0 += nb {
		j1 := min(k, j0+nb)
		for j := j0; j < j1; j++ {
			rj := a[j*k+j0 : j*k+j]
			s := a[j*k+j] - dot(rj, rj)
			if !(s > 0) || math.IsInf(s, 0) {
				return fmt.Errorf("not positive definite at row %d of %d", j, k)
			}
			d := math.Sqrt(s)
			a[j*k+j] = d
			for i := j + 1; i < j1; i++ {
				a[i*k+j] = (a[i*k+j] - dot(a[i*k+j0:i*k+j], rj)) / d
			}
		}
		if j1 == k {
			break
		}
		// The panel's rows below: L21 = A21 L11⁻ᵀ.
		m, w := k-j1, j1-j0
		panel = slices.Grow(panel[:0], m*w)[:m*w]
		kernels.Parallel(threads, m, 16, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				i := j1 + r
				for j := j0; j < j1; j++ {
					v := (a[i*k+j] - dot(a[i*k+j0:i*k+j], a[j*k+j0:j*k+j])) / a[j*k+j]
					a[i*k+j] = v
					panel[r*w+j-j0] = float32(v)
				}
			}
		})
		// The trailing lower triangle: A22 −= L21 L21ᵀ, strip by strip.
		for r0 := 0; r0 < m; r0 += nb {
			r1 := min(m, r0+nb)
			prod = slices.Grow(prod[:0], (r1-r0)*r1)[:(r1-r0)*r1]
			kernels.SgemmParallel(threads, false, true, r1-r0, r1, w, 1, panel[r0*w:], w, panel, w, 0, prod, r1)
			for r := r0; r < r1; r++ {
				row := a[(j1+r)*k+j1 : (j1+r)*k+j1+r+1]
				p := prod[(r-r0)*r1:]
				for c := range row {
					row[c] -= float64(p[c])
				}
			}
		}
	}
	return nil
}

// invertLower returns L⁻¹ (float32, k×k, lower) of the lower triangular
// L in l's lower triangle, row panel by row panel: the panel's diagonal
// block by substitution in float64, the block left of it as
// −L_ii⁻¹ (L_i,<i · X_<i,<i) in the SGEMM kernels.
func invertLower(l []float64, k, threads int) []float32 {
	threads = threadCount(threads)
	const nb = gptqBlock
	x := make([]float32, k*k)
	var strip, prod []float32
	diag := make([]float64, nb*nb)
	diag32 := make([]float32, nb*nb)
	for i0 := 0; i0 < k; i0 += nb {
		i1 := min(k, i0+nb)
		w := i1 - i0
		clear(diag)
		clear(diag32)
		for j := range w {
			diag[j*w+j] = 1 / l[(i0+j)*k+i0+j]
			for i := j + 1; i < w; i++ {
				var s float64
				for p := j; p < i; p++ {
					s += l[(i0+i)*k+i0+p] * diag[p*w+j]
				}
				diag[i*w+j] = -s / l[(i0+i)*k+i0+i]
			}
		}
		for i := range w {
			for j := 0; j <= i; j++ {
				x[(i0+i)*k+i0+j] = float32(diag[i*w+j])
				diag32[i*w+j] = float32(diag[i*w+j])
			}
		}
		if i0 == 0 {
			continue
		}
		strip = slices.Grow(strip[:0], w*i0)[:w*i0]
		for i := range w {
			for p := range i0 {
				strip[i*i0+p] = float32(l[(i0+i)*k+p])
			}
		}
		prod = slices.Grow(prod[:0], w*i0)[:w*i0]
		kernels.SgemmParallel(threads, false, false, w, i0, i0, 1, strip, i0, x, k, 0, prod, i0)
		kernels.SgemmParallel(threads, false, false, w, i0, w, -1, diag32, w, prod, i0, 0, x[i0*k:], k)
	}
	return x
}

// gptqRound returns the layer's weight rounded by GPTQ onto the plan's
// grid, as dequantized values (each one a code of the plan's qparams),
// for U with H⁻¹ = UᵀU. It is the lazy-batch form: the features are
// rounded gptqBlock at a time, each rounding error spread at once over
// the rest of its block, and the block's errors spread over all later
// features by one product in the SGEMM kernels. The outputs are
// independent rows, split among the threads. It writes l's elements of
// out (the whole weight's length), and no others.
func gptqRound(l *gptqLayer, u []float32, out []float32) error {
	k, n := l.k, l.n
	threads := threadCount(l.threads)
	tp := l.plan
	grid, _ := tp.Spec.IntGrid()
	layout, err := quant.NewLayout(l.shape, tp.Axis, tp.BlockSize)
	if err != nil {
		return err
	}
	const nb = gptqBlock
	w := make([]float32, n*k) // output-major working copy
	for o := range n {
		for i := range k {
			w[o*k+i] = l.w[l.at(i, o)]
		}
	}
	errs := make([]float32, n*nb)
	for i0 := 0; i0 < k; i0 += nb {
		i1 := min(k, i0+nb)
		kernels.Parallel(threads, n, 8, func(lo, hi int) {
			for o := lo; o < hi; o++ {
				row := w[o*k : (o+1)*k]
				for i := i0; i < i1; i++ {
					idx := l.at(i, o)
					g := layout.Of(idx)
					scale, zp := tp.Params.Scales[g], int64(tp.Params.ZeroPoints[g])
					q := quant.Dequantize(quant.Int(row[i], scale, zp, grid.QMin, grid.QMax), zp, scale)
					out[idx] = q
					e := (row[i] - q) / u[i*k+i]
					errs[o*nb+i-i0] = e
					ur := u[i*k : (i+1)*k]
					for j := i + 1; j < i1; j++ {
						row[j] -= e * ur[j]
					}
				}
			}
		})
		if i1 < k {
			kernels.SgemmParallel(threads, false, false, n, k-i1, i1-i0, -1, errs, nb, u[i0*k+i1:], k, 1, w[i1:], k)
		}
	}
	return nil
}

// weightedSquare is ‖X(W − Ŵ)‖² = Σₙ δₙᵀ (XᵀX) δₙ over the outputs n, with
// δ = w − q (q nil: ‖XW‖²), for XᵀX as h (float32, k×k): the products
// δᵀH run in the SGEMM kernels a strip of outputs at a time, the sum in
// float64 in a fixed order.
func (l *gptqLayer) weightedSquare(h []float32, w, q []float32) float64 {
	k, n := l.k, l.n
	threads := threadCount(l.threads)
	const strip = 256
	d := make([]float32, min(n, strip)*k)
	t := make([]float32, len(d))
	var s float64
	for o0 := 0; o0 < n; o0 += strip {
		o1 := min(n, o0+strip)
		for o := o0; o < o1; o++ {
			row := d[(o-o0)*k : (o-o0+1)*k]
			for i := range row {
				v := w[l.at(i, o)]
				if q != nil {
					v -= q[l.at(i, o)]
				}
				row[i] = v
			}
		}
		rows := o1 - o0
		kernels.SgemmParallel(threads, false, false, rows, k, k, 1, d, k, h, k, 0, t, k)
		for i, v := range d[:rows*k] {
			s += float64(v) * float64(t[i])
		}
	}
	return s
}

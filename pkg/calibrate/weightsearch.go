package calibrate

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// The weight range search: for every qparam group (block, channel or
// tensor) of a weight on an integer grid, the range whose quantize-
// dequantize round trip has the least squared error. The groups are
// shared among GOMAXPROCS workers, each copying one group at a time into
// a contiguous buffer; candidates are scored in batches by one vector
// kernel pass over the group (kernels.QuantSqErrs), and nothing is
// allocated per group or candidate. For a group whose formula scale is t0
// and whose grid-fitting scale (fitGrid) is tf, the candidates are:
//
//   - the formula's range itself (kept on ties, so clipping must win) and
//     the grid-fitting range;
//   - searchCoarse scales evenly spaced over [½·min(t0, tf), max(t0, tf)]
//     (asymmetric specs: the range shrunk by searchCoarse factors in
//     [½, 1]);
//   - searchRefine scales on each side of the best so far, spaced a
//     fraction of the coarse step (asymmetric: 2·searchRefine+1 each side);
//   - least-squares refits: with the best candidate's codes fixed, the
//     scale Σx·q/Σq² (asymmetric: the affine fit x ≈ a·q + b) has the
//     least error for those codes, and rounding again with it can move
//     codes only to better ones; repeated while it improves, at most
//     searchRefits times.
//
// About 25 candidates per group against the 202 of a plain shrink grid,
// with less error than WeightMSERange's grid on every shared model's
// weights (TestSearchNotWorseThanGridOnSharedModels). Each candidate's scale and
// zero point are the spec's formula's for its range, so what is scored is
// what is written.
const (
	searchCoarse = 16
	searchRefine = 3
	searchRefits = 2
	// searchChunk is the number of groups a worker claims at once.
	searchChunk = 512
)

// groupLayout addresses the elements of each qparam group of a tensor seen
// as [outer, dim, inner] around the quantization axis.
type groupLayout struct {
	outer, dim, inner int
	block             int // elements along the axis per group; dim per channel
	nb                int // groups along the axis per outer index (blocked)
	perChannel        bool
	perTensor         bool
}

func newGroupLayout(shape []int, axis, block int) groupLayout {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if axis < 0 {
		return groupLayout{outer: 1, dim: n, inner: 1, block: n, nb: 1, perTensor: true}
	}
	l := groupLayout{outer: 1, dim: shape[axis], inner: 1}
	for _, d := range shape[:axis] {
		l.outer *= d
	}
	for _, d := range shape[axis+1:] {
		l.inner *= d
	}
	if block <= 0 {
		l.perChannel, l.block, l.nb = true, l.dim, 1
		return l
	}
	l.block, l.nb = block, (l.dim+block-1)/block
	return l
}

// groups is the number of qparam groups.
func (l groupLayout) groups() int {
	switch {
	case l.perTensor:
		return 1
	case l.perChannel:
		return l.dim
	}
	return l.outer * l.nb * l.inner
}

// maxGroup is the largest number of elements in a group.
func (l groupLayout) maxGroup() int {
	switch {
	case l.perTensor:
		return l.dim
	case l.perChannel:
		return l.outer * l.inner
	}
	return l.block
}

// gather copies group g's elements into buf (element order) and returns them.
func (l groupLayout) gather(data []float32, g int, buf []float32) []float32 {
	switch {
	case l.perTensor:
		return data
	case l.perChannel && l.inner == 1:
		// A column of a weight quantized along its last axis.
		buf = buf[:l.outer]
		for o := range buf {
			buf[o] = data[o*l.dim+g]
		}
		return buf
	case l.perChannel:
		buf = buf[:0]
		for o := range l.outer {
			base := (o*l.dim + g) * l.inner
			buf = append(buf, data[base:base+l.inner]...)
		}
		return buf
	}
	i := g % l.inner
	b := (g / l.inner) % l.nb
	o := g / (l.inner * l.nb)
	a0, a1 := b*l.block, min((b+1)*l.block, l.dim)
	buf = buf[:a1-a0]
	p := (o*l.dim+a0)*l.inner + i
	for k := range buf {
		buf[k] = data[p]
		p += l.inner
	}
	return buf
}

// WeightRanges is the mse calculator of weights on an integer grid (and
// of every 4-bit or narrower integer weight): it sets each qparam group's
// [mins[g], maxs[g]] (groups laid out as quant.ParamShape(shape, axis,
// block)) to the range, to hand to the spec's formula, that the search
// finds, and returns the range of the data's finite values (the observed
// range; [0, 0] when there is none). Float grids use WeightMSERange.
func WeightRanges(data []float32, shape []int, axis, block int, s *spec.QuantizationSpec, mins, maxs []float32) (lo, hi float32) {
	l := newGroupLayout(shape, axis, block)
	n := l.groups()
	workers := max(1, min(runtime.GOMAXPROCS(0), (n+searchChunk-1)/searchChunk))
	var next atomic.Int64
	var wg sync.WaitGroup
	los, his := make([]float32, workers), make([]float32, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newRangeSearch(s)
			buf := make([]float32, l.maxGroup())
			wlo, whi := float32(math.Inf(1)), float32(math.Inf(-1))
			for {
				start := int(next.Add(searchChunk)) - searchChunk
				if start >= n {
					break
				}
				for g := start; g < min(start+searchChunk, n); g++ {
					x := l.gather(data, g, buf)
					glo, ghi, ok := finiteRange(x)
					if !ok {
						mins[g], maxs[g] = 0, 0
						continue
					}
					wlo, whi = min(wlo, glo), max(whi, ghi)
					mins[g], maxs[g] = r.best(x, glo, ghi)
				}
			}
			los[w], his[w] = wlo, whi
		}()
	}
	wg.Wait()
	lo, hi = slices.Min(los), slices.Max(his)
	if lo > hi {
		return 0, 0
	}
	return lo, hi
}

// finiteRange is the range of x's finite values (the vector kernel's,
// −0 read as +0); ok is false when it has none. (A group with non-finite
// values is searched on all of them: the written model cannot represent
// those anyway.)
func finiteRange(x []float32) (lo, hi float32, ok bool) {
	lo, hi, _, _ = kernels.FiniteMinMax(x)
	return lo, hi, lo <= hi
}

// rangeSearch scores candidate ranges of one group on an integer grid, in
// batches: kernels.QuantSqErrs scores a batch in one pass over the group.
type rangeSearch struct {
	s          *spec.QuantizationSpec
	grid       spec.IntGrid
	qmin, qmax float32
	batch      []candidate
	inv, scale []float32
	lo, hi     []float32
	errs       []float32
}

func newRangeSearch(s *spec.QuantizationSpec) *rangeSearch {
	g, _ := s.IntGrid()
	return &rangeSearch{s: s, grid: g, qmin: float32(g.QMin), qmax: float32(g.QMax)}
}

// fitGrid is, for a symmetric grid, the range [-r, r] whose formula scale
// r/((qmax−qmin)/2) maps the group's extremes onto the ends of the grid
// without clamping: scale = max(hi/(qmax−zp), lo/(qmin−zp)). ok is false
// when the formula's scale already fits.
func fitGrid(lo, hi float32, g spec.IntGrid) (float32, float32, bool) {
	sc, zp := g.QParam(lo, hi)
	up, down := float64(g.QMax)-float64(zp), float64(g.QMin)-float64(zp)
	var fit float64
	if hi > 0 && up > 0 {
		fit = max(fit, float64(hi)/up)
	}
	if lo < 0 && down < 0 {
		fit = max(fit, float64(lo)/down)
	}
	if fit == 0 || float32(fit) == sc {
		return 0, 0, false
	}
	r := float32(fit * float64(g.QMax-g.QMin) / 2)
	return -r, r, true
}

// candidate is a range, the qparams the spec's formula gives it, and its
// squared error.
type candidate struct {
	lo, hi float32
	scale  float32
	zp     int32
	err    float64
}

// add queues the range [lo, hi]; a range that is not finite is dropped.
func (r *rangeSearch) add(lo, hi float32) {
	if !(lo <= hi) || lo-lo != 0 || hi-hi != 0 {
		return
	}
	sc, zp := r.grid.QParam(lo, hi)
	z := float32(zp)
	r.batch = append(r.batch, candidate{lo: lo, hi: hi, scale: sc, zp: zp})
	r.inv = append(r.inv, 1/sc)
	r.scale = append(r.scale, sc)
	r.lo = append(r.lo, r.qmin-z)
	r.hi = append(r.hi, r.qmax-z)
}

// score evaluates the queued candidates on g; the first with the least
// error becomes best if it has less error than best. It reports whether
// one did.
func (r *rangeSearch) score(g []float32, best *candidate) bool {
	n := len(r.batch)
	if n == 0 {
		return false
	}
	r.errs = append(r.errs[:0], r.scale...) // sized like the batch
	kernels.QuantSqErrs(g, r.inv, r.scale, r.lo, r.hi, r.errs)
	improved := false
	for i, c := range r.batch {
		if e := float64(r.errs[i]); e < best.err {
			c.err = e
			*best = c
			improved = true
		}
	}
	r.batch, r.inv, r.scale, r.lo, r.hi = r.batch[:0], r.inv[:0], r.scale[:0], r.lo[:0], r.hi[:0]
	return improved
}

// roundMagic is 1.5·2²³: adding it to a float32 of magnitude below 2²²
// leaves no fraction bits, so the addition rounds to the nearest integer,
// ties to even, whatever the sign.
const roundMagic = float32(3 << 22)

// code is x's code minus the zero point under (scale, zp), as the kernel
// computes it: x·(1/scale) clamped to the grid and rounded half to even.
func (r *rangeSearch) code(x, inv, z float32) float32 {
	return (min(max(x*inv, r.qmin-z), r.qmax-z) + roundMagic) - roundMagic
}

// refit is the least-squares scale for g's codes under (scale, zp):
// Σx·q/Σq² with q the codes minus the zero point; 0 when all codes are 0.
func (r *rangeSearch) refit(g []float32, scale float32, zp int32) float32 {
	inv, z := 1/scale, float32(zp)
	var xq, qq float64
	for _, x := range g {
		q := float64(r.code(x, inv, z))
		xq += float64(x) * q
		qq += q * q
	}
	if qq == 0 {
		return 0
	}
	return float32(xq / qq)
}

// refitAffine is the least-squares affine map for g's codes under
// (scale, zp): x ≈ a·q + b, returned as the range [a·qmin + b, a·qmax + b]
// whose asymmetric formula gives scale a and zero point −b/a rounded.
func (r *rangeSearch) refitAffine(g []float32, scale float32, zp int32) (lo, hi float32, ok bool) {
	inv, z := 1/scale, float32(zp)
	var sq, sx, sqq, sxq float64
	for _, x := range g {
		q := float64(r.code(x, inv, z) + z)
		sq += q
		sx += float64(x)
		sqq += q * q
		sxq += float64(x) * q
	}
	n := float64(len(g))
	det := n*sqq - sq*sq
	if det <= 0 {
		return 0, 0, false
	}
	a := (n*sxq - sq*sx) / det
	b := (sx - a*sq) / n
	if !(a > 0) {
		return 0, 0, false
	}
	return float32(a*float64(r.qmin) + b), float32(a*float64(r.qmax) + b), true
}

// best returns the range to hand to the spec's formula for group g with
// data range [lo, hi].
func (r *rangeSearch) best(g []float32, lo, hi float32) (float32, float32) {
	best := candidate{lo: lo, hi: hi, err: math.Inf(1)}
	r.add(lo, hi)
	if r.s.QScheme == spec.Asymmetric {
		// The range shrunk by factors f in [½, 1], then finer around the best.
		step := float32(0.5) / searchCoarse
		for k := 1; k <= searchCoarse; k++ {
			f := 1 - step*float32(k)
			r.add(lo*f, hi*f)
		}
		if r.score(g, &best); best.err == 0 {
			return best.lo, best.hi
		}
		center := float32(1)
		if lo < 0 && best.lo < 0 {
			center = best.lo / lo
		} else if hi > 0 && best.hi > 0 {
			center = best.hi / hi
		}
		for j := 1; j <= 2*searchRefine+1; j++ {
			d := step * float32(j) / (2*searchRefine + 2)
			r.add(lo*(center-d), hi*(center-d))
			if center+d < 1 {
				r.add(lo*(center+d), hi*(center+d))
			}
		}
		r.score(g, &best)
		for range searchRefits {
			l, h, ok := r.refitAffine(g, best.scale, best.zp)
			if !ok {
				break
			}
			if r.add(l, h); !r.score(g, &best) {
				break
			}
		}
		return best.lo, best.hi
	}
	// Symmetric: a scale t is the range ±t·(qmax−qmin)/2.
	half := (r.qmax - r.qmin) / 2
	at := func(t float32) {
		if t > 0 {
			r.add(-t*half, t*half)
		}
	}
	t0, _ := r.grid.QParam(lo, hi)
	tf := t0
	if fl, fh, ok := fitGrid(lo, hi, r.grid); ok {
		tf, _ = r.grid.QParam(fl, fh)
		r.add(fl, fh)
	}
	tLo, tHi := min(t0, tf)/2, max(t0, tf)
	step := (tHi - tLo) / searchCoarse
	for k := 1; k <= searchCoarse; k++ {
		at(tHi - step*float32(k))
	}
	if r.score(g, &best); best.err == 0 {
		return best.lo, best.hi
	}
	center := best.scale
	for j := 1; j <= searchRefine; j++ {
		d := step * float32(j) / (searchRefine + 1)
		at(center - d)
		at(center + d)
	}
	r.score(g, &best)
	for range searchRefits {
		if at(r.refit(g, best.scale, best.zp)); !r.score(g, &best) {
			break
		}
	}
	return best.lo, best.hi
}

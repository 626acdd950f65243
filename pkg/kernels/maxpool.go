package kernels

import "sync"

// Pool computes max or average pooling of c planes of x (c × InSize) into
// y (c × OutSize) over the window of g:
//
//	for ch < c, output position op:
//	    window = { ip = op·Strides − PadBegin + kp·Dilations : kp < Kernel }
//	    max:     y = max of x[ip] over ip inside the input (−Inf if none)
//	    average: y = Σ x[ip] inside / count, where count is the number of
//	             inside positions, or, with countPad, the number of window
//	             positions that fall inside the padded input (padEnd)
//
// When argmax is non-nil (max pooling) it receives the flat index ch·InSize+ip
// of each maximum within the planes.
func Pool(g *ConvGeom, c int, x, y []float32, isMax, countPad bool, padEnd []int, argmax []int64) {
	nd := len(g.In)
	if nd == 2 {
		pool2D(g, 0, c, x, y, isMax, countPad, padEnd, argmax)
		return
	}
	poolND(g, c, x, y, isMax, countPad, padEnd, argmax)
}

// poolND is Pool for any rank, by the definition.
func poolND(g *ConvGeom, c int, x, y []float32, isMax, countPad bool, padEnd []int, argmax []int64) {
	nd := len(g.In)
	ks, os, is := g.KernelSize(), g.OutSize(), g.InSize()
	kp := make([]int, nd)
	opos := make([]int, nd)
	for o := 0; o < os; o++ {
		unravel(o, g.Out, opos)
		for ch := 0; ch < c; ch++ {
			xc := x[ch*is : (ch+1)*is]
			var acc float32
			if isMax {
				acc = float32negInf
			}
			n, npad := 0, 0
			best := -1
			for k := 0; k < ks; k++ {
				unravel(k, g.Kernel, kp)
				idx, inside, inPadded := 0, true, true
				for d := 0; d < nd; d++ {
					p := opos[d]*g.Strides[d] - g.PadBegin[d] + kp[d]*g.Dilations[d]
					if p < -g.PadBegin[d] || p >= g.In[d]+padEnd[d] {
						inPadded = false
					}
					if p < 0 || p >= g.In[d] {
						inside = false
					} else {
						idx = idx*g.In[d] + p
					}
				}
				if inPadded {
					npad++
				}
				if !inside {
					continue
				}
				n++
				v := xc[idx]
				if isMax {
					if v > acc || best < 0 {
						acc, best = v, idx
					}
				} else {
					acc += v
				}
			}
			if !isMax {
				div := n
				if countPad {
					div = npad
				}
				if div > 0 {
					acc /= float32(div)
				}
			}
			y[ch*os+o] = acc
			if argmax != nil {
				if best < 0 {
					best = 0
				}
				argmax[ch*os+o] = int64(ch*is + best)
			}
		}
	}
}

// PoolParallel is Pool with the channels split over up to threads workers.
func PoolParallel(threads int, g *ConvGeom, c int, x, y []float32, isMax, countPad bool, padEnd []int, argmax []int64) {
	if len(g.In) != 2 {
		Pool(g, c, x, y, isMax, countPad, padEnd, argmax)
		return
	}
	grain := max(1, (1<<14)/max(1, g.OutSize()*g.KernelSize()))
	Parallel(threads, c, grain, func(lo, hi int) { pool2D(g, lo, hi, x, y, isMax, countPad, padEnd, argmax) })
}

// pool2D is Pool over 2-D windows for channels [c0, c1), visiting the same
// window positions in the same order with the bounds hoisted out of the
// inner loop.
func pool2D(g *ConvGeom, c0, c1 int, x, y []float32, isMax, countPad bool, padEnd []int, argmax []int64) {
	d := g.plane2D()
	is, os := d.ih*d.iw, d.oh*d.ow
	if isMax && argmax == nil {
		maxPool2D(g, c0, c1, x, y)
		return
	}
	for ch := c0; ch < c1; ch++ {
		xc := x[ch*is : (ch+1)*is]
		for oy := 0; oy < d.oh; oy++ {
			y0 := oy*d.sh - d.ph
			for ox := 0; ox < d.ow; ox++ {
				x0 := ox*d.sw - d.pw
				var acc float32
				if isMax {
					acc = float32negInf
				}
				n, best := 0, -1
				npadY, npadX := 0, 0
				for ky := 0; ky < d.kh; ky++ {
					yy := y0 + ky*d.dh
					if yy >= -d.ph && yy < d.ih+padEnd[0] {
						npadY++
					}
					if yy < 0 || yy >= d.ih {
						continue
					}
					xr := xc[yy*d.iw : (yy+1)*d.iw]
					for kx := 0; kx < d.kw; kx++ {
						xx := x0 + kx*d.dw
						if xx < 0 || xx >= d.iw {
							continue
						}
						n++
						v := xr[xx]
						if isMax {
							if v > acc || best < 0 {
								acc, best = v, yy*d.iw+xx
							}
						} else {
							acc += v
						}
					}
				}
				if !isMax {
					div := n
					if countPad {
						for kx := 0; kx < d.kw; kx++ {
							if xx := x0 + kx*d.dw; xx >= -d.pw && xx < d.iw+padEnd[1] {
								npadX++
							}
						}
						div = npadY * npadX
					}
					if div > 0 {
						acc /= float32(div)
					}
				}
				o := oy*d.ow + ox
				y[ch*os+o] = acc
				if argmax != nil {
					argmax[ch*os+o] = int64(ch*is + max(best, 0))
				}
			}
		}
	}
}

// maxPoolBandLanes is about how many lanes one maxRow call of maxPool2D
// covers: enough to amortize the call, few enough that the band's lanes and
// its copied input rows stay in the L1 cache.
const maxPoolBandLanes = 1024

// maxPool2D is pool2D's max without argmax. Every output visits the inside
// positions of its window in the definition's order, (ky, kx) row-major,
// and the running maximum starts at the first of them, so a leading NaN
// stays, a later one is skipped and among equal values the first wins.
//
// Bands of output rows are folded as the lanes of contiguous maxRow calls,
// one call per tap (see maxPoolPlan.foldBand). Windows without an inside
// position, bands of fewer than a vector of outputs and geometries whose
// columns with an inside tap are not contiguous are folded one output at a
// time.
func maxPool2D(g *ConvGeom, c0, c1 int, x, y []float32) {
	p := getMaxPoolPlan(g)
	defer putMaxPoolPlan(p)
	is, os := g.InSize(), g.OutSize()
	for ch := c0; ch < c1; ch++ {
		p.plane(x, ch*is, y[ch*os:(ch+1)*os])
	}
}

// maxPoolPlans recycles plans by geometry (geom2D → *sync.Pool of
// plans): a model pools the same shapes at every run, and building a
// plan's tables and scratch was most of what a LeNet run allocated.
var maxPoolPlans sync.Map

func getMaxPoolPlan(g *ConvGeom) *maxPoolPlan {
	key := g.plane2D()
	plans, ok := maxPoolPlans.Load(key)
	if !ok {
		plans, _ = maxPoolPlans.LoadOrStore(key, &sync.Pool{})
	}
	if p, ok := plans.(*sync.Pool).Get().(*maxPoolPlan); ok {
		return p
	}
	p := newMaxPoolPlan(g)
	p.plans = plans.(*sync.Pool)
	return p
}

// putMaxPoolPlan returns p for reuse, dropping its views of the input.
func putMaxPoolPlan(p *maxPoolPlan) {
	clear(p.phases)
	p.plans.Put(p)
}

// maxPoolPlan is the geometry of maxPool2D worked out once per shape, and
// the scratch its bands reuse.
type maxPoolPlan struct {
	geom2D

	// [kyLo[oy], kyHi[oy]) and [kxLo[ox], kxHi[ox]) are the taps of output
	// row oy and column ox that fall inside the input.
	kyLo, kyHi, kxLo, kxHi []int
	// [oxA, oxB) are the output columns with a tap inside the input row,
	// empty if those are not contiguous.
	oxA, oxB int
	// Input row oy·sh − ph + ky·dh of tap ky is row oy + tapRow[ky] of
	// phase tapPhase[ky], the input rows i·sh + tapPhase[ky].
	tapPhase, tapRow []int
	// A phase row is an input row between padL and padR padding columns,
	// pitch wide. Its padding columns repeat its columns leftFrom and
	// rightFrom (−1 where no lane's window reads them).
	padL, padR, pitch   int
	leftFrom, rightFrom []int

	// Per band: rows phaseLo[r] to phaseHi[r] past the band's first output
	// row of phase r are used (none if phaseLo[r] > phaseHi[r]), held in
	// phases[r].
	phaseLo, phaseHi []int
	phases           [][]float32
	// Scratch for the lanes and the copied phase rows.
	lanes, rows []float32
	// [fullA, fullB) and [fullR0, fullR1) are the output columns and rows
	// whose windows lie wholly inside the input (empty when there are
	// none).
	fullA, fullB, fullR0, fullR1 int
	// plans is the pool p goes back to.
	plans *sync.Pool
}

func newMaxPoolPlan(g *ConvGeom) *maxPoolPlan {
	p := &maxPoolPlan{geom2D: g.plane2D()}
	p.kyLo, p.kyHi = insideTaps(p.oh, p.ih, p.kh, p.sh, p.dh, p.ph)
	p.kxLo, p.kxHi = insideTaps(p.ow, p.iw, p.kw, p.sw, p.dw, p.pw)
	hasInside := func(ox int) bool { return p.kxLo[ox] < p.kxHi[ox] }
	p.oxA, p.oxB = 0, p.ow
	for p.oxA < p.ow && !hasInside(p.oxA) {
		p.oxA++
	}
	for p.oxB > p.oxA && !hasInside(p.oxB-1) {
		p.oxB--
	}
	for ox := p.oxA; ox < p.oxB; ox++ {
		if !hasInside(ox) {
			p.oxA, p.oxB = 0, 0 // not contiguous: no lanes
			break
		}
	}
	p.tapPhase, p.tapRow = make([]int, p.kh), make([]int, p.kh)
	for ky := range p.kh {
		t := ky*p.dh - p.ph
		q := t / p.sh
		if q*p.sh > t {
			q-- // round toward −∞
		}
		p.tapPhase[ky], p.tapRow[ky] = t-q*p.sh, q
	}
	p.fullA, p.fullB = fullSpan(p.kxLo, p.kxHi, p.kw)
	p.fullR0, p.fullR1 = fullSpan(p.kyLo, p.kyHi, p.kh)
	p.phaseLo, p.phaseHi = make([]int, p.sh), make([]int, p.sh)
	p.phases = make([][]float32, p.sh)
	if p.oxA < p.oxB {
		p.padding()
	}
	return p
}

// fullSpan returns the outputs [a, b) whose taps [lo[o], hi[o]) are all k,
// those at both ends that are not being cut off (empty when none is).
func fullSpan(lo, hi []int, k int) (a, b int) {
	a, b = 0, len(lo)
	for a < b && (lo[a] != 0 || hi[a] != k) {
		a++
	}
	for b > a && (lo[b-1] != 0 || hi[b-1] != k) {
		b--
	}
	return a, b
}

// padding sizes the padding of the phase rows, the columns before the
// input row that column oxA's window reaches and those after it that
// column oxB−1's window reaches.
//
// A padding tap must not change any maximum, and it does not if it repeats
// the tap visited right before or right after it: with op(a, v) = v if
// v > a else a, op(op(a, v), v) = op(a, v), and a fold that starts at v
// then meets v again is the fold that starts at v. The taps of a window in
// one row are the columns x0, x0 + dw, …; so left padding column c repeats
// the first inside column c + j·dw, the window's next tap that is inside
// for every window that reads c, and right padding repeats the last inside
// column c − j·dw. Padding whose chain never reaches the input is read
// only by windows without an inside tap, whose lanes no output takes.
func (p *maxPoolPlan) padding() {
	iw, dw := p.iw, p.dw
	p.padL = max(0, p.pw-p.oxA*p.sw)
	p.padR = max(0, (p.oxB-1)*p.sw-p.pw+(p.kw-1)*dw-(iw-1))
	p.pitch = p.padL + iw + p.padR
	from := func(c int) int { // phase row column repeated at input column c
		if c >= 0 && c < iw {
			return p.padL + c
		}
		return -1
	}
	p.leftFrom, p.rightFrom = make([]int, p.padL), make([]int, p.padR)
	for b := range p.leftFrom {
		c := b - p.padL
		p.leftFrom[b] = from(c + (-c+dw-1)/dw*dw)
	}
	for b := range p.rightFrom {
		c := iw + b
		p.rightFrom[b] = from(c - (c-iw+dw)/dw*dw)
	}
}

// pad fills the padding columns of the phase rows in rows.
func (p *maxPoolPlan) pad(rows []float32) {
	for len(rows) > 0 {
		row := rows[:p.pitch]
		for b, from := range p.leftFrom {
			if from >= 0 {
				row[b] = row[from]
			}
		}
		right := row[p.padL+p.iw:]
		for b, from := range p.rightFrom {
			if from >= 0 {
				right[b] = row[from]
			}
		}
		rows = rows[p.pitch:]
	}
}

// insideTaps returns for each of out output positions along an axis the
// range [lo, hi) of the k taps at stride s, dilation d and padding pad
// that fall inside an input of n positions.
func insideTaps(out, n, k, s, d, pad int) (lo, hi []int) {
	lo, hi = make([]int, out), make([]int, out)
	for o := range out {
		p0 := o*s - pad
		l, h := 0, k
		for l < k && p0+l*d < 0 {
			l++
		}
		for h > l && p0+(h-1)*d >= n {
			h--
		}
		lo[o], hi[o] = l, h
	}
	return lo, hi
}

// plane pools the input plane x[base:base+ih·iw] into yc. Output rows with
// the same inside taps form bands of up to maxPoolBandLanes/pitch rows.
func (p *maxPoolPlan) plane(x []float32, base int, yc []float32) {
	xc := x[base : base+p.ih*p.iw]
	if p.stride2Rows(x, base, yc) {
		return
	}
	bandRows := max(1, maxPoolBandLanes/max(1, p.pitch))
	for oy0 := 0; oy0 < p.oh; {
		lo, hi := p.kyLo[oy0], p.kyHi[oy0]
		oy1 := oy0 + 1
		for oy1 < p.oh && oy1-oy0 < bandRows && p.kyLo[oy1] == lo && p.kyHi[oy1] == hi {
			oy1++
		}
		a, b := p.oxA, p.oxB
		if lo == hi || (oy1-oy0)*(b-a) < 8 {
			// No inside rows, or too few outputs to be worth a maxRow
			// call per tap.
			a, b = 0, 0
		}
		if a < b {
			p.foldBand(x, base, yc, oy0, oy1)
		}
		for oy := oy0; oy < oy1; oy++ {
			for ox := range a {
				yc[oy*p.ow+ox] = p.window(xc, oy, ox)
			}
			for ox := max(a, b); ox < p.ow; ox++ {
				yc[oy*p.ow+ox] = p.window(xc, oy, ox)
			}
		}
		oy0 = oy1
	}
}

// stride2Rows pools the plane at x[base:] into yc when the windows are 2
// or 3 columns wide at column stride 2 (dilation 1) and the build has
// maxPoolS2Rows: the windows inside the input take it, all the rows whose
// windows are inside vertically in one call, and the others window. It
// reports false, computing nothing, otherwise.
func (p *maxPoolPlan) stride2Rows(x []float32, base int, yc []float32) bool {
	if p.sw != 2 || p.dw != 1 || (p.kw != 2 && p.kw != 3) {
		return false
	}
	a, b, r0, r1 := p.fullA, p.fullB, p.fullR0, p.fullR1
	if b == a || r1 == r0 || !haveMaxPoolS2 {
		return false // no window inside, or no kernel
	}
	// The kernel's reads run past a row's windows; the last row of the
	// last plane may have to window.
	done := r1
	for done > r0 {
		at := base + (r0*p.sh-p.ph)*p.iw + 2*a - p.pw
		if maxPoolS2Rows(x, at, p.dh*p.iw, p.kh, p.kw, b-a, yc[r0*p.ow+a:], done-r0, p.sh*p.iw, p.ow) {
			break
		}
		done--
	}
	xc := x[base : base+p.ih*p.iw]
	for oy := range p.oh {
		lo, hi := 0, 0 // the columns done by the kernel
		if oy >= r0 && oy < done {
			if a == 0 && b == p.ow {
				continue
			}
			lo, hi = a, b
		}
		yr := yc[oy*p.ow : (oy+1)*p.ow]
		for ox := range lo {
			yr[ox] = p.window(xc, oy, ox)
		}
		for ox := hi; ox < p.ow; ox++ {
			yr[ox] = p.window(xc, oy, ox)
		}
	}
	return true
}

// window folds the inside positions of one output's window of plane xc
// (−Inf if there are none).
func (p *maxPoolPlan) window(xc []float32, oy, ox int) float32 {
	y0, x0 := oy*p.sh-p.ph, ox*p.sw-p.pw
	acc, first := float32negInf, true
	for ky := p.kyLo[oy]; ky < p.kyHi[oy]; ky++ {
		xr := xc[(y0+ky*p.dh)*p.iw:]
		for kx := p.kxLo[ox]; kx < p.kxHi[ox]; kx++ {
			v := xr[x0+kx*p.dw]
			if first {
				acc, first = v, false
			} else if v > acc {
				acc = v
			}
		}
	}
	return acc
}

// foldBand computes the columns [oxA, oxB) of output rows [oy0, oy1),
// which have the same inside taps, from the plane at x[base:].
//
// Lane l stands for the window whose top-left tap is in phase row l/pitch
// of the band, column cA + l%pitch with cA that of column oxA, so tap
// (ky, kx) is one contiguous maxRow over all lanes at a fixed offset. That
// computes a window at every column, sw times the windows needed, but
// contiguous loads are much cheaper than a gather per tap; output column
// ox then takes lane (ox−oxA)·sw of its row. For the offset to be fixed
// across the band's rows, the input rows are copied per phase into rows
// pitch apart: with ky·dh − ph = q·sh + r, input row oy·sh − ph + ky·dh is
// row oy + q of phase r, the input rows i·sh + r. Taps outside the input
// row read the padding (see padding). Lanes past a row's last window start
// read the next row, or stale scratch past the band; no output uses them.
func (p *maxPoolPlan) foldBand(x []float32, base int, yc []float32, oy0, oy1 int) {
	iw, pitch, sh, sw := p.iw, p.pitch, p.sh, p.sw
	lo, hi := p.kyLo[oy0], p.kyHi[oy0]
	cA := p.oxA*sw - p.pw + p.padL
	n := ((oy1-oy0-1)*pitch + (p.oxB-1-p.oxA)*sw + 8) &^ 7 // lanes, whole vectors
	for r := range p.phaseLo {
		p.phaseLo[r], p.phaseHi[r] = 1, 0
	}
	for ky := lo; ky < hi; ky++ {
		r, q := p.tapPhase[ky], p.tapRow[ky]
		if p.phaseLo[r] > p.phaseHi[r] {
			p.phaseLo[r], p.phaseHi[r] = q, q
		} else {
			p.phaseLo[r], p.phaseHi[r] = min(p.phaseLo[r], q), max(p.phaseHi[r], q)
		}
	}
	// Phase r holds rows oy0+phaseLo[r] to oy1−1+phaseHi[r] and its taps
	// read up to reach(r) past its start.
	reach := func(r int) int {
		rows := oy1 - oy0 + p.phaseHi[r] - p.phaseLo[r]
		return max(rows*pitch, (p.phaseHi[r]-p.phaseLo[r])*pitch+cA+(p.kw-1)*p.dw+n)
	}
	size, end := 0, 0
	for r := range p.phaseLo {
		if p.phaseLo[r] <= p.phaseHi[r] {
			size = max(size, end+reach(r))
			end += (oy1 - oy0 + p.phaseHi[r] - p.phaseLo[r]) * pitch
		}
	}
	if len(p.rows) < size {
		p.rows = make([]float32, size)
	}
	if len(p.lanes) < n {
		p.lanes = make([]float32, n)
	}
	end = 0
	for r := range p.phaseLo {
		if p.phaseLo[r] > p.phaseHi[r] {
			continue
		}
		i0, i1 := oy0+p.phaseLo[r], oy1+p.phaseHi[r]
		if at := base + i0*iw; sh == 1 && pitch == iw && at+reach(r) <= len(x) {
			p.phases[r] = x[at:] // the input rows are phase rows already
			continue
		}
		dst := p.rows[end:]
		for i := i0; i < i1; i++ {
			at := base + (i*sh+r)*iw
			copy(dst[(i-i0)*pitch+p.padL:], x[at:at+iw])
		}
		if pitch > iw {
			p.pad(dst[:(i1-i0)*pitch])
		}
		p.phases[r] = dst
		end += (i1 - i0) * pitch
	}
	z := p.lanes[:n]
	first := true
	for ky := lo; ky < hi; ky++ {
		r := p.tapPhase[ky]
		src := p.phases[r][(p.tapRow[ky]-p.phaseLo[r])*pitch+cA:]
		for kx := range p.kw {
			maxRow(z, src[kx*p.dw:], first)
			first = false
		}
	}
	for oy := oy0; oy < oy1; oy++ {
		takeEvery(yc[oy*p.ow+p.oxA:oy*p.ow+p.oxB], z[(oy-oy0)*pitch:], sw)
	}
}

package kernels

import (
	"fmt"
	"sync"
)

// wideConv is a stride-1 2-D convolution computed by micro-kernels that
// read the rows of its column matrix in place (tileI), from a copy of the
// image laid out so that each row of the column matrix is one contiguous
// run at offs[p] + j, j being the wide column. Each product sums the same
// values in the same order as the packed one, so the result is the same
// bit for bit. There are two layouts:
//
// Padded: each channel's rows pitch floats apart, pitch = iw + max(padL,
// padR), with input (y, x) at ch·plane + (y+padT)·pitch + padL + x and
// zeros elsewhere: the zeros after one row's inputs are its right padding
// and, read past the row's end, the next row's left padding. Output (oy,
// ox) is wide column j = oy·pitch + ox, and its tap (ch, ky, kx) reads
// the copy at offs[p] + j with offs[p] = ch·plane + ky·dh·pitch + kx·dw.
// The columns with ox ≥ ow are computed and dropped when the result is
// copied out.
//
// Shifted: kw copies, copy kx holding each channel's padded rows with
// column ox the input column ox + kx·dw − padL (zero outside the input),
// ow floats apart. Output (oy, ox) is wide column oy·ow + ox, read by tap
// (ch, ky, kx) at kx·copy + ch·plane + ky·dh·ow + j. Nothing is dropped
// and the wide columns are the output's, so full panels are written in
// place; the price is kw copies of the image instead of one.
//
// Either costs less than gathering every row of the column matrix into
// packed panels (packBConv), which moves kh·kw floats per input float,
// unless the dropped columns outweigh that (PlanConv).
type wideConv struct {
	g     *ConvGeom
	pitch int
	xw    []float32
	offs  []int
}

// ConvWay is a way SgemmConv computes a 2-D convolution.
type ConvWay int

const (
	ConvAuto    ConvWay = iota // PlanConv: the cheapest by its costs
	ConvPacked                 // B panels packed from the image (packBConv)
	ConvPadded                 // wide columns of one padded copy
	ConvShifted                // wide columns of kw shifted copies
	ConvRows                   // row tiles (sgemmConvRows)
)

var convWayNames = [...]string{"auto", "packed", "padded", "shifted", "rows"}

func (w ConvWay) String() string {
	if w < 0 || int(w) >= len(convWayNames) {
		return fmt.Sprintf("ConvWay(%d)", int(w))
	}
	return convWayNames[w]
}

// ConvPlan is how SgemmConv computes one geometry with one packed A: the
// way and, for wide columns, their row pitch. PlanConv makes it once,
// when the geometry is first known; the caller keeps it for every call
// with that geometry. The zero plan makes SgemmConv choose at each call.
type ConvPlan struct {
	Way   ConvWay
	pitch int
}

// String names the plan for people: the way, and the pitch of a padded
// layout.
func (p ConvPlan) String() string {
	if p.Way == ConvPadded {
		return fmt.Sprintf("%s (pitch %d)", p.Way, p.pitch)
	}
	return p.Way.String()
}

// PlanConv chooses how SgemmConv computes g with the weights pa: want,
// when not ConvAuto and it can compute g (tests and benchmarks compare
// the ways), else the cheapest. Each way is costed in cycles of the
// AVX-512 kernels: a column of the product costs m·k multiply-adds, 1/16
// cycle each; packing moves k floats per output at about 2 cycles each
// (packRuns on the short runs of small images). The other per-float costs
// are fitted to BenchmarkSgemmConv: 1 cycle for the padded copy, 2 for
// copying its outputs out, 4 for the shifted copies, which also crowd the
// image out of L1 (LeNet's 16×14×14 input is 12 KB padded, 45 KB
// shifted); row tiles cost what convRowsCost says. Small images are where
// the ways differ: the padded layout's dropped columns, last-panel
// rounding (an 8×8 output is 71 wide columns, three panels for two
// panels' worth of outputs) and copy-out against the shifted layout's kw
// copies and the row tiles' transposition.
func PlanConv(pa *PackedA, g *ConvGeom, want ConvWay) ConvPlan {
	m, k, nr := pa.m, pa.k, pa.arch.nr
	wide := pa.arch.tileI != nil && wideEligible(g)
	rows := convRowsEligible(pa.arch, g)
	switch want {
	case ConvPacked:
		return ConvPlan{Way: ConvPacked}
	case ConvPadded:
		if wide {
			return ConvPlan{ConvPadded, widePaddedPitch(g)}
		}
	case ConvShifted:
		if wide {
			return ConvPlan{ConvShifted, g.Out[1]}
		}
	case ConvRows:
		if rows {
			return ConvPlan{Way: ConvRows}
		}
	}
	oh, ow := g.Out[0], g.Out[1]
	outs := oh * ow
	column := float64(m*k) / 16
	way, best := ConvPacked, float64(roundUp(outs, nr))*column+2*float64(k*outs)
	if wide {
		c := k / g.KernelSize()
		kw, rows, pitch := g.Kernel[1], wideRows(g), widePaddedPitch(g)
		if cost := float64(roundUp((oh-1)*pitch+ow, nr))*column + float64(c*rows*pitch+2*m*outs); cost < best {
			way, best = ConvPadded, cost
		}
		if cost := float64(roundUp(outs, nr))*column + 4*float64(kw*c*rows*ow); cost < best {
			way, best = ConvShifted, cost
		}
	}
	if rows && convRowsCost(g, m, k) < best {
		way = ConvRows
	}
	switch way {
	case ConvPadded:
		return ConvPlan{way, widePaddedPitch(g)}
	case ConvShifted:
		return ConvPlan{way, ow}
	}
	return ConvPlan{Way: way}
}

// wideEligible reports whether g is a 2-D stride-1 convolution, which
// wide columns can compute.
func wideEligible(g *ConvGeom) bool {
	return len(g.In) == 2 && g.Strides[0] == 1 && g.Strides[1] == 1
}

// widePaddedPitch is the row pitch of g's padded layout.
func widePaddedPitch(g *ConvGeom) int {
	iw, ow, kw, dw, padL := g.In[1], g.Out[1], g.Kernel[1], g.Dilations[1], g.PadBegin[1]
	padR := ow + (kw-1)*dw - padL - iw
	return iw + max(padL, padR, 0)
}

// wideRows is the rows of a channel in either layout: the input's and the
// padding rows that the taps read.
func wideRows(g *ConvGeom) int {
	ih, oh, kh, dh, padT := g.In[0], g.Out[0], g.Kernel[0], g.Dilations[0], g.PadBegin[0]
	padB := oh + (kh-1)*dh - padT - ih
	return padT + ih + max(padB, 0)
}

// offsPool recycles the tables of per-tap offsets that the wide columns
// and the row tiles read the image through.
var offsPool = sync.Pool{New: func() any { return new([]int) }}

// tapOffsets returns a table of k offsets from offsPool and the function
// that gives it back.
func tapOffsets(k int) ([]int, func()) {
	bp := offsPool.Get().(*[]int)
	if cap(*bp) < k {
		*bp = make([]int, k)
	}
	return (*bp)[:k], func() { offsPool.Put(bp) }
}

// wideKey names a wide layout for paddedImage: what decides which of its
// elements the copies write.
type wideKey struct {
	c, ih, iw, ow, plane, pitch, padT, padL, dw, copies int
	shifted                                             bool
	n                                                   int
}

// newWideConv lays out the c channels of x for g, padded with pitch or
// shifted (pitch = ow), split over threads when there is enough to copy,
// and the offsets of the k = c·kh·kw column matrix rows; release returns
// the buffers.
func newWideConv(threads int, g *ConvGeom, pitch int, shifted bool, c int, x []float32, nr int) (w *wideConv, release func()) {
	ih, iw, oh, ow := g.In[0], g.In[1], g.Out[0], g.Out[1]
	kh, kw, dh, dw := g.Kernel[0], g.Kernel[1], g.Dilations[0], g.Dilations[1]
	padT, padL := g.PadBegin[0], g.PadBegin[1]
	plane := wideRows(g) * pitch
	copies, copyLen := 1, c*plane
	if shifted {
		copies = kw
	}
	// The last tap reads up to the last wide column's panel end.
	last := (copies-1)*copyLen + (c-1)*plane + (kh-1)*dh*pitch
	if !shifted {
		last += (kw - 1) * dw
	}
	n := max(copies*copyLen, last+roundUp((oh-1)*pitch+ow, nr))
	// Only the image's rows are copied: the rest of the layout is zero
	// in every buffer paddedImage gives for it.
	xw, releaseImage := paddedImage(wideKey{c, ih, iw, ow, plane, pitch, padT, padL, dw, copies, shifted, n}, n)
	Parallel(threads, copies*c, max(1, wideCopyGrain/plane), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			ch, shift := q%c, 0
			if shifted {
				shift = q/c*dw - padL // column ox reads input column ox + shift
			}
			p := xw[q*plane : (q+1)*plane]
			for y := range ih {
				row := p[(y+padT)*pitch : (y+padT+1)*pitch]
				src := x[(ch*ih+y)*iw : (ch*ih+y+1)*iw]
				if !shifted {
					copy(row[padL:padL+iw], src)
					continue
				}
				// Columns [a, b) read inside the input row (none
				// when a dilated tap lies wholly in the padding).
				if a, b := min(max(-shift, 0), ow), min(max(iw-shift, 0), ow); a < b {
					copy(row[a:b], src[a+shift:])
				}
			}
		}
	})
	offs, releaseOffs := tapOffsets(c * kh * kw)
	p := 0
	for ch := range c {
		for ky := range kh {
			for kx := range kw {
				if shifted {
					offs[p] = kx*copyLen + ch*plane + ky*dh*pitch
				} else {
					offs[p] = ch*plane + ky*dh*pitch + kx*dw
				}
				p++
			}
		}
	}
	return &wideConv{g: g, pitch: pitch, xw: xw, offs: offs}, func() {
		releaseImage()
		releaseOffs()
	}
}

// wideCopyGrain is the fewest floats of padded copy a thread takes: a
// hand-off to another thread costs about as much as copying this many.
const wideCopyGrain = 1 << 14

// sgemmWide is SgemmConv by wide columns (PlanConv), on an arch with
// tileI. The work is a grid of row tiles (mr output channels) by column
// panels (nr wide columns); it is cut into one block per thread, along the
// channels or the panels, whichever leaves the busiest thread the least
// work (wideSplit). Cutting by output rows instead rounds every thread's
// share up to whole panels: on an 8×8 output, two threads computed twice
// the columns one thread did. Each block is taken in chunks of at most nc
// columns (chunk).
func sgemmWide(threads int, pa *PackedA, g *ConvGeom, pitch int, shifted bool, x []float32, c []float32, ldc int, ep *Epilogue) {
	arch := pa.arch
	w, release := newWideConv(threads, g, pitch, shifted, pa.k/g.KernelSize(), x, arch.nr)
	defer release()
	oh, ow := g.Out[0], g.Out[1]
	cols := (oh-1)*pitch + ow
	rowsPer, colsPer := wideSplit(arch, threads, pa.m, ceilDiv(cols, arch.nr))
	rowParts, colParts := ceilDiv(pa.m, rowsPer), ceilDiv(cols, colsPer)
	Parallel(rowParts*colParts, rowParts*colParts, 1, func(lo, hi int) {
		bufs := packPool.Get().(*packBufs)
		defer packPool.Put(bufs)
		for t := lo; t < hi; t++ {
			i0, j0 := t/colParts*rowsPer, t%colParts*colsPer
			i1, j1 := min(pa.m, i0+rowsPer), min(cols, j0+colsPer)
			for ja := j0; ja < j1; ja += arch.nc {
				w.chunk(arch, pa, i0, i1, ja, min(j1, ja+arch.nc), bufs, c, ldc, ep)
			}
		}
	})
}

// wideSplit returns how many rows (a multiple of mr) and columns (of
// panels column panels) each part gets when m rows are cut into at most
// threads parts: the cut whose busiest part costs least, the panels cut
// first on a tie (every thread then reads a share of the image instead of
// all of it). A tile of r rows costs about r + 1 steps of its micro-kernel
// (r rows of multiply-adds and the loads of the B panel), so a short last
// tile is cheap: 16 rows cut as 12 and 4 is a poor split.
func wideSplit(arch *gemmArch, threads, m, panels int) (rowsPer, colsPer int) {
	rowTiles := ceilDiv(m, arch.mr)
	// rowsCost is the cost of rows [i0, i1) on one panel.
	rowsCost := func(i0, i1 int) int {
		cost := 0
		for i := i0; i < i1; i += arch.mr {
			cost += arch.kernelRows(min(arch.mr, i1-i)) + 1
		}
		return cost
	}
	best, bestParts := -1, 0
	for rp := 1; rp <= min(threads, rowTiles); rp++ {
		pp := min(threads/rp, panels)
		per, panelsPer := ceilDiv(rowTiles, rp)*arch.mr, ceilDiv(panels, pp)
		busiest := 0
		for i0 := 0; i0 < m; i0 += per {
			busiest = max(busiest, rowsCost(i0, min(m, i0+per)))
		}
		if cost := busiest * panelsPer; best < 0 || cost < best || cost == best && rp*pp > bestParts {
			best, bestParts, rowsPer, colsPer = cost, rp*pp, per, panelsPer*arch.nr
		}
	}
	return rowsPer, colsPer
}

// chunk computes output channels [i0, i1) at wide columns [ja, jb) into
// bufs.tmp, then copies the columns that are outputs to c, applying ep.
// When the wide columns are the output's (pitch = ow), the tiles that are
// a full panel wide and a micro-kernel high go straight to c instead.
func (w *wideConv) chunk(arch *gemmArch, pa *PackedA, i0, i1, ja, jb int, bufs *packBufs, c []float32, ldc int, ep *Epilogue) {
	k := pa.k
	mr, nr := arch.mr, arch.nr
	ow, pitch := w.g.Out[1], w.pitch
	n := jb - ja
	ldw := roundUp(n, nr)
	bufs.tmp = grow(bufs.tmp, roundUp(i1-i0, mr)*ldw)
	cw := bufs.tmp
	// In place: columns [ja, ja+full) of rows [i0, iExact).
	full, iExact := 0, i0
	if pitch == ow {
		full, iExact = n/nr*nr, i1
		if rem := (i1 - i0) % mr; arch.kernelRows(rem) != rem {
			iExact = i1 - rem
		}
	}
	// Row-only epilogues run on the wide block, dropped columns included,
	// full tiles in the micro-kernel's registers; others run on the
	// copied-out rows (a residual is indexed by output column).
	rowEp := ep != nil && ep.rowOnly()
	for pc := 0; pc < k; pc += arch.kc {
		kc := min(arch.kc, k-pc)
		accumulate := pc > 0
		last := pc+kc == k
		offs := &w.offs[pc]
		for ic := i0; ic < i1; ic += arch.mc {
			mc := min(arch.mc, i1-ic)
			if last && rowEp && arch.tileIEp != nil {
				bufs.ep = ep.rowParams(bufs.ep, ic, mc)
			}
			apack := pa.block(pc, ic)
			for jr := 0; jr < n; jr += nr {
				b := &w.xw[ja+jr]
				for ir := 0; ir < mc; ir += mr {
					rows := min(mr, mc-ir)
					ap := &apack[ir*kc]
					dst, ldd, ci := cw, ldw, (ic-i0+ir)*ldw+jr
					if jr < full && ic+ir < iExact {
						dst, ldd, ci = c, ldc, (ic+ir)*ldc+ja+jr
					}
					if last && rowEp && rows == mr && arch.tileIEp != nil {
						arch.tileIEp(kc, ap, b, offs, &dst[ci], ldd, accumulate, &bufs.ep[3*ir], ep.Act == ActRelu)
						continue
					}
					arch.tileI(arch.kernelRows(rows), kc, ap, b, offs, &dst[ci], ldd, accumulate)
					if last && rowEp {
						ep.apply(dst[ci:], ldd, ic+ir, 0, rows, nr)
					}
				}
			}
		}
	}
	// Wide column j is output (j/pitch, j%pitch) when j%pitch < ow.
	for i := i0; i < i1; i++ {
		src, dst := cw[(i-i0)*ldw:], c[i*ldc:]
		j := ja
		if i < iExact {
			j += full
		}
		for j < jb {
			oy, ox := j/pitch, j%pitch
			end := min(jb, oy*pitch+ow)
			if ox < ow {
				copy(dst[oy*ow+ox:oy*ow+ox+end-j], src[j-ja:end-ja])
			}
			j = (oy + 1) * pitch
		}
	}
	if ep != nil && !rowEp {
		// The outputs of [ja, jb) are one run [o0, o1) of c's columns.
		o0, o1 := wideOutput(ja, pitch, ow), wideOutput(jb, pitch, ow)
		ep.apply(c[i0*ldc+o0:], ldc, i0, o0, i1-i0, o1-o0)
	}
}

// wideOutput returns the index in the output of the first output at or
// after wide column j.
func wideOutput(j, pitch, ow int) int {
	return j/pitch*ow + min(j%pitch, ow)
}

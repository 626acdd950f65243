package kernels

import "sync"

// wideConv is a stride-1 2-D convolution computed by micro-kernels that
// read the rows of its column matrix in place (tileI), from a padded copy
// of the image laid out so that each row is one contiguous run:
//
// The copy holds each channel's rows pitch floats apart, pitch = iw +
// max(padL, padR), with input (y, x) at ch·plane + (y+padT)·pitch + padL
// + x and zeros elsewhere: the zeros after one row's inputs are its right
// padding and, read past the row's end, the next row's left padding.
// Output (oy, ox) is wide column j = oy·pitch + ox, and its tap (ch, ky,
// kx) reads the copy at offs[p] + j with offs[p] = ch·plane + ky·dh·pitch
// + kx·dw for column matrix row p. The columns with ox ≥ ow are computed
// and dropped when the result is copied out. With pitch close to ow that
// costs less than gathering every row of the column matrix into packed
// panels (packBConv), which moves kh·kw floats per input float.
//
// Each product sums the same values in the same order as the packed one,
// so the result is the same bit for bit.
type wideConv struct {
	g     *ConvGeom
	pitch int
	xw    []float32
	offs  []int
}

// wideConvWasteRows bounds the dropped columns' cost against the packing
// they save. A dropped column costs m·k multiply-adds, 1/16 of a cycle
// each in the AVX-512 kernels; packing a column moves k floats at about 2
// cycles each (packRuns on the short runs of small images). So wide
// columns pay while waste·m/16 < 2, waste being the dropped columns per
// output.
const wideConvWasteRows = 32

// widePitch returns the row pitch of g's padded copy, and whether g, with
// m output channels, is a 2-D stride-1 convolution worth computing by wide
// columns on micro-kernels nr columns wide. The dropped columns are those
// the wide layout computes beyond the panels a packed product of the same
// outputs would: the row ends past ow and the rounding of the last panel,
// which dominates on small images (an 8×8 output is 71 wide columns, three
// panels of 32 for two panels' worth of outputs).
func widePitch(g *ConvGeom, m, nr int) (int, bool) {
	if len(g.In) != 2 || g.Strides[0] != 1 || g.Strides[1] != 1 {
		return 0, false
	}
	iw, oh, ow, kw, dw, padL := g.In[1], g.Out[0], g.Out[1], g.Kernel[1], g.Dilations[1], g.PadBegin[1]
	padR := ow + (kw-1)*dw - padL - iw
	pitch := iw + max(padL, padR, 0)
	outs := oh * ow
	dropped := roundUp((oh-1)*pitch+ow, nr) - roundUp(outs, nr)
	waste := float64(dropped) / float64(outs)
	return pitch, waste <= 1 && waste*float64(m) <= wideConvWasteRows
}

var widePool = sync.Pool{New: func() any { return new(wideBufs) }}

type wideBufs struct {
	xw   []float32
	offs []int
}

// newWideConv lays out the c channels of x for g (pitch from widePitch),
// split over threads when there is enough to copy, and the offsets of the
// k = c·kh·kw column matrix rows; release returns the buffers.
func newWideConv(threads int, g *ConvGeom, pitch, c int, x []float32, nr int) (w *wideConv, release func()) {
	ih, iw, oh := g.In[0], g.In[1], g.Out[0]
	kh, kw, dh, dw := g.Kernel[0], g.Kernel[1], g.Dilations[0], g.Dilations[1]
	padT, padL := g.PadBegin[0], g.PadBegin[1]
	padB := oh + (kh-1)*dh - padT - ih
	plane := (padT + ih + max(padB, 0)) * pitch
	// The last channel's taps read up to the last wide column's panel end.
	n := max(c*plane, (c-1)*plane+(kh-1)*dh*pitch+(kw-1)*dw+oh*pitch+nr)
	bufs := widePool.Get().(*wideBufs)
	bufs.xw = grow(bufs.xw, n)
	xw := bufs.xw
	// Every float is written once: the pads zeroed around the rows.
	Parallel(threads, c, max(1, wideCopyGrain/plane), func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			p := xw[ch*plane : (ch+1)*plane]
			clear(p[:padT*pitch])
			for y := range ih {
				row := p[(y+padT)*pitch : (y+padT+1)*pitch]
				clear(row[:padL])
				copy(row[padL:padL+iw], x[(ch*ih+y)*iw:(ch*ih+y+1)*iw])
				clear(row[padL+iw:])
			}
			clear(p[(padT+ih)*pitch:])
		}
	})
	clear(xw[c*plane:])
	if cap(bufs.offs) < c*kh*kw {
		bufs.offs = make([]int, c*kh*kw)
	}
	offs := bufs.offs[:c*kh*kw]
	p := 0
	for ch := range c {
		for ky := range kh {
			for kx := range kw {
				offs[p] = ch*plane + ky*dh*pitch + kx*dw
				p++
			}
		}
	}
	return &wideConv{g: g, pitch: pitch, xw: xw, offs: offs}, func() { widePool.Put(bufs) }
}

// wideCopyGrain is the fewest floats of padded copy a thread takes: a
// hand-off to another thread costs about as much as copying this many.
const wideCopyGrain = 1 << 14

// sgemmWide is SgemmConv for a geometry widePitch accepts, on an arch with
// tileI. The work is a grid of row tiles (mr output channels) by column
// panels (nr wide columns); it is cut into one block per thread, along the
// channels or the panels, whichever leaves the fewest tiles to the busiest
// thread. Cutting by output rows instead rounds every thread's share up to
// whole panels: on an 8×8 output, two threads computed twice the columns
// one thread did. Each block is taken in chunks of at most nc columns,
// computed into a scratch block and copied out.
func sgemmWide(threads int, pa *PackedA, g *ConvGeom, pitch int, x []float32, c []float32, ldc int, ep *Epilogue) {
	arch := pa.arch
	w, release := newWideConv(threads, g, pitch, pa.k/g.KernelSize(), x, arch.nr)
	defer release()
	oh, ow := g.Out[0], g.Out[1]
	cols := (oh-1)*pitch + ow
	rowTiles, panels := ceilDiv(pa.m, arch.mr), ceilDiv(cols, arch.nr)
	threads = min(threads, max(1, pa.m*pa.k*oh*ow/gemmMinWork))
	rowParts, panelParts := wideSplit(threads, rowTiles, panels)
	Parallel(rowParts*panelParts, rowParts*panelParts, 1, func(lo, hi int) {
		bufs := packPool.Get().(*packBufs)
		defer packPool.Put(bufs)
		for t := lo; t < hi; t++ {
			r, p := t/panelParts, t%panelParts
			i0, i1 := min(pa.m, r*ceilDiv(rowTiles, rowParts)*arch.mr), min(pa.m, (r+1)*ceilDiv(rowTiles, rowParts)*arch.mr)
			j0, j1 := min(cols, p*ceilDiv(panels, panelParts)*arch.nr), min(cols, (p+1)*ceilDiv(panels, panelParts)*arch.nr)
			if i0 >= i1 || j0 >= j1 {
				continue
			}
			for ja := j0; ja < j1; ja += arch.nc {
				w.chunk(arch, pa, i0, i1, ja, min(j1, ja+arch.nc), bufs, c, ldc, ep)
			}
		}
	})
}

// wideSplit returns how many parts to cut rowTiles row tiles and panels
// column panels into, their product at most threads: the cut whose largest
// block has the fewest tiles, the panels cut first on a tie (every thread
// then reads a share of the image instead of all of it).
func wideSplit(threads, rowTiles, panels int) (rowParts, panelParts int) {
	rowParts, panelParts = 1, 1
	best := rowTiles * panels
	for rp := 1; rp <= threads; rp++ {
		pp := threads / rp
		rp, pp := min(rp, rowTiles), min(pp, panels)
		if cost := ceilDiv(rowTiles, rp) * ceilDiv(panels, pp); cost < best || cost == best && rp*pp > rowParts*panelParts {
			best, rowParts, panelParts = cost, rp, pp
		}
	}
	return rowParts, panelParts
}

// chunk computes output channels [i0, i1) at wide columns [ja, jb) into
// bufs.tmp, then copies the columns that are outputs to c, applying ep.
func (w *wideConv) chunk(arch *gemmArch, pa *PackedA, i0, i1, ja, jb int, bufs *packBufs, c []float32, ldc int, ep *Epilogue) {
	k := pa.k
	mr, nr := arch.mr, arch.nr
	ow, pitch := w.g.Out[1], w.pitch
	n := jb - ja
	ldw := roundUp(n, nr)
	bufs.tmp = grow(bufs.tmp, roundUp(i1-i0, mr)*ldw)
	cw := bufs.tmp
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
					ci := (ic-i0+ir)*ldw + jr
					if last && rowEp && rows == mr && arch.tileIEp != nil {
						arch.tileIEp(kc, ap, b, offs, &cw[ci], ldw, accumulate, &bufs.ep[3*ir], ep.Act == ActRelu)
						continue
					}
					arch.tileI(arch.kernelRows(rows), kc, ap, b, offs, &cw[ci], ldw, accumulate)
					if last && rowEp {
						ep.apply(cw[ci:], ldw, ic+ir, 0, rows, nr)
					}
				}
			}
		}
	}
	// Wide column j is output (j/pitch, j%pitch) when j%pitch < ow; the
	// outputs of [ja, jb) are one run [o0, o1) of c's columns.
	o0, o1 := wideOutput(ja, pitch, ow), wideOutput(jb, pitch, ow)
	for i := i0; i < i1; i++ {
		src, dst := cw[(i-i0)*ldw:], c[i*ldc:]
		for j := ja; j < jb; {
			oy, ox := j/pitch, j%pitch
			end := min(jb, oy*pitch+ow)
			if ox < ow {
				copy(dst[oy*ow+ox:oy*ow+ox+end-j], src[j-ja:end-ja])
			}
			j = (oy + 1) * pitch
		}
	}
	if ep != nil && !rowEp {
		ep.apply(c[i0*ldc+o0:], ldc, i0, o0, i1-i0, o1-o0)
	}
}

// wideOutput returns the index in the output of the first output at or
// after wide column j.
func wideOutput(j, pitch, ow int) int {
	return j/pitch*ow + min(j%pitch, ow)
}

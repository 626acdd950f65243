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
// columns pay while waste·m/16 < 2, waste = (pitch − ow)/ow.
const wideConvWasteRows = 32

// widePitch returns the row pitch of g's padded copy, and whether g, with
// m output channels, is a 2-D stride-1 convolution worth computing by wide
// columns.
func widePitch(g *ConvGeom, m int) (int, bool) {
	if len(g.In) != 2 || g.Strides[0] != 1 || g.Strides[1] != 1 {
		return 0, false
	}
	iw, ow, kw, dw, padL := g.In[1], g.Out[1], g.Kernel[1], g.Dilations[1], g.PadBegin[1]
	padR := ow + (kw-1)*dw - padL - iw
	pitch := iw + max(padL, padR, 0)
	waste := float64(pitch-ow) / float64(ow)
	return pitch, waste <= 1 && waste*float64(m) <= wideConvWasteRows
}

var widePool = sync.Pool{New: func() any { return new(wideBufs) }}

type wideBufs struct {
	xw   []float32
	offs []int
}

// newWideConv lays out the c channels of x for g (pitch from widePitch)
// and the offsets of the k = c·kh·kw column matrix rows; release returns
// the buffers.
func newWideConv(g *ConvGeom, pitch, c int, x []float32, nr int) (w *wideConv, release func()) {
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
	for ch := range c {
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

// sgemmWide is SgemmConv for a geometry widePitch accepts, on an arch with
// tileI: the output rows are split over the threads, and each takes them
// in chunks of about nc wide columns, computed into a scratch block and
// copied out.
func sgemmWide(threads int, pa *PackedA, g *ConvGeom, pitch int, x []float32, c []float32, ldc int, ep *Epilogue) {
	arch := pa.arch
	w, release := newWideConv(g, pitch, pa.k/g.KernelSize(), x, arch.nr)
	defer release()
	oh, ow := g.Out[0], g.Out[1]
	chunkRows := max(1, arch.nc/pitch)
	work := pa.m * pa.k * ow
	threads = min(threads, oh, max(1, work*oh/gemmMinWork))
	Parallel(threads, oh, 1, func(lo, hi int) {
		bufs := packPool.Get().(*packBufs)
		defer packPool.Put(bufs)
		for oy0 := lo; oy0 < hi; oy0 += chunkRows {
			oy1 := min(hi, oy0+chunkRows)
			w.chunk(arch, pa, oy0, oy1, bufs, c, ldc, ep)
		}
	})
}

// chunk computes output rows [oy0, oy1) into c: the wide columns from
// oy0·pitch through the last valid one of row oy1−1, into bufs.tmp, then
// copied out with ep applied.
func (w *wideConv) chunk(arch *gemmArch, pa *PackedA, oy0, oy1 int, bufs *packBufs, c []float32, ldc int, ep *Epilogue) {
	m, k := pa.m, pa.k
	mr, nr := arch.mr, arch.nr
	ow, pitch := w.g.Out[1], w.pitch
	j0, n := oy0*pitch, (oy1-oy0-1)*pitch+ow
	ldw := roundUp(n, nr)
	bufs.tmp = grow(bufs.tmp, roundUp(m, mr)*ldw)
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
		for ic := 0; ic < m; ic += arch.mc {
			mc := min(arch.mc, m-ic)
			if last && rowEp && arch.tileIEp != nil {
				bufs.ep = ep.rowParams(bufs.ep, ic, mc)
			}
			apack := pa.block(pc, ic)
			for jr := 0; jr < n; jr += nr {
				b := &w.xw[j0+jr]
				for ir := 0; ir < mc; ir += mr {
					rows := min(mr, mc-ir)
					ap := &apack[ir*kc]
					ci := (ic+ir)*ldw + jr
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
	for i := range m {
		src, dst := cw[i*ldw:], c[i*ldc+oy0*ow:]
		for oy := range oy1 - oy0 {
			copy(dst[oy*ow:(oy+1)*ow], src[oy*pitch:oy*pitch+ow])
		}
	}
	if ep != nil && !rowEp {
		ep.apply(c[oy0*ow:], ldc, 0, oy0*ow, m, (oy1-oy0)*ow)
	}
}

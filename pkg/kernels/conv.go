package kernels

import (
	"math"
	"sync"
)

// ConvGeom describes an N-dimensional convolution or pooling window over
// one image: spatial input sizes In, kernel sizes Kernel, Strides,
// Dilations, leading pads PadBegin and the resulting output sizes Out.
type ConvGeom struct {
	In, Kernel, Strides, Dilations, PadBegin, Out []int
}

// InSize is the number of spatial input positions.
func (g *ConvGeom) InSize() int { return prod(g.In) }

// OutSize is the number of spatial output positions.
func (g *ConvGeom) OutSize() int { return prod(g.Out) }

// KernelSize is the number of kernel positions.
func (g *ConvGeom) KernelSize() int { return prod(g.Kernel) }

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Im2col lowers channels image planes x (c × InSize, row-major) to the
// column matrix col (c·KernelSize × OutSize) so that a convolution becomes a
// GEMM of the weights (m × c·KernelSize) with col:
//
//	for ch < c, kernel position kp, output position op:
//	    col[(ch·KernelSize+kp)·OutSize + op] = x[ch·InSize + ip]
//	where ip[d] = op[d]·Strides[d] − PadBegin[d] + kp[d]·Dilations[d],
//	and 0 when ip falls outside the input (zero padding).
func Im2col(g *ConvGeom, c int, x, col []float32) {
	if len(g.In) == 2 {
		im2col2D(g, c, x, col)
		return
	}
	colWalk(g, c, func(ci, xi int) {
		if xi < 0 {
			col[ci] = 0
		} else {
			col[ci] = x[xi]
		}
	})
}

func im2col2D(g *ConvGeom, c int, x, col []float32) {
	ks := g.Kernel[0] * g.Kernel[1]
	im2col2DRange(g, x, col, 0, c*ks)
}

// im2col2DRange writes rows [r0, r1) of the 2-D column matrix (row r is
// channel r/KernelSize at kernel position r%KernelSize). The valid output
// columns of each kernel position are computed once, so the inner loop is
// a copy (stride 1) or a strided gather without bounds branches.
func im2col2DRange(g *ConvGeom, x, col []float32, r0, r1 int) {
	ih, iw := g.In[0], g.In[1]
	kh, kw := g.Kernel[0], g.Kernel[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	dh, dw := g.Dilations[0], g.Dilations[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	os := oh * ow
	ks := kh * kw
	for r := r0; r < r1; r++ {
		ch, kp := r/ks, r%ks
		ky, kx := kp/kw, kp%kw
		xc := x[ch*ih*iw : (ch+1)*ih*iw]
		row := col[r*os : (r+1)*os]
		// Output columns ox in [lo, hi) read inside the input row.
		off := kx*dw - pw
		lo := 0
		if off < 0 {
			lo = (-off + sw - 1) / sw
		}
		hi := 0
		if iw-off > 0 {
			hi = min(ow, (iw-off+sw-1)/sw)
		}
		lo = min(lo, hi)
		for oy := 0; oy < oh; oy++ {
			y := oy*sh - ph + ky*dh
			out := row[oy*ow : (oy+1)*ow]
			if y < 0 || y >= ih {
				clear(out)
				continue
			}
			xr := xc[y*iw : (y+1)*iw]
			clear(out[:lo])
			clear(out[hi:])
			if sw == 1 {
				copy(out[lo:hi], xr[lo+off:hi+off])
				continue
			}
			src := lo*sw + off
			for ox := lo; ox < hi; ox++ {
				out[ox] = xr[src]
				src += sw
			}
		}
	}
}

// Im2colParallel is Im2col with the rows of the column matrix split over
// up to threads workers of the shared pool (2-D windows; other ranks run
// Im2col on the caller).
func Im2colParallel(threads int, g *ConvGeom, c int, x, col []float32) {
	if len(g.In) != 2 {
		Im2col(g, c, x, col)
		return
	}
	rows := c * g.KernelSize()
	grain := max(1, (1<<14)/max(1, g.OutSize()))
	Parallel(threads, rows, grain, func(lo, hi int) { im2col2DRange(g, x, col, lo, hi) })
}

// Depthwise2D computes a 2-D convolution with one filter per channel
// (group = channels, one output channel per group) for channels [c0, c1)
// of one image, then the epilogue's bias and activation (RowBias indexed by
// channel):
//
//	y[ch, oy, ox] = Σ_{ky,kx} w[ch, ky, kx] · x[ch, oy·sh−ph+ky·dh, ox·sw−pw+kx·dw]
//
// with zero padding, summing kernel positions in row-major order.
func Depthwise2D(g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) {
	if g.Kernel[0] == 3 && g.Kernel[1] == 3 && g.Dilations[0] == 1 && g.Dilations[1] == 1 && (g.Strides[1] == 1 || g.Strides[1] == 2) {
		depthwise3x3(g, x, w, y, c0, c1, ep)
		return
	}
	depthwise2DGeneric(g, x, w, y, c0, c1, ep)
}

// depthwise2DGeneric is Depthwise2D for any window: per output row, each
// kernel position adds its product to the whole row (axpy).
func depthwise2DGeneric(g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) {
	ih, iw := g.In[0], g.In[1]
	kh, kw := g.Kernel[0], g.Kernel[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	dh, dw := g.Dilations[0], g.Dilations[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	for ch := c0; ch < c1; ch++ {
		xc := x[ch*ih*iw : (ch+1)*ih*iw]
		yc := y[ch*oh*ow : (ch+1)*oh*ow]
		wc := w[ch*kh*kw : (ch+1)*kh*kw]
		clear(yc)
		for oy := 0; oy < oh; oy++ {
			out := yc[oy*ow : (oy+1)*ow]
			for ky := 0; ky < kh; ky++ {
				iy := oy*sh - ph + ky*dh
				if iy < 0 || iy >= ih {
					continue
				}
				xr := xc[iy*iw : (iy+1)*iw]
				for kx := 0; kx < kw; kx++ {
					wv := wc[ky*kw+kx]
					off := kx*dw - pw
					lo := 0
					if off < 0 {
						lo = (-off + sw - 1) / sw
					}
					hi := 0
					if iw-off > 0 {
						hi = min(ow, (iw-off+sw-1)/sw)
					}
					if lo >= hi {
						continue
					}
					if sw == 1 {
						axpy(out[lo:hi], xr[lo+off:hi+off], wv)
						continue
					}
					src := lo*sw + off
					for ox := lo; ox < hi; ox++ {
						out[ox] += wv * xr[src]
						src += sw
					}
				}
			}
		}
		if ep != nil {
			ep.apply(yc, oh*ow, ch, 0, 1, oh*ow)
		}
	}
}

// depthwise3x3 is Depthwise2D for 3×3 kernels without dilation and a
// column stride of 1 or 2. Each channel is copied into a zero-padded plane
// so that every output row runs in dwRow3, eight outputs at a time, each
// accumulated in a register over the kernel positions in row-major order.
// The padded taps add w·0 = ±0, which leaves every sum unchanged (the sum
// starts at +0 and never becomes −0 under round-to-nearest), so the result
// is bit-identical to skipping them, as the definition does, whenever the
// channel's weights are finite; channels with a non-finite weight (where
// Inf·0 would be NaN) run the generic loop.
func depthwise3x3(g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) {
	ih, iw := g.In[0], g.In[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	// Padded row ox·sw + kx of output column ox, row oy·sh + ky of output
	// row oy; a lone short vector (ow < 8) still reads 8 outputs' taps.
	wp := max(pw+iw, (ow-1)*sw+3, 7*sw+3)
	hp := max(ph+ih, (oh-1)*sh+3)
	bp := dwPool.Get().(*[]float32)
	defer dwPool.Put(bp)
	if cap(*bp) < hp*wp {
		*bp = make([]float32, hp*wp)
	}
	pad := (*bp)[:hp*wp]
	clear(pad)
	var tmp [8]float32
	for ch := c0; ch < c1; ch++ {
		yc := y[ch*oh*ow : (ch+1)*oh*ow]
		wc := w[ch*9 : ch*9+9]
		if !allFinite(wc) {
			depthwise2DGeneric(g, x, w, y, ch, ch+1, ep)
			continue
		}
		xc := x[ch*ih*iw : (ch+1)*ih*iw]
		for iy := 0; iy < ih; iy++ {
			copy(pad[(ph+iy)*wp+pw:], xc[iy*iw:(iy+1)*iw])
		}
		for oy := 0; oy < oh; oy++ {
			out := yc[oy*ow : (oy+1)*ow]
			rows := pad[oy*sh*wp:]
			if ow < 8 {
				dwRow3(tmp[:], rows, wp, 3, sw, wc)
				copy(out, tmp[:])
				continue
			}
			nv := ow &^ 7
			dwRow3(out[:nv], rows, wp, 3, sw, wc)
			if nv < ow {
				// One more vector ending at ow, recomputing a few outputs
				// with the same operations.
				dwRow3(out[ow-8:], rows[(ow-8)*sw:], wp, 3, sw, wc)
			}
		}
		if ep != nil {
			ep.apply(yc, oh*ow, ch, 0, 1, oh*ow)
		}
	}
}

var dwPool = sync.Pool{New: func() any { return new([]float32) }}

func allFinite(s []float32) bool {
	for _, v := range s {
		if math.IsInf(float64(v), 0) || v != v {
			return false
		}
	}
	return true
}

// dwRow3Go is the reference of dwRow3: for j < len(out), every tap inside,
//
//	acc = +0
//	for r < nr, kx < 3: acc += float32(w[3r+kx] · x[r·ldx + stride·j + kx])
//	out[j] = acc
func dwRow3Go(out, x []float32, ldx, nr, stride int, w []float32) {
	for j := range out {
		var acc float32
		for r := 0; r < nr; r++ {
			xr := x[r*ldx+stride*j:]
			acc += float32(w[3*r] * xr[0])
			acc += float32(w[3*r+1] * xr[1])
			acc += float32(w[3*r+2] * xr[2])
		}
		out[j] = acc
	}
}

// inputIndex is the flat input index that output position opos reads
// through kernel position kp; ok is false when it falls in the padding.
func (g *ConvGeom) inputIndex(opos, kp []int) (idx int, ok bool) {
	for d := range g.In {
		p := opos[d]*g.Strides[d] - g.PadBegin[d] + kp[d]*g.Dilations[d]
		if p < 0 || p >= g.In[d] {
			return 0, false
		}
		idx = idx*g.In[d] + p
	}
	return idx, true
}

// Col2im is the adjoint of Im2col, used by transposed convolution: it
// accumulates the column matrix back into image planes (x must be zeroed
// by the caller when a plain scatter is wanted):
//
//	for ch < c, kernel position kp, output position op with ip inside:
//	    x[ch·InSize + ip] += col[(ch·KernelSize+kp)·OutSize + op]
func Col2im(g *ConvGeom, c int, col, x []float32) {
	colWalk(g, c, func(ci, xi int) {
		if xi >= 0 {
			x[xi] += col[ci]
		}
	})
}

// colWalk calls visit(ci, xi) for every element of the column matrix of c
// channels under g, in order: ci is its index in the matrix, xi the index
// of the input element it stands for, −1 in the zero padding.
func colWalk(g *ConvGeom, c int, visit func(ci, xi int)) {
	nd := len(g.In)
	ks, os, is := g.KernelSize(), g.OutSize(), g.InSize()
	kp := make([]int, nd)
	opos := make([]int, nd)
	ci := 0
	for ch := 0; ch < c; ch++ {
		for k := 0; k < ks; k++ {
			unravel(k, g.Kernel, kp)
			for o := 0; o < os; o++ {
				unravel(o, g.Out, opos)
				xi := -1
				if idx, ok := g.inputIndex(opos, kp); ok {
					xi = ch*is + idx
				}
				visit(ci, xi)
				ci++
			}
		}
	}
}

// unravel writes the row-major multi-index of flat index i over dims into idx.
func unravel(i int, dims, idx []int) {
	for d := len(dims) - 1; d >= 0; d-- {
		idx[d] = i % dims[d]
		i /= dims[d]
	}
}

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
	ih, iw := g.In[0], g.In[1]
	kh, kw := g.Kernel[0], g.Kernel[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	dh, dw := g.Dilations[0], g.Dilations[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	is, os := ih*iw, oh*ow
	if isMax && argmax == nil {
		maxPool2D(g, c0, c1, x, y)
		return
	}
	for ch := c0; ch < c1; ch++ {
		xc := x[ch*is : (ch+1)*is]
		for oy := 0; oy < oh; oy++ {
			y0 := oy*sh - ph
			for ox := 0; ox < ow; ox++ {
				x0 := ox*sw - pw
				var acc float32
				if isMax {
					acc = float32negInf
				}
				n, best := 0, -1
				npadY, npadX := 0, 0
				for ky := 0; ky < kh; ky++ {
					yy := y0 + ky*dh
					if yy >= -ph && yy < ih+padEnd[0] {
						npadY++
					}
					if yy < 0 || yy >= ih {
						continue
					}
					xr := xc[yy*iw : (yy+1)*iw]
					for kx := 0; kx < kw; kx++ {
						xx := x0 + kx*dw
						if xx < 0 || xx >= iw {
							continue
						}
						n++
						v := xr[xx]
						if isMax {
							if v > acc || best < 0 {
								acc, best = v, yy*iw+xx
							}
						} else {
							acc += v
						}
					}
				}
				if !isMax {
					div := n
					if countPad {
						for kx := 0; kx < kw; kx++ {
							if xx := x0 + kx*dw; xx >= -pw && xx < iw+padEnd[1] {
								npadX++
							}
						}
						div = npadY * npadX
					}
					if div > 0 {
						acc /= float32(div)
					}
				}
				o := oy*ow + ox
				y[ch*os+o] = acc
				if argmax != nil {
					argmax[ch*os+o] = int64(ch*is + max(best, 0))
				}
			}
		}
	}
}

// maxPool2D is pool2D's max without argmax: the window's inside positions
// are clipped once per output, and the running maximum starts at the first
// inside element exactly as the definition does (so a leading NaN stays).
func maxPool2D(g *ConvGeom, c0, c1 int, x, y []float32) {
	ih, iw := g.In[0], g.In[1]
	kh, kw := g.Kernel[0], g.Kernel[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	dh, dw := g.Dilations[0], g.Dilations[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	is, os := ih*iw, oh*ow
	// kx range inside the input for each output column.
	kxLo, kxHi := make([]int, ow), make([]int, ow)
	for ox := 0; ox < ow; ox++ {
		x0 := ox*sw - pw
		lo, hi := 0, kw
		for lo < kw && x0+lo*dw < 0 {
			lo++
		}
		for hi > lo && x0+(hi-1)*dw >= iw {
			hi--
		}
		kxLo[ox], kxHi[ox] = lo, hi
	}
	// [oxA, oxB) are the output columns whose window lies inside the row:
	// those fold whole input rows with maxRow, a lane per column.
	oxA, oxB := 0, ow
	for oxA < ow && (kxLo[oxA] != 0 || kxHi[oxA] != kw) {
		oxA++
	}
	for oxB > oxA && (kxLo[oxB-1] != 0 || kxHi[oxB-1] != kw) {
		oxB--
	}
	for ox := oxA; ox < oxB; ox++ {
		if kxLo[ox] != 0 || kxHi[ox] != kw {
			oxA, oxB = 0, 0 // not contiguous: no row path
			break
		}
	}
	for ch := c0; ch < c1; ch++ {
		xc := x[ch*is : (ch+1)*is]
		yc := y[ch*os : (ch+1)*os]
		for oy := 0; oy < oh; oy++ {
			y0 := oy*sh - ph
			kyLo, kyHi := 0, kh
			for kyLo < kh && y0+kyLo*dh < 0 {
				kyLo++
			}
			for kyHi > kyLo && y0+(kyHi-1)*dh >= ih {
				kyHi--
			}
			a, b := oxA, oxB
			if kyLo == kyHi {
				a, b = 0, 0
			}
			if a < b {
				yr := yc[oy*ow+a : oy*ow+b]
				first := true
				for ky := kyLo; ky < kyHi; ky++ {
					xr := xc[(y0+ky*dh)*iw:]
					for kx := 0; kx < kw; kx++ {
						maxRow(yr, xr[a*sw-pw+kx*dw:], sw, first)
						first = false
					}
				}
			}
			for ox := 0; ox < ow; ox++ {
				if ox == a && a < b {
					ox = b - 1
					continue
				}
				x0 := ox*sw - pw
				acc, first := float32negInf, true
				for ky := kyLo; ky < kyHi; ky++ {
					xr := xc[(y0+ky*dh)*iw:]
					for kx := kxLo[ox]; kx < kxHi[ox]; kx++ {
						v := xr[x0+kx*dw]
						if first {
							acc, first = v, false
						} else if v > acc {
							acc = v
						}
					}
				}
				yc[oy*ow+ox] = acc
			}
		}
	}
}

// convB is the column matrix of a 2-D image as a GEMM's B operand
// (SgemmConv): Im2col(g, c, x) without the matrix. x holds the image
// planes zero-padded to hp×wp, the leading pads included, so that every
// window of g lies inside them.
type convB struct {
	g      *ConvGeom
	x      []float32
	hp, wp int
}

var padPool = sync.Pool{New: func() any { return new([]float32) }}

// newConvB returns the column matrix of the c planes of x under the 2-D
// geometry g, and a function that releases its padded copy of x (when it
// needed one).
func newConvB(g *ConvGeom, c int, x []float32) (*convB, func()) {
	ih, iw := g.In[0], g.In[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	hp := max(ih+ph, (g.Out[0]-1)*g.Strides[0]+(g.Kernel[0]-1)*g.Dilations[0]+1)
	wp := max(iw+pw, (g.Out[1]-1)*g.Strides[1]+(g.Kernel[1]-1)*g.Dilations[1]+1)
	if hp == ih && wp == iw {
		return &convB{g: g, x: x[:c*ih*iw], hp: ih, wp: iw}, func() {}
	}
	bp := padPool.Get().(*[]float32)
	*bp = grow(*bp, c*hp*wp)
	xp := (*bp)[:c*hp*wp]
	clear(xp)
	for ch := 0; ch < c; ch++ {
		for y := 0; y < ih; y++ {
			copy(xp[(ch*hp+ph+y)*wp+pw:], x[(ch*ih+y)*iw:(ch*ih+y+1)*iw])
		}
	}
	return &convB{g: g, x: xp, hp: hp, wp: wp}, func() { padPool.Put(bp) }
}

// packBConv packs the kc×nc block at (pc, jc) of cb's column matrix as
// packB would pack it from Im2col's output, reading the padded image. Each
// row of the block is one (channel, kernel position); each run of columns
// that stays inside one panel and one output row reads one input row of
// the padded image, with a copy (column stride 1) or a strided gather.
// Panels are written one after the other, row by row, so the stores stay
// sequential.
func packBConv(cb *convB, pc, jc, kc, nc, nr int, dst []float32) {
	g, x, wp := cb.g, cb.x, cb.wp
	kh, kw := g.Kernel[0], g.Kernel[1]
	ow := g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	dh, dw := g.Dilations[0], g.Dilations[1]
	ks := kh * kw
	plane := cb.hp * wp
	// rowOff holds, for up to len(rowOff) rows of the block, the offset
	// in x of the input read by output position (0, 0).
	var rowOff [256]int
	// segs holds one panel's runs of columns inside one output row: the
	// offset of the run's first input from its row's, the run's first
	// column in the panel and its length.
	type seg struct{ src, j, n int }
	segs := make([]seg, 0, 64)
	for p0 := 0; p0 < kc; p0 += len(rowOff) {
		pn := min(len(rowOff), kc-p0)
		for p := range pn {
			r := pc + p0 + p
			ch, kp := r/ks, r%ks
			ky, kx := kp/kw, kp%kw
			rowOff[p] = ch*plane + ky*dh*wp + kx*dw
		}
		for j0 := 0; j0 < nc; j0 += nr {
			cols := min(nr, nc-j0)
			segs = segs[:0]
			o := jc + j0
			oy, ox := o/ow, o%ow
			for j := 0; j < cols; {
				n := min(cols-j, ow-ox)
				segs = append(segs, seg{src: oy*sh*wp + ox*sw, j: j, n: n})
				j += n
				oy, ox = oy+1, 0
			}
			panel := dst[j0*kc : j0*kc+nr*kc]
			for p := range pn {
				d := panel[(p0+p)*nr : (p0+p)*nr+nr]
				if cols < nr {
					clear(d[cols:])
				}
				base := rowOff[p]
				for _, s := range segs {
					src := base + s.src
					if sw == 1 {
						copy(d[s.j:s.j+s.n], x[src:src+s.n])
						continue
					}
					out := d[s.j : s.j+s.n]
					for i := range out {
						out[i] = x[src]
						src += sw
					}
				}
			}
		}
	}
}

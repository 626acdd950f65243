package kernels

import (
	"math"
	"sync"
)

// Depthwise2D computes a 2-D convolution with one filter per channel
// (group = channels, one output channel per group) for channels [c0, c1)
// of one image, then the epilogue's bias and activation (RowBias indexed by
// channel):
//
//	y[ch, oy, ox] = Σ_{ky,kx} w[ch, ky, kx] · x[ch, oy·sh−ph+ky·dh, ox·sw−pw+kx·dw]
//
// with zero padding, summing kernel positions in row-major order.
func Depthwise2D(g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) {
	square := g.Kernel[0] == g.Kernel[1] && g.Dilations[0] == 1 && g.Dilations[1] == 1 && (g.Strides[1] == 1 || g.Strides[1] == 2)
	if square && (g.Kernel[0] == 3 || g.Kernel[0] == 5) {
		depthwiseSquare(g.Kernel[0], g, x, w, y, c0, c1, ep)
		return
	}
	depthwise2DGeneric(g, x, w, y, c0, c1, ep)
}

// depthwise2DGeneric is Depthwise2D for any window: per output row, each
// kernel position adds its product to the whole row (axpy).
func depthwise2DGeneric(g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) {
	d := g.plane2D()
	for ch := c0; ch < c1; ch++ {
		xc := x[ch*d.ih*d.iw : (ch+1)*d.ih*d.iw]
		yc := y[ch*d.oh*d.ow : (ch+1)*d.oh*d.ow]
		wc := w[ch*d.kh*d.kw : (ch+1)*d.kh*d.kw]
		clear(yc)
		for oy := 0; oy < d.oh; oy++ {
			out := yc[oy*d.ow : (oy+1)*d.ow]
			for ky := 0; ky < d.kh; ky++ {
				iy := oy*d.sh - d.ph + ky*d.dh
				if iy < 0 || iy >= d.ih {
					continue
				}
				xr := xc[iy*d.iw : (iy+1)*d.iw]
				for kx := 0; kx < d.kw; kx++ {
					wv := wc[ky*d.kw+kx]
					off := kx*d.dw - d.pw
					lo, hi := insideColumns(off, d.iw, d.ow, d.sw)
					if lo >= hi {
						continue
					}
					if d.sw == 1 {
						axpy(out[lo:hi], xr[lo+off:hi+off], wv)
						continue
					}
					src := lo*d.sw + off
					for ox := lo; ox < hi; ox++ {
						out[ox] += float32(wv * xr[src])
						src += d.sw
					}
				}
			}
		}
		if ep != nil {
			ep.apply(yc, d.oh*d.ow, ch, 0, 1, d.oh*d.ow)
		}
	}
}

// depthwiseSquare is Depthwise2D for size×size kernels (size 3 or 5)
// without dilation and a column stride of 1 or 2. With AVX-512 and equal
// strides it runs in depthwiseAVX512. Otherwise each channel is copied
// into a zero-padded plane so that every output row runs in dwRow, eight
// outputs at a time, each accumulated in a register over the kernel
// positions in row-major order. Either way the taps in the padding add
// w·0 = ±0, which leaves every sum unchanged (the sum starts at +0 and
// never becomes −0 under round-to-nearest), so the result is
// bit-identical to skipping them, as the definition does, whenever the
// channel's weights are finite; channels with a non-finite weight (where
// Inf·0 would be NaN) run the generic loop.
func depthwiseSquare(size int, g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) {
	if depthwiseAVX512(size, g, x, w, y, c0, c1, ep) {
		return
	}
	ih, iw := g.In[0], g.In[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	// Padded row ox·sw + kx of output column ox, row oy·sh + ky of output
	// row oy; a lone short vector (ow < 8) still reads 8 outputs' taps.
	wp := max(pw+iw, (ow-1)*sw+size, 7*sw+size)
	hp := max(ph+ih, (oh-1)*sh+size)
	bp := dwPool.Get().(*[]float32)
	defer dwPool.Put(bp)
	if cap(*bp) < hp*wp {
		*bp = make([]float32, hp*wp)
	}
	pad := (*bp)[:hp*wp]
	clear(pad)
	is, os, ks := g.InSize(), g.OutSize(), size*size
	depthwiseFiniteRuns(size, g, x, w, y, c0, c1, ep, func(a, b int) {
		for ch := a; ch < b; ch++ {
			depthwisePadded(size, g, pad, wp, x[ch*is:(ch+1)*is], y[ch*os:(ch+1)*os], w[ch*ks:(ch+1)*ks], ch, ep)
		}
	})
}

// depthwisePadded computes channel ch (input xc, output yc, weights wc)
// through pad, a zero-padded plane of row pitch wp whose padding it
// leaves zero.
func depthwisePadded(size int, g *ConvGeom, pad []float32, wp int, xc, yc, wc []float32, ch int, ep *Epilogue) {
	ih, iw := g.In[0], g.In[1]
	oh, ow := g.Out[0], g.Out[1]
	sh, sw := g.Strides[0], g.Strides[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	for iy := 0; iy < ih; iy++ {
		copy(pad[(ph+iy)*wp+pw:], xc[iy*iw:(iy+1)*iw])
	}
	var tmp [8]float32
	for oy := 0; oy < oh; oy++ {
		out := yc[oy*ow : (oy+1)*ow]
		rows := pad[oy*sh*wp:]
		if ow < 8 {
			dwRow(tmp[:], rows, wp, size, size, sw, wc)
			copy(out, tmp[:])
			continue
		}
		nv := ow &^ 7
		dwRow(out[:nv], rows, wp, size, size, sw, wc)
		if nv < ow {
			// One more vector ending at ow, recomputing a few outputs
			// with the same operations.
			dwRow(out[ow-8:], rows[(ow-8)*sw:], wp, size, size, sw, wc)
		}
	}
	if ep != nil {
		ep.apply(yc, oh*ow, ch, 0, 1, oh*ow)
	}
}

// depthwiseFiniteRuns calls run for each maximal range [a, b) of the
// channels in [c0, c1) whose size×size weights are all finite; the other
// channels run depthwise2DGeneric.
func depthwiseFiniteRuns(size int, g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue, run func(a, b int)) {
	ks := size * size
	a := c0
	for ch := c0; ch < c1; ch++ {
		if allFinite(w[ch*ks : (ch+1)*ks]) {
			continue
		}
		if a < ch {
			run(a, ch)
		}
		depthwise2DGeneric(g, x, w, y, ch, ch+1, ep)
		a = ch + 1
	}
	if a < c1 {
		run(a, c1)
	}
}

var dwPool = sync.Pool{New: func() any { return new([]float32) }}

// allFinite reports whether no element of s is ±Inf or NaN (an exponent
// of all ones), with one test per element on its bits.
func allFinite(s []float32) bool {
	for _, v := range s {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return false
		}
	}
	return true
}

// dwRowGo is the reference of dwRow: for j < len(out), every tap inside,
//
//	acc = +0
//	for r < nr, kx < size: acc += float32(w[size·r+kx] · x[r·ldx + stride·j + kx])
//	out[j] = acc
func dwRowGo(out, x []float32, ldx, nr, size, stride int, w []float32) {
	for j := range out {
		var acc float32
		for r := 0; r < nr; r++ {
			xr, wr := x[r*ldx+stride*j:], w[size*r:size*r+size]
			for kx, wv := range wr {
				acc += float32(wv * xr[kx])
			}
		}
		out[j] = acc
	}
}

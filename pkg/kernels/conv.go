package kernels

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

// geom2D is a 2-D ConvGeom unpacked for the loops over its planes: input
// ih×iw, kernel kh×kw, output oh×ow, strides, dilations and leading pads.
// It is comparable, so it also keys per-geometry caches.
type geom2D struct{ ih, iw, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw int }

// plane2D returns the 2-D geometry g unpacked.
func (g *ConvGeom) plane2D() geom2D {
	return geom2D{g.In[0], g.In[1], g.Kernel[0], g.Kernel[1], g.Out[0], g.Out[1],
		g.Strides[0], g.Strides[1], g.Dilations[0], g.Dilations[1], g.PadBegin[0], g.PadBegin[1]}
}

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
	d := g.plane2D()
	os := d.oh * d.ow
	ks := d.kh * d.kw
	for r := r0; r < r1; r++ {
		ch, kp := r/ks, r%ks
		ky, kx := kp/d.kw, kp%d.kw
		xc := x[ch*d.ih*d.iw : (ch+1)*d.ih*d.iw]
		row := col[r*os : (r+1)*os]
		// Output columns ox in [lo, hi) read inside the input row.
		off := kx*d.dw - d.pw
		lo, hi := insideColumns(off, d.iw, d.ow, d.sw)
		lo = min(lo, hi)
		for oy := 0; oy < d.oh; oy++ {
			y := oy*d.sh - d.ph + ky*d.dh
			out := row[oy*d.ow : (oy+1)*d.ow]
			if y < 0 || y >= d.ih {
				clear(out)
				continue
			}
			xr := xc[y*d.iw : (y+1)*d.iw]
			clear(out[:lo])
			clear(out[hi:])
			if d.sw == 1 {
				if lo < hi { // none when the tap lies wholly in the padding
					copy(out[lo:hi], xr[lo+off:hi+off])
				}
				continue
			}
			src := lo*d.sw + off
			for ox := lo; ox < hi; ox++ {
				out[ox] = xr[src]
				src += d.sw
			}
		}
	}
}

// insideColumns returns the output columns [lo, hi) of a row of ow outputs
// (column stride sw) whose input column ox·sw + off lies inside [0, iw).
func insideColumns(off, iw, ow, sw int) (lo, hi int) {
	if off < 0 {
		lo = (-off + sw - 1) / sw
	}
	if iw-off > 0 {
		hi = min(ow, (iw-off+sw-1)/sw)
	}
	return lo, hi
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
	if len(g.In) == 2 {
		col2im2D(g, 0, c, col, x)
		return
	}
	colWalk(g, c, func(ci, xi int) {
		if xi >= 0 {
			x[xi] += col[ci]
		}
	})
}

// Col2imParallel is Col2im with the channels split over threads. Each
// element takes the same additions in the same order whatever the split.
func Col2imParallel(threads int, g *ConvGeom, c int, col, x []float32) {
	if len(g.In) != 2 {
		Col2im(g, c, col, x)
		return
	}
	Parallel(threads, c, max(1, (1<<15)/max(1, g.KernelSize()*g.OutSize())), func(lo, hi int) {
		col2im2D(g, lo, hi, col, x)
	})
}

// col2im2D is Col2im of channels [c0, c1) for a 2-D geometry: the same
// additions in the same order (channel, kernel row, kernel column,
// output row, output column), with each kernel column's range of output
// columns inside the image computed once.
func col2im2D(g *ConvGeom, c0, c1 int, col, x []float32) {
	ih, iw, oh, ow := g.In[0], g.In[1], g.Out[0], g.Out[1]
	kh, kw, sh, sw := g.Kernel[0], g.Kernel[1], g.Strides[0], g.Strides[1]
	dh, dw, ph, pw := g.Dilations[0], g.Dilations[1], g.PadBegin[0], g.PadBegin[1]
	ks, os, is := kh*kw, oh*ow, ih*iw
	for ch := c0; ch < c1; ch++ {
		xp := x[ch*is : (ch+1)*is]
		for ky := range kh {
			for kx := range kw {
				cp := col[(ch*ks+ky*kw+kx)*os : (ch*ks+ky*kw+kx+1)*os]
				// Output column ox reads image column ox·sw + x0, inside
				// for ox in [lo, hi).
				x0 := kx*dw - pw
				lo, hi := 0, 0
				if x0 < 0 {
					lo = ceilDiv(-x0, sw)
				}
				if last := iw - 1 - x0; last >= 0 {
					hi = min(ow, last/sw+1)
				}
				for oy := range oh {
					iy := oy*sh - ph + ky*dh
					if iy < 0 || iy >= ih || lo >= hi {
						continue
					}
					row, cr := xp[iy*iw:(iy+1)*iw], cp[oy*ow:(oy+1)*ow]
					if sw == 1 {
						dst := row[lo+x0 : hi+x0]
						for i, v := range cr[lo:hi] {
							dst[i] += v
						}
						continue
					}
					for ox := lo; ox < hi; ox++ {
						row[ox*sw+x0] += cr[ox]
					}
				}
			}
		}
	}
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

package kernels

import "sync"

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

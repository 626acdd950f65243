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

// paddedImages recycles the buffers of padded image layouts by key (a
// comparable value naming the layout) → a *sync.Pool of *[]float32. A
// buffer is zeroed when it is made, and the copies into a layout write
// the same elements at every use, so its padding stays zero and each use
// copies only the image's rows. Clearing each row's one-float pads and
// the padding rows around every plane, a runtime call per pad, had cost
// more than the copy (18 % of a 64×16×16 convolution at two threads).
var paddedImages sync.Map

// paddedImage returns a buffer of n floats for the layout key, zero where
// the layout's copies never write, and the function that gives it back.
func paddedImage(key any, n int) ([]float32, func()) {
	bufs, ok := paddedImages.Load(key)
	if !ok {
		bufs, _ = paddedImages.LoadOrStore(key, &sync.Pool{New: func() any {
			xp := make([]float32, n)
			return &xp
		}})
	}
	pool := bufs.(*sync.Pool)
	bp := pool.Get().(*[]float32)
	return *bp, func() { pool.Put(bp) }
}

type paddedKey struct{ c, ih, iw, hp, wp, ph, pw int }

// newConvB returns the column matrix of the c planes of x under the 2-D
// geometry g, and a function that releases its padded copy of x (when it
// needed one). The copy is split over up to threads threads by planes.
// A padded copy is only read: its padding stays zero across uses.
func newConvB(threads int, g *ConvGeom, c int, x []float32) (*convB, func()) {
	ih, iw := g.In[0], g.In[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	hp := max(ih+ph, (g.Out[0]-1)*g.Strides[0]+(g.Kernel[0]-1)*g.Dilations[0]+1)
	wp := max(iw+pw, (g.Out[1]-1)*g.Strides[1]+(g.Kernel[1]-1)*g.Dilations[1]+1)
	if hp == ih && wp == iw {
		return &convB{g: g, x: x[:c*ih*iw], hp: ih, wp: iw}, func() {}
	}
	xp, release := paddedImage(paddedKey{c, ih, iw, hp, wp, ph, pw}, c*hp*wp+packSlack)
	plane := hp * wp
	Parallel(threads, c, max(1, wideCopyGrain/plane), func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			for y := range ih {
				copy(xp[ch*plane+(ph+y)*wp+pw:], x[(ch*ih+y)*iw:(ch*ih+y+1)*iw])
			}
		}
	})
	return &convB{g: g, x: xp, hp: hp, wp: wp}, release
}

// packSlack is room left past the end of a padded image, so that
// packBConv's block moves (packRuns) near its end stay inside it.
const packSlack = 32

// packBConv packs the kc×nc block at (pc, jc) of cb's column matrix as
// packB would pack it from Im2col's output, reading the padded image. Each
// row of the block is one (channel, kernel position); each run of columns
// that stays inside one panel and one output row reads one input row of
// the padded image, with a copy (column stride 1) or a strided gather.
//
// The runs of a panel row are short (an output row of a small image, or
// the piece of one that a panel boundary cuts): the panel is written run
// by run, each run into all of the block's rows in one tight loop
// (packRuns), instead of row by row with a loop over the runs and a call
// into memmove for each.
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
			last := rowOff[pn-1]
			for _, sg := range segs {
				// A block must end inside its row (the next row's earlier
				// runs are already written) and inside x.
				blk := moveBlock(sg.n)
				if sg.j+blk > nr || last+sg.src+(sg.n-1)*sw+blk > len(x) {
					blk = 0
				}
				packRuns(panel[p0*nr:], nr, x, rowOff[:pn], sg.src, sg.j, sg.n, sw, blk)
			}
			if cols < nr {
				for p := range pn {
					clear(panel[(p0+p)*nr+cols : (p0+p+1)*nr])
				}
			}
		}
	}
}

// moveBlock is the smallest block of 4, 8, 16 or 32 floats that holds a
// run of n.
func moveBlock(n int) int {
	switch {
	case n <= 4:
		return 4
	case n <= 8:
		return 8
	case n <= 16:
		return 16
	}
	return 32
}

// packRuns writes one run of n columns, starting at column j, into each
// row p of a panel of nr columns: the inputs at off[p] + src + i·sw. With
// column stride 1 and blk > 0 the run moves as one block of blk floats,
// which the compiler moves inline (a call into memmove per run cost more
// than the move itself for these runs of a few dozen bytes): the block
// reads past the run, inside x, and writes past it inside the row, onto
// the columns of the row's later runs or of a short panel's zero columns,
// which are written afterwards.
func packRuns(panel []float32, nr int, x []float32, off []int, src, j, n, sw, blk int) {
	switch {
	case sw != 1:
		for p, o := range off {
			out := panel[p*nr+j : p*nr+j+n]
			in := x[o+src : o+src+(n-1)*sw+1]
			for i := range out {
				out[i] = in[i*sw]
			}
		}
	case blk == 4:
		for p, o := range off {
			v := *(*[4]float32)(x[o+src:])
			*(*[4]float32)(panel[p*nr+j:]) = v
		}
	case blk == 8:
		for p, o := range off {
			v := *(*[8]float32)(x[o+src:])
			*(*[8]float32)(panel[p*nr+j:]) = v
		}
	case blk == 16:
		for p, o := range off {
			v := *(*[16]float32)(x[o+src:])
			*(*[16]float32)(panel[p*nr+j:]) = v
		}
	case blk == 32:
		for p, o := range off {
			v := *(*[32]float32)(x[o+src:])
			*(*[32]float32)(panel[p*nr+j:]) = v
		}
	default:
		for p, o := range off {
			copy(panel[p*nr+j:p*nr+j+n], x[o+src:o+src+n])
		}
	}
}

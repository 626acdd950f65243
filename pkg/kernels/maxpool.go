package kernels

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

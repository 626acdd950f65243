package kernels

// convRowPixels is the widest row tile of the convRow kernels.
const convRowPixels = 14

// convRowChannels is the output channels of a row tile: two vectors of 16.
const convRowChannels = 32

// Row tiles compute a convolution with the output channels in the vector
// lanes and the output pixels broadcast from the image: a tile is up to
// convRowPixels consecutive outputs of one output row by 32 output
// channels, and tap p of its pixel r reads the padded image at offs[p] +
// r·stride. Nothing is packed from the image and no lane is wasted on a
// dropped column, which is what the other layouts pay on small images:
// LeNet's 10×10 output fills 100 of the 160 wide columns of the padded
// layout. The price is the transposition of each tile into the NCHW
// output, and lanes wasted when the output channels are not a multiple of
// 32. Each output sums the same products in the same order, in the same
// kc blocks, as the packed product, so the result is the same bit for bit.

// convRowsEligible reports whether the row tiles can compute g on arch.
func convRowsEligible(arch *gemmArch, g *ConvGeom) bool {
	return arch.convRow != nil && len(g.In) == 2 && (g.Strides[1] == 1 || g.Strides[1] == 2)
}

// convRowTiles returns how many tiles an output row of ow pixels is cut
// into: as few as the kernels allow. Tile t covers columns [t·ow/tiles,
// (t+1)·ow/tiles), so their widths differ by at most one.
func convRowTiles(ow int) int { return ceilDiv(ow, convRowPixels) }

// convRowsCost is the cost in cycles of g by row tiles, in the units of
// PlanConv: each tap of a tile costs its 2·width multiply-adds (at
// least 4, the FMA latency over the accumulators of a narrow tile) per 32
// output channels, and each tile about 150 cycles more for its call,
// stores and transposition, fitted to BenchmarkSgemmConv.
func convRowsCost(g *ConvGeom, m, k int) float64 {
	oh, ow := g.Out[0], g.Out[1]
	tiles := convRowTiles(ow)
	cost := 0
	for t := range tiles {
		w := (t+1)*ow/tiles - t*ow/tiles
		cost += k*max(2*w, 4) + 150
	}
	return float64(ceilDiv(m, convRowChannels) * oh * cost)
}

// channelPanels returns A's rows in blocks of 32 with the rows in the
// lanes: block b holds k steps of 32 floats, step p lane j being A[32b +
// j][p] (0 past the last row). It is built from the packed panels on
// first use and kept.
func (p *PackedA) channelPanels() []float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.channels != nil {
		return p.channels
	}
	m, k, mr := p.m, p.k, p.arch.mr
	mp := roundUp(m, mr)
	blocks := ceilDiv(m, convRowChannels)
	out := make([]float32, blocks*k*convRowChannels)
	for pc := 0; pc < k; pc += p.arch.kc {
		kc := min(p.arch.kc, k-pc)
		panels := p.data[pc*mp:]
		for i := range m {
			panel := panels[i/mr*mr*kc:]
			dst := out[i/convRowChannels*k*convRowChannels+i%convRowChannels:]
			for q := range kc {
				dst[(pc+q)*convRowChannels] = panel[q*mr+i%mr]
			}
		}
	}
	p.channels = out
	return out
}

// sgemmConvRows is SgemmConv by row tiles. The work is blocks of 32
// channels by output rows, split over the threads in that order, so that
// a thread reads the weights of as few blocks as it can (ResNet-18's last
// convolutions have 590 KB of weights per block); each tile is computed
// in the kc blocks of the packed product, then transposed into c with a
// row epilogue applied on the way (convRowStore).
func sgemmConvRows(threads int, pa *PackedA, g *ConvGeom, x []float32, c []float32, ldc int, ep *Epilogue) {
	arch := pa.arch
	m, k := pa.m, pa.k
	ks := g.KernelSize()
	cb, release := newConvB(threads, g, k/ks, x)
	defer release()
	kw := g.Kernel[1]
	sh, sw := g.Strides[0], g.Strides[1]
	dh, dw := g.Dilations[0], g.Dilations[1]
	oh, ow := g.Out[0], g.Out[1]
	plane := cb.hp * cb.wp
	offs, releaseOffs := tapOffsets(k)
	defer releaseOffs()
	for p := range offs {
		ch, kp := p/ks, p%ks
		offs[p] = ch*plane + kp/kw*dh*cb.wp + kp%kw*dw
	}
	wt := pa.channelPanels()
	blocks := ceilDiv(m, convRowChannels)
	tiles := convRowTiles(ow)
	// The store applies a row epilogue, a residual and a Relu; others
	// run on each output row afterwards.
	fused := ep != nil && ep.ColBias == nil && (ep.Act == ActNone || ep.Act == ActRelu)
	rowParams := fused && (ep.RowBias != nil || ep.RowScale != nil)
	relu := fused && ep.Act == ActRelu
	units := oh * blocks
	Parallel(threads, units, 1, func(lo, hi int) {
		tb := packPool.Get().(*packBufs)
		defer packPool.Put(tb)
		// The store kernel reads 16 rows of the tile.
		tb.tmp = grow(tb.tmp, 16*convRowChannels)
		tile := tb.tmp[:16*convRowChannels]
		tb.ep = grow(tb.ep, 3*convRowChannels)
		var epRows, res *float32
		if rowParams {
			epRows = &tb.ep[0]
		}
		for u := lo; u < hi; u++ {
			blk, oy := u/oh, u%oh
			i0 := blk * convRowChannels
			mc := min(convRowChannels, m-i0)
			w := wt[blk*k*convRowChannels:]
			if rowParams {
				convRowEpilogue(ep, i0, mc, tb.ep)
			}
			for t := range tiles {
				ox0, ox1 := t*ow/tiles, (t+1)*ow/tiles
				xb := &cb.x[oy*sh*cb.wp+ox0*sw]
				for pc := 0; pc < k; pc += arch.kc {
					kc := min(arch.kc, k-pc)
					arch.convRow(ox1-ox0, sw, kc, xb, &offs[pc], &w[pc*convRowChannels], &tile[0], pc > 0)
				}
				at := i0*ldc + oy*ow + ox0
				if fused && ep.Residual != nil {
					res = &ep.Residual[at]
				}
				arch.convRowStore(&tile[0], ox1-ox0, &c[at], ldc, mc, epRows, res, relu, fused && ep.ResidualFirst)
			}
			if ep != nil && !fused {
				ep.apply(c[i0*ldc+oy*ow:], ldc, i0, oy*ow, mc, ow)
			}
		}
	})
}

// convRowEpilogue writes the row epilogue of channels [i0, i0+mc) for
// convRowStore to dst (3·32 floats): biases, scales, shifts, lanes past
// mc left as they are.
func convRowEpilogue(ep *Epilogue, i0, mc int, dst []float32) {
	for j := range mc {
		dst[j], dst[convRowChannels+j], dst[2*convRowChannels+j] = ep.rowParam(i0 + j)
	}
}

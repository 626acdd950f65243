package kernels

import "sync"

// gemmArch is one micro-kernel family: tiles of up to mr×nr, computed from
// A packed in panels of mr rows and B packed in panels of nr columns.
type gemmArch struct {
	name   string
	mr, nr int
	// kc, mc, nc are the cache blocks: a kc×nr B panel stays in L1, an
	// mc×kc A block in L2, a kc×nc B block in L2/L3.
	kc, mc, nc int
	// rows lists the row counts the kernels compute, descending; a tile
	// with fewer rows uses the smallest that covers it.
	rows []int
	// tile computes rows×nr of C from kc steps of packed panels a and b,
	// overwriting C (accumulate false) or adding to it.
	tile func(rows, kc int, a, b, c *float32, ldc int, accumulate bool)
	// tileEp, when set, is tile for mr rows followed by the row epilogue
	// ((v + b)·s) + t and an optional Relu in registers; bst holds mr
	// triples (b, s, t).
	tileEp func(kc int, a, b, c *float32, ldc int, accumulate bool, bst *float32, relu bool)
	// tileS and tileSEp, when set, are tile and tileEp reading B straight
	// from a row-major matrix (row stride ldb) instead of a packed panel:
	// the same values, so the same results bit for bit.
	tileS   func(rows, kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool)
	tileSEp func(kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool, bst *float32, relu bool)
	// tileI and tileIEp (may be nil), when set, are tile and tileEp
	// reading step p's nr floats of B at b + offs[p] (wideConv).
	tileI   func(rows, kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool)
	tileIEp func(kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool, bst *float32, relu bool)
	// tileNarrow, when set, is tileS for mr rows of the first nr/2
	// columns, overwriting C: a short last panel of at most nr/2 columns,
	// at half the cost of the full width (SqueezeNet's 13×13 outputs are
	// 5 panels of 32 columns and one of 9).
	tileNarrow func(kc int, a, b *float32, ldb int, c *float32, ldc int)
	// tileA1 and tileSA1, when set, are tile and tileS for one row of A
	// read in place (row stride 1) instead of from a packed panel.
	tileA1  func(kc int, a, b, c *float32, ldc int, accumulate bool)
	tileSA1 func(kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool)
	// convRow, when set, computes a convolution row tile (ConvRows):
	// pixels (at most convRowPixels) outputs of column stride stride (1
	// or 2) by 32 output channels, from kc taps, pixel-major into c.
	convRow func(pixels, stride, kc int, x *float32, offs *int, w *float32, c *float32, accumulate bool)
	// convRowStore moves a row tile to the output, as convRowStoreGo in
	// the tests does.
	convRowStore func(tile *float32, pixels int, c *float32, ldc, channels int, ep, res *float32, relu, resFirst bool)
}

// packing returns arch, or a copy of it that packs what its kernels
// would read in place: every panel of a row-major B (packB; in place,
// tileS, because packing them was a pure copy of B at memory speed when B
// is a large activation) and the row of a one-row A (packRowA; in place,
// tileA1). The products are the same bit for bit either way, which the
// tests check by running both.
func (arch *gemmArch) packing(packB, packRowA bool) *gemmArch {
	if !packB && !packRowA {
		return arch
	}
	c := *arch
	c.name += "/packed"
	if packB {
		c.tileS, c.tileSEp, c.tileSA1 = nil, nil, nil
	}
	if packRowA {
		c.tileA1, c.tileSA1 = nil, nil
	}
	return &c
}

// goArch is the portable micro-kernel family (the noasm build, other
// GOARCHes and CPUs without AVX2/FMA). Its kernel computes all four rows
// of a panel, so rows lists 4 alone: packing zero-fills a short panel.
var goArch = &gemmArch{name: "go", mr: 4, nr: 8, kc: 256, mc: 128, nc: 1024, rows: []int{4},
	tile: goTile, tileEp: goTileEp, tileI: goTileI, tileIEp: goTileIEp}

// packBufs are one goroutine's packing buffers, reused across calls.
type packBufs struct {
	a, b, tmp []float32
	ep        []float32 // row epilogue triples of an mc block
}

var packPool = sync.Pool{New: func() any { return new(packBufs) }}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C exactly as SgemmRef states
// it, with packed panels, cache blocking and the widest micro-kernel the
// CPU runs. Results differ from SgemmRef only by rounding: the kernels use
// fused multiply-adds and sum k in blocks, so the tests hold them to a
// relative error of 1e-5·(1+|C|) per unit of √k against a float64 product.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	SgemmParallel(1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmParallel is Sgemm with C split into up to threads blocks of rows or
// columns computed on the shared worker pool. Every element of C is
// computed by the same sequence of operations whatever the split, so the
// result is bit-identical for any thread count.
func SgemmParallel(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmParallel(activeGemm, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmParallel is SgemmParallel on the kernels of arch.
func sgemmParallel(arch *gemmArch, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if gemmTrivial(m, n, k, alpha, beta, c, ldc, nil) {
		return
	}
	threads, mt, nt := gemmSplit(arch, threads, m, n, k)
	if threads <= 1 {
		gemmBlocked(arch, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if splitColumns(m, n, mt, nt, threads) {
		// Split the columns: each thread packs its own part of B.
		Parallel(threads, nt, 1, func(lo, hi int) {
			j0, j1 := lo*arch.nr, min(hi*arch.nr, n)
			gemmBlocked(arch, transA, transB, m, j1-j0, k, alpha, a, lda, colsFrom(b, transB, j0, ldb), ldb, beta, c[j0:], ldc)
		})
		return
	}
	Parallel(threads, mt, 1, func(lo, hi int) {
		i0, i1 := lo*arch.mr, min(hi*arch.mr, m)
		gemmBlocked(arch, transA, transB, i1-i0, n, k, alpha, rowsFrom(a, transA, i0, lda), lda, b, ldb, beta, c[i0*ldc:], ldc)
	})
}

// gemmTrivial does a product with nothing to multiply (k = 0 or alpha =
// 0): C = beta·C, then ep (may be nil). It reports whether there was
// nothing more to do, an empty C included.
func gemmTrivial(m, n, k int, alpha, beta float32, c []float32, ldc int, ep *Epilogue) bool {
	if m <= 0 || n <= 0 {
		return true
	}
	if k > 0 && alpha != 0 {
		return false
	}
	scaleC(m, n, beta, c, ldc)
	if ep != nil {
		ep.apply(c, ldc, 0, 0, m, n)
	}
	return true
}

// convMinParallel is the fewest multiply-adds of a convolution worth
// splitting over threads. Below it the hand-off, and the image copies and
// outputs that then move between the cores' caches at every run, cost
// more than the second thread saves: LeNet's first convolution (310 k
// multiply-adds, 8 µs on one thread) took 10 µs on two.
const convMinParallel = 1 << 19

// gemmMinWork is the number of multiply-adds per thread worth a hand-off.
const gemmMinWork = 1 << 15

// kernelRows is the height of the micro-kernel that computes a panel of
// rows rows: the smallest of arch.rows that covers them.
func (arch *gemmArch) kernelRows(rows int) int {
	kr := rows
	for _, r := range arch.rows {
		if r >= rows {
			kr = r
		}
	}
	return kr
}

// gemmSplit returns the threads an m×n×k product is worth (1 when it has
// a single panel) and its row and column panel counts.
func gemmSplit(arch *gemmArch, threads, m, n, k int) (int, int, int) {
	threads = min(threads, max(1, m*n*k/gemmMinWork))
	mt, nt := ceilDiv(m, arch.mr), ceilDiv(n, arch.nr)
	if mt*nt < 2 {
		threads = 1
	}
	return threads, mt, nt
}

// splitColumns reports whether an unpacked product splits C by columns
// (every thread packs all of A and its part of B) rather than by rows
// (every thread packs its part of A and all of B). Packing A costs about
// twice as much per element as packing B (BenchmarkPack), so the split
// that duplicates less packing wins, provided each thread gets a panel.
func splitColumns(m, n, mt, nt, threads int) bool {
	switch {
	case mt < threads:
		return true
	case nt < threads:
		return false
	}
	return 2*m < n
}

func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// gemmBlocked is the single-threaded blocked product (GotoBLAS loop order:
// column blocks, k blocks with B packed once, row blocks with A packed,
// then micro-tiles with the B panel held in L1 across the row panels).
//
// When pa is set, A comes prepacked from it (rows from row0) instead of a;
// when ep is set, it is applied to each finished tile while it is in cache.
func gemmBlocked(arch *gemmArch, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmBlockedEp(arch, nil, nil, nil, 0, 0, nil, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmBlockedEp is gemmBlocked with optional prepacked operands: when pb
// is set, B comes prepacked from it (columns from col0) instead of b; when
// cb is set, B is the column matrix of a 2-D image (columns from col0),
// packed straight from the image.
func gemmBlockedEp(arch *gemmArch, pa *PackedA, pb *PackedB, cb *convB, row0, col0 int, ep *Epilogue, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if beta != 0 {
		scaleC(m, n, beta, c, ldc)
	}
	mr, nr := arch.mr, arch.nr
	bufs := packPool.Get().(*packBufs)
	defer packPool.Put(bufs)
	kcMax, mcMax := min(arch.kc, k), min(arch.mc, roundUp(m, mr))
	// ncb is the column block: the arch's, or, for an epilogue the
	// micro-kernels do not apply with A prepacked (no A block to pack
	// again for each column block), narrow enough for the B block to fit
	// rowsOuterFloats, so that its row tiles sweep it and the epilogue
	// runs on whole sweeps (sweepEp).
	ncb := arch.nc
	if pa != nil && ep != nil && !ep.rowOnly() {
		ncb = min(ncb, max(nr, rowsOuterFloats/kcMax/nr*nr))
	}
	ncMax := min(ncb, roundUp(n, nr))
	if pb == nil {
		bufs.b = grow(bufs.b, kcMax*roundUp(ncMax, nr)+packSlack)
	}
	// rowA: a one-row product reads its row of A in place (tileA1):
	// packed, the row took a cache line per k step (a panel row is mr
	// floats), which cost about a third as much as the product itself.
	rowA := pa == nil && m == 1 && !transA && alpha == 1 && arch.tileA1 != nil
	tile, tileS := arch.tile, arch.tileS
	if rowA {
		tile = func(_, kc int, a, b, c *float32, ldc int, accumulate bool) { arch.tileA1(kc, a, b, c, ldc, accumulate) }
		tileS = func(_, kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool) {
			arch.tileSA1(kc, a, b, ldb, c, ldc, accumulate)
		}
	} else if pa == nil {
		bufs.a = grow(bufs.a, kcMax*roundUp(mcMax, mr))
	}
	bufs.tmp = grow(bufs.tmp, mr*nr)
	tmp := bufs.tmp
	// Full tiles take a row epilogue in the micro-kernel's registers.
	rowEp := ep != nil && arch.tileEp != nil && ep.rowOnly()
	// direct: full panels of a row-major B are read in place; a short
	// last panel is packed alone.
	direct := pb == nil && cb == nil && !transB && arch.tileS != nil
	// rowsOuter: each row tile sweeps the column panels of the block,
	// writing mr rows of C left to right, instead of each column panel
	// being taken by every row tile, which wrote mc rows at once. When C
	// is not in cache, as a layer's output is not, the many rows defeated
	// the prefetch of the lines the stores fill: a 1×1 convolution of 16
	// to 96 channels at 122×122 ran at half the speed. The B block is then
	// read once per row tile, so it must stay in L2 (rowsOuterFloats).
	rowsOuter := kcMax*ncMax <= rowsOuterFloats
	for jc := 0; jc < n; jc += ncb {
		nc := min(ncb, n-jc)
		for pc := 0; pc < k; pc += arch.kc {
			kc := min(arch.kc, k-pc)
			bpack := bufs.b
			if pb != nil {
				bpack = pb.block(pc, col0+jc)
			} else if cb != nil {
				packBConv(cb, pc, col0+jc, kc, nc, nr, bufs.b)
			} else if !direct {
				packB(transB, b, ldb, pc, jc, kc, nc, nr, bufs.b)
			} else if full := nc / nr * nr; full < nc {
				// Only a short last panel is packed, once for all row
				// blocks.
				packB(false, b, ldb, pc, jc+full, kc, nc-full, nr, bufs.b)
			}
			accumulate := pc > 0 || beta != 0
			last := pc+kc == k
			for ic := 0; ic < m; ic += arch.mc {
				mc := min(arch.mc, m-ic)
				if last && rowEp {
					bufs.ep = ep.rowParams(bufs.ep, row0+ic, mc)
				}
				apack := bufs.a
				switch {
				case rowA:
					apack = a[pc : pc+kc]
				case pa != nil:
					apack = pa.block(pc, row0+ic)
				default:
					packA(transA, a, lda, ic, pc, mc, kc, mr, arch.kernelRows(mc%mr), alpha, bufs.a)
				}
				// Tile t is the tile at panel jr, row tile ir: column
				// panels outer (a B panel stays in L1 across the row
				// tiles) or, when the B block fits the L2 budget, row
				// tiles outer.
				panels, rowTiles := ceilDiv(nc, nr), ceilDiv(mc, mr)
				// sweepEp: an epilogue the micro-kernels do not apply
				// (a residual, say) runs once per row tile on its whole
				// sweep of nc columns rather than on each tile: it is
				// a few calls per row, which cost a third as much as the
				// product on each 12×32 tile of a 1×1 convolution of
				// 144 channels.
				sweepEp := rowsOuter && last && ep != nil && !rowEp
				sweep := func(ir int) {
					ep.apply(c[(ic+ir)*ldc+jc:], ldc, row0+ic+ir, col0+jc, min(mr, mc-ir), nc)
				}
				for t := range panels * rowTiles {
					jr, ir := t/rowTiles*nr, t%rowTiles*mr
					if rowsOuter {
						ir, jr = t/panels*mr, t%panels*nr
						if sweepEp && jr == 0 && ir > 0 {
							sweep(ir - mr)
						}
					}
					cols := min(nr, nc-jr)
					var bp *float32
					var brow []float32
					switch {
					case direct && cols == nr:
						brow = b[pc*ldb+jc+jr : (pc+kc-1)*ldb+jc+jr+nr]
					case direct:
						bp = &bufs.b[0] // packed before the row blocks
					default:
						bp = &bpack[jr*kc]
					}
					rows := min(mr, mc-ir)
					kr := arch.kernelRows(rows)
					ap := &apack[ir*kc]
					ci := (ic+ir)*ldc + jc + jr
					if brow != nil && kr == rows {
						if last && rowEp && rows == mr {
							arch.tileSEp(kc, ap, &brow[0], ldb, &c[ci], ldc, accumulate, &bufs.ep[3*ir], ep.Act == ActRelu)
							continue
						}
						tileS(kr, kc, ap, &brow[0], ldb, &c[ci], ldc, accumulate)
						if last && ep != nil && !sweepEp {
							ep.apply(c[ci:], ldc, row0+ic+ir, col0+jc+jr, rows, cols)
						}
						continue
					}
					if kr == rows && cols == nr {
						if last && rowEp && rows == mr {
							arch.tileEp(kc, ap, bp, &c[ci], ldc, accumulate, &bufs.ep[3*ir], ep.Act == ActRelu)
							continue
						}
						tile(kr, kc, ap, bp, &c[ci], ldc, accumulate)
						if last && ep != nil && !sweepEp {
							ep.apply(c[ci:], ldc, row0+ic+ir, col0+jc+jr, rows, cols)
						}
						continue
					}
					switch {
					case brow != nil:
						tileS(kr, kc, ap, &brow[0], ldb, &tmp[0], nr, false)
					case cols <= nr/2 && rows == mr && arch.tileNarrow != nil:
						arch.tileNarrow(kc, ap, bp, nr, &tmp[0], nr)
					default:
						tile(kr, kc, ap, bp, &tmp[0], nr, false)
					}
					for i := 0; i < rows; i++ {
						dst := c[ci+i*ldc : ci+i*ldc+cols]
						src := tmp[i*nr : i*nr+cols]
						if accumulate {
							for j, v := range src {
								dst[j] += v
							}
						} else {
							copy(dst, src)
						}
					}
					if last && ep != nil && !sweepEp {
						ep.apply(c[ci:], ldc, row0+ic+ir, col0+jc+jr, rows, cols)
					}
				}
				if sweepEp {
					sweep((rowTiles - 1) * mr)
				}
			}
		}
	}
}

// rowsOuterFloats is the largest B block (kc×nc floats) that
// gemmBlockedEp sweeps once per row tile: a quarter of a 1 MiB L2.
const rowsOuterFloats = 1 << 16

// PackedA is op(A) packed once for repeated products with different B,
// such as constant weights: each k block of the active kernel's kc holds
// the panels of all rows, so any row block is a contiguous slice.
type PackedA struct {
	arch *gemmArch
	m, k int
	data []float32
	// channels is the rows in convRowChannels lanes (channelPanels),
	// built when a convolution first needs them.
	mu       sync.Mutex
	channels []float32
}

// PackA packs alpha·op(A) (m×k) for SgemmPacked.
func PackA(transA bool, m, k int, alpha float32, a []float32, lda int) *PackedA {
	return packAFor(activeGemm, transA, m, k, alpha, a, lda)
}

// packAFor is PackA for the kernels of arch.
func packAFor(arch *gemmArch, transA bool, m, k int, alpha float32, a []float32, lda int) *PackedA {
	mp := roundUp(m, arch.mr)
	p := &PackedA{arch: arch, m: m, k: k, data: make([]float32, mp*k)}
	for pc := 0; pc < k; pc += arch.kc {
		kc := min(arch.kc, k-pc)
		packA(transA, a, lda, 0, pc, m, kc, arch.mr, arch.mr, alpha, p.data[pc*mp:])
	}
	return p
}

// packedAPool recycles the A operands that packAParallel packs for one
// product.
var packedAPool = sync.Pool{New: func() any { return new(PackedA) }}

// packAParallel is PackA for one product, its row panels packed on up to
// threads threads into a buffer from packedAPool (Put it back after use).
// Packing only copies (and scales by alpha), so the split never changes
// a value.
func packAParallel(threads int, arch *gemmArch, transA bool, m, k int, alpha float32, a []float32, lda int) *PackedA {
	p := packedAPool.Get().(*PackedA)
	mp := roundUp(m, arch.mr)
	p.arch, p.m, p.k, p.data, p.channels = arch, m, k, grow(p.data, mp*k), nil
	panels := mp / arch.mr
	Parallel(threads, panels, max(1, (1<<13)/max(1, arch.mr*k)), func(lo, hi int) {
		i0, i1 := lo*arch.mr, min(hi*arch.mr, m)
		for pc := 0; pc < k; pc += arch.kc {
			kc := min(arch.kc, k-pc)
			packA(transA, a, lda, i0, pc, i1-i0, kc, arch.mr, arch.kernelRows((i1-i0)%arch.mr), alpha, p.data[pc*mp+i0*kc:])
		}
	})
	return p
}

// Rows is the number of rows of op(A).
func (p *PackedA) Rows() int { return p.m }

// Cols is the number of columns of op(A).
func (p *PackedA) Cols() int { return p.k }

func (p *PackedA) block(pc, ic int) []float32 {
	return p.data[pc*roundUp(p.m, p.arch.mr)+ic*min(p.arch.kc, p.k-pc):]
}

// SgemmPacked computes C = A·op(B) + beta·C, as SgemmParallel, with A
// prepacked by PackA (alpha already applied), then applies ep (may be nil)
// to every element of C.
func SgemmPacked(threads int, pa *PackedA, n int, transB bool, b []float32, ldb int, beta float32, c []float32, ldc int, ep *Epilogue) {
	sgemmPacked(threads, pa, nil, n, transB, b, ldb, beta, c, ldc, ep)
}

// SgemmConv computes C = A·Im2col(g, x) for a 2-D geometry g and x of
// pa.Cols()/g.KernelSize() channels, with A prepacked by PackA, then
// applies ep (may be nil): a convolution without the column matrix. It
// computes it the way plan says (PlanConv; the zero plan: the way
// PlanConv chooses now): B panels gathered from the image, wide columns
// read from a copy of it, or row tiles that broadcast its pixels. Each
// sums the same products in the same order as SgemmPacked on Im2col's
// output, so C is bit-identical to it.
func SgemmConv(threads int, pa *PackedA, g *ConvGeom, plan ConvPlan, x []float32, c []float32, ldc int, ep *Epilogue) {
	work := pa.m * pa.k * g.OutSize()
	threads = min(threads, max(1, work/gemmMinWork))
	if work < convMinParallel {
		threads = 1
	}
	if plan.Way == ConvAuto {
		plan = PlanConv(pa, g, ConvAuto)
	}
	switch plan.Way {
	case ConvRows:
		sgemmConvRows(threads, pa, g, x, c, ldc, ep)
		return
	case ConvPadded, ConvShifted:
		sgemmWide(threads, pa, g, plan.pitch, plan.Way == ConvShifted, x, c, ldc, ep)
		return
	}
	cb, release := newConvB(threads, g, pa.k/g.KernelSize(), x)
	defer release()
	sgemmPacked(threads, pa, cb, g.OutSize(), false, nil, 0, 0, c, ldc, ep)
}

// packedSplitColumns reports whether a product with A prepacked, mt row
// panels by nt column panels, splits C by columns rather than by rows over
// threads.
//
// When B is packed (packsB), the split whose busiest thread has the fewest
// tiles wins, a packed B panel costing about a tile: a row split packs
// every B panel on every thread, so a convolution with few output columns
// and many channels (an 8×8 image) packed its column matrix twice at two
// threads. A B read in place costs nothing to share; its columns are split
// only when there are more column panels than row panels, or enough to
// balance, since with few columns every thread reads all of A, whose
// weights may not fit a core's cache.
func packedSplitColumns(mt, nt, threads int, packsB bool) bool {
	if !packsB {
		return nt >= mt || nt >= 2*threads
	}
	return ceilDiv(nt, threads)*(mt+1) <= (ceilDiv(mt, threads)+1)*nt
}

// sgemmPacked is SgemmPacked with B taken from cb instead of b when cb is
// set.
func sgemmPacked(threads int, pa *PackedA, cb *convB, n int, transB bool, b []float32, ldb int, beta float32, c []float32, ldc int, ep *Epilogue) {
	m, k := pa.m, pa.k
	if gemmTrivial(m, n, k, 1, beta, c, ldc, ep) {
		return
	}
	arch := pa.arch
	threads, mt, nt := gemmSplit(arch, threads, m, n, k)
	if threads <= 1 {
		gemmBlockedEp(arch, pa, nil, cb, 0, 0, ep, false, transB, m, n, k, 1, nil, 0, b, ldb, beta, c, ldc)
		return
	}
	if packedSplitColumns(mt, nt, threads, cb != nil || transB) {
		Parallel(threads, nt, 1, func(lo, hi int) {
			j0, j1 := lo*arch.nr, min(hi*arch.nr, n)
			var bb []float32
			if cb == nil {
				bb = colsFrom(b, transB, j0, ldb)
			}
			gemmBlockedEp(arch, pa, nil, cb, 0, j0, ep, false, transB, m, j1-j0, k, 1, nil, 0, bb, ldb, beta, c[j0:], ldc)
		})
		return
	}
	// Row splits must start on a panel boundary of the packed A, which
	// they do: they are multiples of mr.
	Parallel(threads, mt, 1, func(lo, hi int) {
		i0, i1 := lo*arch.mr, min(hi*arch.mr, m)
		gemmBlockedEp(arch, pa, nil, cb, i0, 0, ep, false, transB, i1-i0, n, k, 1, nil, 0, b, ldb, beta, c[i0*ldc:], ldc)
	})
}

// PackedB is op(B) packed once for repeated products with different A,
// such as constant weights on the right or a recurrent matrix used at
// every time step: each k block of the active kernel's kc holds the
// panels of all columns, so any column block is a contiguous slice.
// Products with it are bit-identical to the unpacked ones.
type PackedB struct {
	arch *gemmArch
	k, n int
	data []float32
}

// PackB packs op(B) (k×n) for SgemmPackedB.
func PackB(transB bool, k, n int, b []float32, ldb int) *PackedB {
	return packBFor(activeGemm, transB, k, n, b, ldb)
}

// packBFor is PackB for the kernels of arch.
func packBFor(arch *gemmArch, transB bool, k, n int, b []float32, ldb int) *PackedB {
	np := roundUp(n, arch.nr)
	p := &PackedB{arch: arch, k: k, n: n, data: make([]float32, np*k)}
	for pc := 0; pc < k; pc += arch.kc {
		kc := min(arch.kc, k-pc)
		packB(transB, b, ldb, pc, 0, kc, n, arch.nr, p.data[pc*np:])
	}
	return p
}

// Rows is the number of rows of op(B).
func (p *PackedB) Rows() int { return p.k }

// Cols is the number of columns of op(B).
func (p *PackedB) Cols() int { return p.n }

func (p *PackedB) block(pc, jc int) []float32 {
	return p.data[pc*roundUp(p.n, p.arch.nr)+jc*min(p.arch.kc, p.k-pc):]
}

// SgemmPackedB computes C = alpha·op(A)·B + beta·C, as SgemmParallel, with
// B prepacked by PackB, then applies ep (may be nil) to every element of C.
func SgemmPackedB(threads int, transA bool, m int, alpha float32, a []float32, lda int, pb *PackedB, beta float32, c []float32, ldc int, ep *Epilogue) {
	k, n := pb.k, pb.n
	if gemmTrivial(m, n, k, alpha, beta, c, ldc, ep) {
		return
	}
	arch := pb.arch
	threads, mt, nt := gemmSplit(arch, threads, m, n, k)
	if threads <= 1 {
		gemmBlockedEp(arch, nil, pb, nil, 0, 0, ep, transA, false, m, n, k, alpha, a, lda, nil, 0, beta, c, ldc)
		return
	}
	if nt >= mt || nt >= 2*threads {
		// Column splits start on a panel boundary of the packed B. A is
		// packed once, its row panels shared out, rather than whole on
		// every thread; but a single row panel is packed by each thread
		// into its own buffer. Shared, it was written by one core and read
		// by the other on every run, one cache line per k step (a panel
		// row is mr floats): at batch 1 that cost more than the product.
		if mt == 1 {
			Parallel(threads, nt, 1, func(lo, hi int) {
				j0, j1 := lo*arch.nr, min(hi*arch.nr, n)
				gemmBlockedEp(arch, nil, pb, nil, 0, j0, ep, transA, false, m, j1-j0, k, alpha, a, lda, nil, 0, beta, c[j0:], ldc)
			})
			return
		}
		pa := packAParallel(threads, arch, transA, m, k, alpha, a, lda)
		defer packedAPool.Put(pa)
		Parallel(threads, nt, 1, func(lo, hi int) {
			j0, j1 := lo*arch.nr, min(hi*arch.nr, n)
			gemmBlockedEp(arch, pa, pb, nil, 0, j0, ep, false, false, m, j1-j0, k, 1, nil, 0, nil, 0, beta, c[j0:], ldc)
		})
		return
	}
	Parallel(threads, mt, 1, func(lo, hi int) {
		i0, i1 := lo*arch.mr, min(hi*arch.mr, m)
		gemmBlockedEp(arch, nil, pb, nil, i0, 0, ep, transA, false, i1-i0, n, k, alpha, rowsFrom(a, transA, i0, lda), lda, nil, 0, beta, c[i0*ldc:], ldc)
	})
}

// rowsFrom is op(A) from row i on, for A stored with leading dimension
// ld (transposed: A's columns are op(A)'s rows).
func rowsFrom(a []float32, trans bool, i, ld int) []float32 {
	if trans {
		return a[i:]
	}
	return a[i*ld:]
}

// colsFrom is op(B) from column j on.
func colsFrom(b []float32, trans bool, j, ld int) []float32 { return rowsFrom(b, !trans, j, ld) }

func roundUp(x, m int) int { return ceilDiv(x, m) * m }

func ceilDiv(x, m int) int { return (x + m - 1) / m }

// packA copies the mc×kc block of alpha·op(A) at (ic, pc) into panels of
// mr rows: panel r holds element (ic+r·mr+i, pc+p) at r·mr·kc + p·mr + i.
// A short last panel's rows past mc are zero up to height, the rows its
// micro-kernel reads; the rest are left as they were (a one-row product
// would otherwise clear eleven rows for every row it packs).
func packA(trans bool, a []float32, lda, ic, pc, mc, kc, mr, height int, alpha float32, dst []float32) {
	for r := 0; r*mr < mc; r++ {
		panel := dst[r*mr*kc : (r+1)*mr*kc]
		rows := min(mr, mc-r*mr)
		i0 := ic + r*mr
		if trans {
			for p := 0; p < kc; p++ {
				src := a[(pc+p)*lda+i0 : (pc+p)*lda+i0+rows]
				d := panel[p*mr : p*mr+mr]
				if alpha == 1 {
					copy(d, src)
				} else {
					for i, v := range src {
						d[i] = alpha * v
					}
				}
				clear(d[rows:max(rows, height)])
			}
			continue
		}
		if rows == mr && alpha == 1 && packARows(a[i0*lda+pc:], lda, kc, mr, panel) {
			continue
		}
		for i := 0; i < rows; i++ {
			src := a[(i0+i)*lda+pc : (i0+i)*lda+pc+kc]
			if alpha == 1 {
				for p, v := range src {
					panel[p*mr+i] = v
				}
			} else {
				for p, v := range src {
					panel[p*mr+i] = alpha * v
				}
			}
		}
		for i := rows; i < height; i++ {
			for p := 0; p < kc; p++ {
				panel[p*mr+i] = 0
			}
		}
	}
}

// packARows packs mr whole rows of a (row stride lda) of kc columns into
// panel, column by column, when mr is one of the kernels' panel heights.
// Walking the columns writes the panel in order and reads mr rows that
// stay in L1, where the row-by-row loop wrote with a stride of mr floats.
func packARows(a []float32, lda, kc, mr int, panel []float32) bool {
	switch mr {
	case 12:
		_ = a[11*lda+kc-1]
		r := [12][]float32{}
		for i := range r {
			r[i] = a[i*lda : i*lda+kc : i*lda+kc]
		}
		for p := 0; p < kc; p++ {
			d := (*[12]float32)(panel[p*12:])
			d[0], d[1], d[2], d[3] = r[0][p], r[1][p], r[2][p], r[3][p]
			d[4], d[5], d[6], d[7] = r[4][p], r[5][p], r[6][p], r[7][p]
			d[8], d[9], d[10], d[11] = r[8][p], r[9][p], r[10][p], r[11][p]
		}
		return true
	case 6:
		r := [6][]float32{}
		for i := range r {
			r[i] = a[i*lda : i*lda+kc : i*lda+kc]
		}
		for p := 0; p < kc; p++ {
			d := (*[6]float32)(panel[p*6:])
			d[0], d[1], d[2], d[3], d[4], d[5] = r[0][p], r[1][p], r[2][p], r[3][p], r[4][p], r[5][p]
		}
		return true
	}
	return false
}

// packB copies the kc×nc block of op(B) at (pc, jc) into panels of nr
// columns: panel r holds element (pc+p, jc+r·nr+j) at r·nr·kc + p·nr + j,
// with columns past nc zero.
func packB(trans bool, b []float32, ldb, pc, jc, kc, nc, nr int, dst []float32) {
	for r := 0; r*nr < nc; r++ {
		panel := dst[r*nr*kc : (r+1)*nr*kc]
		cols := min(nr, nc-r*nr)
		j0 := jc + r*nr
		if !trans {
			for p := 0; p < kc; p++ {
				d := panel[p*nr : p*nr+nr]
				copy(d, b[(pc+p)*ldb+j0:(pc+p)*ldb+j0+cols])
				clear(d[cols:])
			}
			continue
		}
		for j := 0; j < cols; j++ {
			src := b[(j0+j)*ldb+pc : (j0+j)*ldb+pc+kc]
			for p, v := range src {
				panel[p*nr+j] = v
			}
		}
		for j := cols; j < nr; j++ {
			for p := 0; p < kc; p++ {
				panel[p*nr+j] = 0
			}
		}
	}
}

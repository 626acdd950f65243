package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// depthwise generates dw{size}s{stride}r{rows}AVX2, the interior of a
// size×size depthwise convolution row (size 3 or 5) over rows input rows:
// for j < n (a multiple of 8), with x rows ldx floats apart and w holding
// size weights per row,
//
//	acc = +0
//	for r < rows, kx < size: acc = acc + float32(w[size·r+kx] · x[r·ldx + stride·j + kx])
//	out[j] = acc
//
// the order and roundings of the Go loop (no FMA). The 3×3 weights stay
// in registers; the 5×5 ones, more than the sixteen YMM registers hold
// beside the taps, are broadcast from memory at each product (a load, no
// arithmetic). Stride 2 splits the even and odd inputs of a pair of
// vectors with VSHUFPS, which leaves the eight outputs of a vector in the
// order 0 1 4 5 2 3 6 7 for all taps alike; one VPERMPD restores it before
// the store. Tap kx is the evens of the pair at column kx (kx even) or the
// odds of the pair at kx−1 (kx odd), and the last tap the odds of the pair
// at size−2, so that every load stays inside [x, x + stride·(n−1) + size)
// of each row.
func depthwise(size, stride, rows int) {
	name := fmt.Sprintf("dw%ds%dr%dAVX2", size, stride, rows)
	TEXT(name, NOSPLIT, "func(out *float32, n int, x *float32, ldx int, w *float32)")
	Doc(fmt.Sprintf("%s computes n (a multiple of 8) outputs of a %d×%d depthwise convolution row, stride %d, from %d input rows.", name, size, size, stride, rows))
	po := Load(Param("out"), GP64())
	n := Load(Param("n"), GP64())
	px := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	pw := Load(Param("w"), GP64())
	SHLQ(U8(2), ldx)
	var wv []VecVirtual
	if size == 3 {
		wv = make([]VecVirtual, size*rows)
		for i := range wv {
			wv[i] = YMM()
			VBROADCASTSS(Mem{Base: pw, Disp: 4 * i}, wv[i])
		}
	}
	// weight returns w[i] in a register.
	weight := func(i int) VecVirtual {
		if wv != nil {
			return wv[i]
		}
		v := YMM()
		VBROADCASTSS(Mem{Base: pw, Disp: 4 * i}, v)
		return v
	}
	// The rows' pointers: x + r·ldx.
	in := make([]GPVirtual, rows)
	for r := range in {
		in[r] = GP64()
		if r == 0 {
			MOVQ(px, in[r])
		} else {
			LEAQ(Mem{Base: in[r-1], Index: ldx, Scale: 1}, in[r])
		}
	}
	loop, done := name+"_loop", name+"_done"
	Label(loop)
	TESTQ(n, n)
	JZ(LabelRef(done))
	acc := YMM()
	VXORPS(acc, acc, acc)
	for r := 0; r < rows; r++ {
		at := func(disp int) Mem { return Mem{Base: in[r], Disp: disp} }
		madd := func(kx int, t VecVirtual) {
			p := YMM()
			VMULPS(weight(size*r+kx), t, p)
			VADDPS(p, acc, acc)
		}
		if stride == 1 {
			for kx := 0; kx < size; kx++ {
				t := YMM()
				VMOVUPS(at(4*kx), t)
				madd(kx, t)
			}
			continue
		}
		// pairs[o] holds the first vector of the pair at column o.
		pairs := map[int]VecVirtual{}
		half := func(o int, odds bool) VecVirtual {
			a, ok := pairs[o]
			if !ok {
				a = YMM()
				VMOVUPS(at(4*o), a)
				pairs[o] = a
			}
			t := YMM()
			if odds {
				VSHUFPS(U8(0xDD), at(4*o+32), a, t)
			} else {
				VSHUFPS(U8(0x88), at(4*o+32), a, t)
			}
			return t
		}
		for kx := 0; kx < size; kx++ {
			switch {
			case kx == size-1:
				madd(kx, half(size-2, true))
			case kx%2 == 0:
				madd(kx, half(kx, false))
			default:
				madd(kx, half(kx-1, true))
			}
		}
	}
	if stride == 2 {
		VPERMPD(U8(0xD8), acc, acc)
	}
	VMOVUPS(acc, Mem{Base: po})
	ADDQ(U8(32), po)
	for _, p := range in {
		ADDQ(U8(32*stride), p)
	}
	SUBQ(U8(8), n)
	JMP(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()
	// Each stride's plane kernels follow its 3×3 row kernels.
	if size == 3 && rows == 3 {
		for _, size := range []int{3, 5} {
			depthwisePlane(size, stride, 16)
			depthwisePlane(size, stride, 8)
		}
	}
}

// depthwisePlane generates dw{size}x{size}s{stride}x{lanes}AVX512, one
// channel of a size×size depthwise convolution (size 3 or 5) whose row and
// column strides both equal stride, straight from the unpadded input, with
// the row epilogue applied in registers before the store:
//
//	for oy < oh, ox < ow:
//	    acc = +0
//	    for ky, kx < size: acc = acc + float32(w[size·ky+kx] · X[oy·stride − ph + ky][ox·stride − pw + kx])
//	    v = float32(float32(acc + b)·s) + t
//	    y[oy·ldy + ox] = v <= thr ? +0 : v
//
// X being the ih×iw input x (rows ldx floats apart) and +0 outside it.
// The loop order and roundings are those of the definition (no FMA); the
// taps outside the input add w·0 = ±0, which leaves the sum unchanged for
// finite w. thr = NaN disables the Relu (no v is <= NaN).
//
// Rows outside the input are read from zero, a row of at least iw zeros.
// Columns go lanes outputs per vector (16 in ZMM, 8 in YMM for narrow
// images), nv vectors a row; masks holds eight uint16 per vector of a
// row: the lane masks of its input loads from index 0 and, at index 7, of
// its store. A load lane is set only where its column is inside the input
// (virtual column pw..pw+iw−1), so no load touches memory outside the rows
// and the zeroed lanes are the padding. Stride 1 loads the columns
// L·v+kx+j (L = lanes) for each kx < size. Stride 2 loads pairs of vectors,
// columns 2L·v+o+j and 2L·v+L+o+j for o = 0, 2, …, size−1: the evens of a
// pair are the taps kx = o, the odds the taps kx = o+1. VSHUFPS splits
// them within 128-bit lanes, which leaves the outputs in the same
// shuffled order for every tap; one VPERMQ per vector restores it before
// the store.
//
// The rows go in blocks that share their input rows (output rows oy and
// oy+1 of stride 1 read size−1 common input rows), which also gives the
// out-of-order core several independent sums to interleave. The 3×3
// weights stay in registers; the 5×5 ones, too many for them beside the
// block's sums, are copied to the frame and broadcast from there by each
// product. The masked loads of a row narrower than a vector leave most
// lanes off, and a load whose off lanes cross into another page is slow
// (a microcode assist on some cores), hence the YMM kernels for images up
// to 8 outputs wide.
func depthwisePlane(size, stride, lanes int) {
	name := fmt.Sprintf("dw%dx%ds%dx%dAVX512", size, size, stride, lanes)
	TEXT(name, NOSPLIT, "func(y, x, zero, w *float32, masks *uint16, nv, oh, ldy, ih, ldx, ph, pw int, bst *float32, thr float32, channels int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes channels channels of a %d×%d depthwise convolution, stride %d, %d outputs per vector, with the row epilogue applied before the store.", name, size, size, stride, lanes))
	k := dwKernel{name: name, size: size, stride: stride, lanes: lanes, vec: ZMM}
	if lanes == 8 {
		k.vec = YMM
	}
	if size == 5 {
		k.wmem = AllocLocal(8 * ((size*size + 1) / 2)) // whole words: the pointers follow
	}
	k.oy, k.x, k.y = AllocLocal(8), AllocLocal(8), AllocLocal(8)
	cw, cb, cn := AllocLocal(8), AllocLocal(8), AllocLocal(8)
	for _, c := range []struct {
		param string
		local Mem
	}{{"x", k.x}, {"y", k.y}, {"w", cw}, {"bst", cb}, {"channels", cn}} {
		r := Load(Param(c.param), GP64())
		MOVQ(r, c.local)
	}
	k.thr = k.vec()
	VBROADCASTSS(paramAddr("thr"), k.thr)
	if stride == 2 && lanes == 16 {
		// VSHUFPS leaves the outputs in the order 0 1 8 9 2 3 10 11 4 5
		// 12 13 6 7 14 15; this VPERMQ index (of pairs) restores it.
		k.order = k.vec()
		VMOVDQU64(dwStride2Order(), k.order)
	}
	Label(name + "_channel")
	pw := GP64()
	MOVQ(cw, pw)
	if size == 3 {
		k.w = make([]VecVirtual, size*size)
		for i := range k.w {
			k.w[i] = k.vec()
			VBROADCASTSS(Mem{Base: pw, Disp: 4 * i}, k.w[i])
		}
	} else {
		v := GP32()
		for i := range size * size {
			MOVL(Mem{Base: pw, Disp: 4 * i}, v)
			MOVL(v, k.wmem.Offset(4*i))
		}
	}
	pb := GP64()
	MOVQ(cb, pb)
	k.b, k.s, k.t = k.vec(), k.vec(), k.vec()
	VBROADCASTSS(Mem{Base: pb}, k.b)
	VBROADCASTSS(Mem{Base: pb, Disp: 4}, k.s)
	VBROADCASTSS(Mem{Base: pb, Disp: 8}, k.t)
	MOVQ(U32(0), k.oy)
	// Blocks of as many rows as the general registers allow (a block
	// holds a pointer per input row, (rows−1)·stride + size), then
	// smaller ones for the last rows.
	blocks := map[[2]int][]int{{3, 1}: {4, 3, 2, 1}, {3, 2}: {3, 2, 1}, {5, 1}: {3, 2, 1}, {5, 2}: {2, 1}}[[2]int{size, stride}]
	for _, rows := range blocks {
		loop, done := fmt.Sprintf("%s_rows%d", name, rows), fmt.Sprintf("%s_rows%d_done", name, rows)
		Label(loop)
		left := Load(Param("oh"), GP64())
		SUBQ(k.oy, left)
		CMPQ(left, U8(rows))
		JL(LabelRef(done))
		k.block(rows)
		ADDQ(U8(rows), k.oy)
		JMP(LabelRef(loop))
		Label(done)
	}
	// The next channel's planes, weights and epilogue triple.
	step := GP64()
	step2 := GP64()
	MOVQ(paramAddr("ih"), step)
	IMULQ(paramAddr("ldx"), step)
	SHLQ(U8(2), step)
	ADDQ(step, k.x)
	MOVQ(paramAddr("oh"), step2)
	IMULQ(paramAddr("ldy"), step2)
	SHLQ(U8(2), step2)
	ADDQ(step2, k.y)
	ADDQ(U8(4*size*size), cw)
	ADDQ(U8(12), cb)
	DECQ(cn)
	JNZ(LabelRef(name + "_channel"))
	VZEROUPPER()
	RET()
}

var dwOrder Mem

// dwStride2Order returns the VPERMQ index of the 16-lane stride-2
// kernels, defined once for all of them.
func dwStride2Order() Mem {
	if dwOrder.Symbol.Name == "" {
		dwOrder = GLOBL("dwstride2order", RODATA|NOPTR)
		for i, p := range []uint64{0, 2, 4, 6, 1, 3, 5, 7} {
			DATA(8*i, U64(p))
		}
	}
	return dwOrder
}

// dwKernel is the state of depthwisePlane shared by its row blocks.
type dwKernel struct {
	name                string
	size, stride, lanes int
	vec                 func() VecVirtual
	w                   []VecVirtual // the 3×3 weights
	wmem                Mem          // the 5×5 weights, in the frame
	b, s, t, thr        VecVirtual   // the epilogue
	order               VecVirtual   // the VPERMQ index of 16-lane stride 2
	oy                  Mem          // the block's first output row
	x, y                Mem          // the channel's input and output planes
}

// mulWeight sets p = w[i]·tap.
func (k *dwKernel) mulWeight(i int, tap, p VecVirtual) {
	if k.w != nil {
		VMULPS(k.w[i], tap, p)
		return
	}
	VMULPS_BCST(k.wmem.Offset(4*i), tap, p)
}

// block emits output rows oy..oy+rows−1.
func (k *dwKernel) block(rows int) {
	size, stride, bytes := k.size, k.stride, 4*k.lanes
	// Input row j of the block is oy·stride − ph + j, or the zero row when
	// outside [0, ih); each pointer is offset to virtual column 0 (−pw).
	nin := (rows-1)*stride + size
	iy := GP64()
	MOVQ(k.oy, iy)
	if stride == 2 {
		SHLQ(U8(1), iy)
	}
	SUBQ(paramAddr("ph"), iy)
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	pwb := Load(Param("pw"), GP64())
	SHLQ(U8(2), pwb)
	cur := GP64()
	MOVQ(iy, cur)
	IMULQ(ldx, cur)
	ADDQ(k.x, cur)
	SUBQ(pwb, cur)
	zero := Load(Param("zero"), GP64())
	SUBQ(pwb, zero)
	ih := Load(Param("ih"), GP64())
	in := make([]GPVirtual, nin)
	for j := range in {
		in[j] = GP64()
		MOVQ(cur, in[j])
		t := GP64()
		LEAQ(Mem{Base: iy, Disp: j}, t)
		CMPQ(t, ih)
		CMOVQCC(zero, in[j]) // t < 0 or t >= ih, unsigned
		if j+1 < nin {
			ADDQ(ldx, cur)
		}
	}
	// The rows the next block adds start after this block's last one.
	next := GP64()
	LEAQ(Mem{Base: cur, Index: ldx, Scale: 1}, next)
	ldy := Load(Param("ldy"), GP64())
	SHLQ(U8(2), ldy)
	po := GP64()
	MOVQ(k.oy, po)
	IMULQ(ldy, po)
	ADDQ(k.y, po)
	pm := Load(Param("masks"), GP64())
	n := Load(Param("nv"), GP64())
	xo := GP64()
	XORQ(xo, xo)

	loop := fmt.Sprintf("%s_rows%d_vec", k.name, rows)
	Label(loop)
	// The loads' offsets in columns: kx for stride 1, the pairs o and
	// L+o for stride 2.
	var offs []int
	for o := 0; o < size; o += stride {
		offs = append(offs, o)
		if stride == 2 {
			offs = append(offs, k.lanes+o)
		}
	}
	kld := make([]OpmaskVirtual, len(offs))
	for i := range kld {
		kld[i] = K()
		KMOVW(Mem{Base: pm, Disp: 2 * i}, kld[i])
	}
	acc := make([]VecVirtual, rows)
	for r := range acc {
		acc[r] = k.vec()
		VPXORD(acc[r], acc[r], acc[r])
	}
	for j := 0; j < nin; j++ {
		at := func(disp int) Mem { return Mem{Base: in[j], Index: xo, Scale: 1, Disp: disp} }
		// madd adds tap kx's products to the sums of the block's output
		// rows that read input row j.
		madd := func(kx int, tap VecVirtual) {
			for r := range acc {
				ky := j - r*stride
				if ky < 0 || ky >= size {
					continue
				}
				p := k.vec()
				k.mulWeight(size*ky+kx, tap, p)
				VADDPS(p, acc[r], acc[r])
			}
		}
		ld := func(i int) VecVirtual {
			v := k.vec()
			VMOVUPS_Z(at(4*offs[i]), kld[i], v)
			return v
		}
		if stride == 1 {
			for kx := range size {
				madd(kx, ld(kx))
			}
			continue
		}
		for i := 0; i < len(offs); i += 2 {
			a, b := ld(i), ld(i+1)
			kx := offs[i]
			evens := k.vec()
			VSHUFPS(U8(0x88), b, a, evens)
			madd(kx, evens)
			if kx+1 < size {
				odds := k.vec()
				VSHUFPS(U8(0xDD), b, a, odds)
				madd(kx+1, odds)
			}
		}
	}
	// A batch's activations do not fit in the caches, and the hardware
	// prefetcher keeps too few lines in flight over so many row streams:
	// fetch this vector's columns of the rows the next block adds (past
	// the image they fall in the next channel or nowhere; prefetches
	// never fault).
	p := GP64()
	MOVQ(next, p)
	for j := 0; j < rows*stride; j++ {
		for l := 0; l < bytes*stride; l += 64 {
			PREFETCHT0(Mem{Base: p, Index: xo, Scale: 1, Disp: l})
		}
		if j+1 < rows*stride {
			ADDQ(ldx, p)
		}
	}
	kst := K()
	KMOVW(Mem{Base: pm, Disp: 14}, kst)
	q := GP64()
	MOVQ(po, q)
	for r, v := range acc {
		switch {
		case stride == 2 && k.lanes == 16:
			VPERMQ(v, k.order, v)
		case stride == 2:
			VPERMQ(U8(0xD8), v, v) // 0 1 4 5 2 3 6 7 back to 0..7
		}
		VADDPS(k.b, v, v)
		VMULPS(k.s, v, v)
		VADDPS(k.t, v, v)
		relu := K()
		VCMPPS(U8(2), k.thr, v, relu) // v <= thr, false for NaN
		VPXORD(v, v, relu, v)
		VMOVUPS(v, kst, Mem{Base: q})
		if r+1 < rows {
			ADDQ(ldy, q)
		}
	}
	ADDQ(U8(bytes), po)
	ADDQ(U8(16), pm)
	ADDQ(U32(bytes*stride), xo)
	DECQ(n)
	JNZ(LabelRef(loop))
}

// paramAddr is the frame address of the current function's parameter.
func paramAddr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

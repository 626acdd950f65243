package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// convRowMax is the most output pixels a convolution row tile computes:
// 28 accumulators and the two weight vectors in the 32 ZMM registers.
const convRowMax = 14

// convRow generates convRow{pixels}S{stride}AVX512, a tile of a
// convolution with the output channels in the vector lanes: pixels
// consecutive outputs of one output row (column stride stride) by 32
// output channels, over kc kernel taps:
//
//	for p < kc: for r < pixels: for j < 32:
//	    acc[r][j] += w[p*32+j] · x[offs[p] + r*stride]
//	c[r*32+j] = acc[r][j]           (accumulate == 0)
//	c[r*32+j] += acc[r][j]          (accumulate != 0)
//
// Tap p of pixel r reads the image at x + offs[p] + r·stride, so the taps
// are broadcast straight from the (padded) image: no column matrix, and
// no lane computes a column that is dropped, which the wide kernels do
// when an output row is not a multiple of their panel. Each output sums
// the same products in the same order as the GEMM kernels, so the tile
// holds the same bits as the product by packed panels.
func convRow(pixels, stride int) {
	name := fmt.Sprintf("convRow%dS%dAVX512", pixels, stride)
	TEXT(name, NOSPLIT, "func(kc int, x *float32, offs *int, w *float32, c *float32, accumulate int)")
	Doc(fmt.Sprintf("%s computes a convolution row tile %d pixels wide (column stride %d) by 32 output channels.", name, pixels, stride))
	lbl := func(l string) string { return fmt.Sprintf("convRow%dS%d_%s", pixels, stride, l) }
	const vecs, lanes = 2, 16
	kc := Load(Param("kc"), GP64())
	px := Load(Param("x"), GP64())
	offs := Load(Param("offs"), GP64())
	pw := Load(Param("w"), GP64())
	acc := make([][]VecVirtual, pixels)
	for r := range acc {
		acc[r] = make([]VecVirtual, vecs)
		for v := range acc[r] {
			acc[r][v] = ZMM()
			VPXORD(acc[r][v], acc[r][v], acc[r][v])
		}
	}
	wv := []VecVirtual{ZMM(), ZMM()}
	step := func(off int) {
		row := GP64()
		MOVQ(Mem{Base: offs, Disp: 8 * off}, row)
		LEAQ(Mem{Base: px, Index: row, Scale: 4}, row)
		for v := range wv {
			VMOVUPS(Mem{Base: pw, Disp: 4 * (off*vecs*lanes + v*lanes)}, wv[v])
		}
		for r := 0; r < pixels; r++ {
			for v := range wv {
				VFMADD231PS_BCST(Mem{Base: row, Disp: 4 * r * stride}, wv[v], acc[r][v])
			}
		}
	}
	stepLoop(lbl, kc, step, func(steps int) {
		ADDQ(U32(4*steps*vecs*lanes), pw)
		ADDQ(U8(8*steps), offs)
	})

	Label(lbl("store"))
	pc := Load(Param("c"), GP64())
	accum := Load(Param("accumulate"), GP64())
	TESTQ(accum, accum)
	JZ(LabelRef(lbl("overwrite")))
	for r := range acc {
		for v := range acc[r] {
			m := Mem{Base: pc, Disp: 4 * (r*vecs*lanes + v*lanes)}
			VADDPS(m, acc[r][v], acc[r][v])
			VMOVUPS(acc[r][v], m)
		}
	}
	VZEROUPPER()
	RET()
	Label(lbl("overwrite"))
	for r := range acc {
		for v := range acc[r] {
			VMOVUPS(acc[r][v], Mem{Base: pc, Disp: 4 * (r*vecs*lanes + v*lanes)})
		}
	}
	VZEROUPPER()
	RET()
}

// convRowStore generates convRowStoreAVX512, which moves a row tile
// (convRow's output: up to 16 pixel rows of 32 channels, rows ≥ pixels
// unused) to the NCHW output: channel j's pixels go to c + j·ldc, for j <
// channels. The epilogue is pkg/kernels' Epilogue.apply with the same
// roundings and operand orders: when ep is not nil it holds, by channel,
// 32 biases b, 32 scales s and 32 shifts t, and each value v becomes ((v
// + b)·s) + t, applied while the channels are the lanes; when res is not
// nil, the residual laid out as c (res + j·ldc) is added after the
// transposition, as its left operand if flags&2; then values ≤ 0 are
// zeroed if flags&1. Each 16-channel half is transposed in registers,
// 16×16, by interleaving floats, pairs of floats, then 128-bit blocks
// twice.
func convRowStore() {
	const name = "convRowStoreAVX512"
	TEXT(name, NOSPLIT, "func(tile *float32, pixels int, c *float32, ldc int, channels int, ep *float32, res *float32, flags int)")
	Doc(name + " transposes a convolution row tile into the output, applying the epilogue ep and res (may be nil).")
	pt := Load(Param("tile"), GP64())
	pixels := Load(Param("pixels"), GP64())
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	channels := Load(Param("channels"), GP64())
	pe := Load(Param("ep"), GP64())
	pr := Load(Param("res"), GP64())
	flags := Load(Param("flags"), GP64())
	// mask selects the lanes of the tile's pixels.
	mask, one := GP64(), GP64()
	MOVQ(U32(1), one)
	MOVQ(pixels, RCX)
	SHLQ(CL, one)
	LEAQ(Mem{Base: one, Disp: -1}, mask)
	k := K()
	KMOVW(mask.As32(), k)
	zeroV := ZMM()
	VPXORD(zeroV, zeroV, zeroV)
	relu := func(v VecVirtual) {
		// v ≤ 0 (false for NaN) becomes +0.
		le := K()
		VCMPPS(U8(2), zeroV, v, le)
		VPXORD(v, v, le, v)
	}
	for h := 0; h < 2; h++ {
		lbl := func(l string) string { return fmt.Sprintf("convRowStore_h%d_%s", h, l) }
		if h == 1 {
			CMPQ(channels, U8(16))
			JLE(LabelRef("convRowStore_done"))
		}
		v := make([]VecVirtual, 16)
		for r := range v {
			v[r] = ZMM()
			VMOVUPS(Mem{Base: pt, Disp: 4 * (r*32 + 16*h)}, v[r])
		}
		TESTQ(pe, pe)
		JZ(LabelRef(lbl("relu")))
		b, s, t := ZMM(), ZMM(), ZMM()
		VMOVUPS(Mem{Base: pe, Disp: 4 * (16 * h)}, b)
		VMOVUPS(Mem{Base: pe, Disp: 4 * (32 + 16*h)}, s)
		VMOVUPS(Mem{Base: pe, Disp: 4 * (64 + 16*h)}, t)
		for r := range v {
			VADDPS(b, v[r], v[r])
			VMULPS(s, v[r], v[r])
			VADDPS(t, v[r], v[r])
		}
		// Without a residual the Relu comes now, on 16 pixels a vector.
		Label(lbl("relu"))
		TESTQ(pr, pr)
		JNZ(LabelRef(lbl("transpose")))
		TESTQ(U32(1), flags)
		JZ(LabelRef(lbl("transpose")))
		for r := range v {
			relu(v[r])
		}
		Label(lbl("transpose"))
		// t[2i], t[2i+1]: rows 2i and 2i+1 interleaved by floats.
		tv := make([]VecVirtual, 16)
		for i := 0; i < 8; i++ {
			tv[2*i], tv[2*i+1] = ZMM(), ZMM()
			VUNPCKLPS(v[2*i+1], v[2*i], tv[2*i])
			VUNPCKHPS(v[2*i+1], v[2*i], tv[2*i+1])
		}
		// u[4g+c], block q: rows 4g … 4g+3 of column 4q + c.
		u := make([]VecVirtual, 16)
		for g := 0; g < 4; g++ {
			for c := 0; c < 4; c++ {
				u[4*g+c] = ZMM()
			}
			VSHUFPS(U8(0x44), tv[4*g+2], tv[4*g], u[4*g])
			VSHUFPS(U8(0xEE), tv[4*g+2], tv[4*g], u[4*g+1])
			VSHUFPS(U8(0x44), tv[4*g+3], tv[4*g+1], u[4*g+2])
			VSHUFPS(U8(0xEE), tv[4*g+3], tv[4*g+1], u[4*g+3])
		}
		// Column 4q + c has block g of u[4g+c]'s block q.
		out := make([]VecVirtual, 16)
		for c := 0; c < 4; c++ {
			a, bb, cc, d := u[c], u[4+c], u[8+c], u[12+c]
			p, q, r, s := ZMM(), ZMM(), ZMM(), ZMM()
			VSHUFF32X4(U8(0x44), bb, a, p) // a0 a1 b0 b1
			VSHUFF32X4(U8(0xEE), bb, a, q) // a2 a3 b2 b3
			VSHUFF32X4(U8(0x44), d, cc, r) // c0 c1 d0 d1
			VSHUFF32X4(U8(0xEE), d, cc, s) // c2 c3 d2 d3
			for qb := 0; qb < 4; qb++ {
				out[4*qb+c] = ZMM()
			}
			VSHUFF32X4(U8(0x88), r, p, out[c])
			VSHUFF32X4(U8(0xDD), r, p, out[4+c])
			VSHUFF32X4(U8(0x88), s, q, out[8+c])
			VSHUFF32X4(U8(0xDD), s, q, out[12+c])
		}
		row := GP64()
		MOVQ(pc, row)
		TESTQ(pr, pr)
		JZ(LabelRef(lbl("plain")))
		// With a residual: add it, in the graph's operand order, then the
		// Relu.
		rrow := GP64()
		MOVQ(pr, rrow)
		for j := 0; j < 16; j++ {
			CMPQ(channels, U8(16*h+j))
			JLE(LabelRef("convRowStore_done"))
			rv := ZMM()
			VMOVUPS_Z(Mem{Base: rrow}, k, rv)
			TESTQ(U32(2), flags)
			first := fmt.Sprintf("convRowStore_h%d_first%d", h, j)
			added := fmt.Sprintf("convRowStore_h%d_added%d", h, j)
			JNZ(LabelRef(first))
			VADDPS(rv, out[j], out[j])
			JMP(LabelRef(added))
			Label(first)
			VADDPS(out[j], rv, out[j])
			Label(added)
			TESTQ(U32(1), flags)
			JZ(LabelRef(fmt.Sprintf("convRowStore_h%d_store%d", h, j)))
			relu(out[j])
			Label(fmt.Sprintf("convRowStore_h%d_store%d", h, j))
			VMOVUPS(out[j], k, Mem{Base: row})
			ADDQ(ldc, row)
			ADDQ(ldc, rrow)
		}
		if h == 0 {
			MOVQ(row, pc)
			MOVQ(rrow, pr)
			JMP(LabelRef("convRowStore_h1_start"))
		} else {
			JMP(LabelRef("convRowStore_done"))
		}
		Label(lbl("plain"))
		for j := 0; j < 16; j++ {
			CMPQ(channels, U8(16*h+j))
			JLE(LabelRef("convRowStore_done"))
			VMOVUPS(out[j], k, Mem{Base: row})
			ADDQ(ldc, row)
		}
		if h == 0 {
			MOVQ(row, pc)
			Label("convRowStore_h1_start")
		}
	}
	Label("convRowStore_done")
	VZEROUPPER()
	RET()
}

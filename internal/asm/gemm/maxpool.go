package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// maxRow generates the AVX2 max-pooling row kernel maxRowAVX2: for i < n
// (a multiple of 8), with v = src[i],
//
//	dst[i] = v                          (first != 0)
//	dst[i] = v > dst[i] ? v : dst[i]    (first == 0)
//
// VMAXPS with v as the first source computes exactly that select (the
// second source on equality and on NaN), so a NaN that reached dst stays
// and a later NaN is skipped, as in the Go loop.
func maxRow() {
	const name = "maxRowAVX2"
	TEXT(name, NOSPLIT, "func(dst, src *float32, n int, first int)")
	Doc(fmt.Sprintf("%s folds a row of the pooling window into dst (n a multiple of 8).", name))
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	first := Load(Param("first"), GP64())
	load := func(v VecVirtual) {
		VMOVUPS(Mem{Base: ps}, v)
		ADDQ(U8(32), ps)
	}
	TESTQ(first, first)
	JZ(LabelRef(name + "_max"))
	Label(name + "_first")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	v := YMM()
	load(v)
	VMOVUPS(v, Mem{Base: pd})
	ADDQ(U8(32), pd)
	SUBQ(U8(8), n)
	JMP(LabelRef(name + "_first"))
	Label(name + "_max")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	w, r := YMM(), YMM()
	load(w)
	VMOVUPS(Mem{Base: pd}, r)
	VMAXPS(r, w, r) // r = w > r ? w : r
	VMOVUPS(r, Mem{Base: pd})
	ADDQ(U8(32), pd)
	SUBQ(U8(8), n)
	JMP(LabelRef(name + "_max"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// maxPoolS2 generates maxPoolS2AVX512, a row of stride-2 max pooling with
// windows of rows × taps (taps 2 or 3, column dilation 1) that lie inside
// the input: for o < n, window o's tap (ky, kx) is x[ky·ldx + 2·o + kx],
//
//	y[o] = fold of the taps in (ky, kx) order, starting at tap (0, 0),
//	       with acc = v > acc ? v : acc
//
// and the same for count output rows, the input of each xstep floats
// after the previous row's and its outputs ystep floats after. Sixteen
// outputs at a time: the even and odd columns of 32 loaded floats (and,
// for 3 taps, the even ones from 2 further on) are separated with
// VPERMT2PS, so each tap is one vector. A last block of fewer than 16 is
// stored under a mask; it still reads 34 floats from its start in every
// row, which the caller keeps inside x. One call takes a whole plane: a
// call per output row cost more than the pooling on LeNet's 14-wide rows.
func maxPoolS2() {
	const name = "maxPoolS2AVX512"
	TEXT(name, NOSPLIT, "func(x *float32, ldx, rows, taps, n int, y *float32, count, xstep, ystep int)")
	Doc(fmt.Sprintf("%s computes count rows of n outputs of stride-2 max pooling over windows inside the input.", name))
	even := GLOBL("maxPoolEvenIdx", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U32(2*i))
	}
	odd := GLOBL("maxPoolOddIdx", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U32(2*i+1))
	}
	rowX := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	rows := Load(Param("rows"), GP64())
	taps := Load(Param("taps"), GP64())
	rowN := Load(Param("n"), GP64())
	rowY := Load(Param("y"), GP64())
	count := Load(Param("count"), GP64())
	xstep := Load(Param("xstep"), GP64())
	SHLQ(U8(2), xstep)
	ystep := Load(Param("ystep"), GP64())
	SHLQ(U8(2), ystep)
	px, py, n := GP64(), GP64(), GP64()
	ie, io := ZMM(), ZMM()
	VMOVDQU32(even, ie)
	VMOVDQU32(odd, io)
	// tap loads the even (idx ie) or odd columns of the 32 floats at p
	// into t.
	tap := func(p Mem, idx, t VecVirtual) {
		hi := ZMM()
		VMOVUPS(p, t)
		p.Disp += 64
		VMOVUPS(p, hi)
		VPERMT2PS(hi, idx, t)
	}
	Label(name + "_outrow")
	TESTQ(count, count)
	JZ(LabelRef(name + "_done"))
	MOVQ(rowX, px)
	MOVQ(rowY, py)
	MOVQ(rowN, n)
	Label(name + "_block")
	TESTQ(n, n)
	JZ(LabelRef(name + "_next"))
	acc := ZMM()
	row := GP64()
	MOVQ(px, row)
	k := GP64()
	MOVQ(rows, k)
	t := ZMM()
	// Row 0 starts the fold at tap (0, 0).
	tap(Mem{Base: row}, ie, acc)
	tap(Mem{Base: row}, io, t)
	VMAXPS(acc, t, acc) // acc = t > acc ? t : acc
	CMPQ(taps, U8(3))
	JNE(LabelRef(name + "_row0done"))
	tap(Mem{Base: row, Disp: 8}, ie, t)
	VMAXPS(acc, t, acc)
	Label(name + "_row0done")
	Label(name + "_rows")
	DECQ(k)
	JZ(LabelRef(name + "_store"))
	ADDQ(ldx, row)
	tap(Mem{Base: row}, ie, t)
	VMAXPS(acc, t, acc)
	tap(Mem{Base: row}, io, t)
	VMAXPS(acc, t, acc)
	CMPQ(taps, U8(3))
	JNE(LabelRef(name + "_rows"))
	tap(Mem{Base: row, Disp: 8}, ie, t)
	VMAXPS(acc, t, acc)
	JMP(LabelRef(name + "_rows"))
	Label(name + "_store")
	CMPQ(n, U8(16))
	JL(LabelRef(name + "_tail"))
	VMOVUPS(acc, Mem{Base: py})
	ADDQ(U8(128), px)
	ADDQ(U8(64), py)
	SUBQ(U8(16), n)
	JMP(LabelRef(name + "_block"))
	Label(name + "_tail")
	// Mask of the n < 16 lanes left.
	ones, m := GP64(), GP64()
	MOVQ(U32(0xffff), ones)
	BZHIQ(n, ones, m) // m = ones with bits n and up cleared
	kmask := K()
	KMOVW(m.As32(), kmask)
	VMOVUPS(acc, kmask, Mem{Base: py})
	Label(name + "_next")
	ADDQ(xstep, rowX)
	ADDQ(ystep, rowY)
	DECQ(count)
	JMP(LabelRef(name + "_outrow"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

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

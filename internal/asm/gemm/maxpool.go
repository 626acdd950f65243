package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// maxRow generates the AVX2 max-pooling row kernels: for i < n (a multiple
// of 8), with v = src[i·stride] (maxRowAVX2: stride 1, a plain load;
// maxRowGatherAVX2: the offsets i·stride come from the 8 int32 lane
// offsets idx and a gather),
//
//	dst[i] = v                          (first != 0)
//	dst[i] = v > dst[i] ? v : dst[i]    (first == 0)
//
// VMAXPS with v as the first source computes exactly that select (the
// second source on equality and on NaN), so a NaN that reached dst stays
// and a later NaN is skipped, as in the Go loop.
func maxRow(gather bool) {
	name := "maxRowAVX2"
	sig := "func(dst, src *float32, n int, first int)"
	if gather {
		name = "maxRowGatherAVX2"
		sig = "func(dst, src *float32, n int, first int, idx *int32, stride int)"
	}
	TEXT(name, NOSPLIT, sig)
	Doc(fmt.Sprintf("%s folds a row of the pooling window into dst (n a multiple of 8).", name))
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	first := Load(Param("first"), GP64())
	var vidx VecVirtual
	var step Register
	if gather {
		pi := Load(Param("idx"), GP64())
		vidx = YMM()
		VMOVDQU(Mem{Base: pi}, vidx)
		step = Load(Param("stride"), GP64())
		SHLQ(U8(5), step) // 8 lanes · 4 bytes
	}
	load := func(v VecVirtual) {
		if !gather {
			VMOVUPS(Mem{Base: ps}, v)
			ADDQ(U8(32), ps)
			return
		}
		m := YMM()
		VPCMPEQD(m, m, m)
		VGATHERDPS(m, Mem{Base: ps, Index: vidx, Scale: 4}, v)
		ADDQ(step, ps)
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

package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// rowMax generates rowMaxAVX2 and rowMaxAVX512: the largest of x[:n] (n a
// multiple of the lanes, 8 or 16) and −Inf, NaN skipped, as Softmax's Go
// loop finds it: each lane keeps its value unless the element is greater
// (VMAXPS returns its second source, the lane's value, when the element
// is NaN or equal), then the lanes are folded. Equal values of other
// signs of zero may leave the other zero, which every e^(x−m) then
// computes alike.
func rowMax() {
	rowMaxOf("AVX2", 8, YMM)
	rowMaxOf("AVX512", 16, ZMM)
}

func rowMaxOf(set string, lanes int, vec func() VecVirtual) {
	name := "rowMax" + set
	TEXT(name, NOSPLIT, "func(x *float32, n int) float32")
	Doc(fmt.Sprintf("%s returns the largest of x[:n] and −Inf, NaN skipped (n a multiple of %d).", name, lanes))
	px := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	acc := vec()
	t := GP32()
	MOVL(U32(math.Float32bits(float32(math.Inf(-1)))), t)
	VMOVD(t, acc.AsX())
	VBROADCASTSS(acc.AsX(), acc)
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	v := vec()
	VMOVUPS(Mem{Base: px}, v)
	VMAXPS(acc, v, acc) // v > acc ? v : acc
	ADDQ(U32(4*lanes), px)
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	// Fold the lanes: no lane holds NaN, so the order of the folds does
	// not matter.
	if lanes == 16 {
		h := YMM()
		VEXTRACTF32X8(U8(1), acc, h)
		VMAXPS(h, acc.AsY(), h)
		acc = h
	}
	x := XMM()
	VEXTRACTF128(U8(1), acc.AsY(), x)
	VMAXPS(x, acc.AsX(), x)
	s := XMM()
	VPERMILPS(U8(0x4e), x, s)
	VMAXPS(s, x, x)
	VPERMILPS(U8(0xb1), x, s)
	VMAXPS(s, x, x)
	VZEROUPPER()
	Store(x, ReturnIndex(0))
	RET()
}

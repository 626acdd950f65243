package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// epilogue generates the AVX2 epilogue row kernels: for j < n (a multiple
// of 8), in place,
//
//	y = float32(float32(x[j] + b) · s) + t   (three roundings, no FMA)
//	x[j] = relu ? (y <= 0 ? +0 : y) : y
//
// exactly what the pure-Go epilogue computes element by element.
func epilogue(relu bool) {
	name := "epilogueRowAVX2"
	if relu {
		name = "epilogueRowReluAVX2"
	}
	TEXT(name, NOSPLIT, "func(x *float32, n int, b, s, t float32)")
	what := ""
	if relu {
		what = ", then Relu"
	}
	Doc(fmt.Sprintf("%s computes x = (x + b)·s + t in place on n floats (n a multiple of 8)%s.", name, what))
	px := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	vb, vs, vt, zero := YMM(), YMM(), YMM(), YMM()
	VBROADCASTSS(NewParamAddr("b", 16), vb)
	VBROADCASTSS(NewParamAddr("s", 20), vs)
	VBROADCASTSS(NewParamAddr("t", 24), vt)
	VXORPS(zero, zero, zero)
	const unroll = 4
	body := func(k int) {
		v := make([]VecVirtual, k)
		for i := range v {
			v[i] = YMM()
			VMOVUPS(Mem{Base: px, Disp: 32 * i}, v[i])
		}
		for i := range v {
			VADDPS(vb, v[i], v[i])
			VMULPS(vs, v[i], v[i])
			VADDPS(vt, v[i], v[i])
			if relu {
				m := YMM()
				VCMPPS(U8(2), zero, v[i], m) // m = v <= 0 (false for NaN)
				VANDNPS(v[i], m, v[i])       // v = ^m & v
			}
			VMOVUPS(v[i], Mem{Base: px, Disp: 32 * i})
		}
	}
	Label(name + "_loop4")
	CMPQ(n, U8(8*unroll))
	JL(LabelRef(name + "_loop1"))
	body(unroll)
	ADDQ(U8(32*unroll), px)
	SUBQ(U8(8*unroll), n)
	JMP(LabelRef(name + "_loop4"))
	Label(name + "_loop1")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	body(1)
	ADDQ(U8(32), px)
	SUBQ(U8(8), n)
	JMP(LabelRef(name + "_loop1"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

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

// axpy generates axpyAVX2: for j < n (a multiple of 8),
//
//	dst[j] = dst[j] + float32(w·src[j])   (two roundings, no FMA)
//
// exactly what the Go loop `dst[j] += w * src[j]` computes.
func axpy() {
	TEXT("axpyAVX2", NOSPLIT, "func(dst, src *float32, n int, w float32)")
	Doc("axpyAVX2 computes dst += w·src on n floats (n a multiple of 8), product rounded before the add.")
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	vw := YMM()
	VBROADCASTSS(NewParamAddr("w", 24), vw)
	body := func(k int) {
		v := make([]VecVirtual, k)
		for i := range v {
			v[i] = YMM()
			VMULPS(Mem{Base: ps, Disp: 32 * i}, vw, v[i])
		}
		for i := range v {
			VADDPS(Mem{Base: pd, Disp: 32 * i}, v[i], v[i])
			VMOVUPS(v[i], Mem{Base: pd, Disp: 32 * i})
		}
	}
	Label("axpy_loop4")
	CMPQ(n, U8(32))
	JL(LabelRef("axpy_loop1"))
	body(4)
	ADDQ(U8(128), pd)
	ADDQ(U8(128), ps)
	SUBQ(U8(32), n)
	JMP(LabelRef("axpy_loop4"))
	Label("axpy_loop1")
	TESTQ(n, n)
	JZ(LabelRef("axpy_done"))
	body(1)
	ADDQ(U8(32), pd)
	ADDQ(U8(32), ps)
	SUBQ(U8(8), n)
	JMP(LabelRef("axpy_loop1"))
	Label("axpy_done")
	VZEROUPPER()
	RET()
}

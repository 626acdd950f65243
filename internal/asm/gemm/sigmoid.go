package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// sigmoid generates sigmoidRowAVX2(dst, src, n, silu): for j < n (a
// multiple of 8)
//
//	dst[j] = Sigmoid32(src[j])               (silu == 0)
//	dst[j] = float32(src[j]·Sigmoid32(src[j]))   (silu != 0)
//
// with pkg/kernels' Sigmoid32: e^−v by expSub's range reduction and
// polynomial (the same constants, the same operations in the same order,
// no FMA), then 1/(1 + e), so each result is bit-identical to it. −v
// flips the sign bit as Go's negation does; the clamp keeps NaN (VMINPS
// returns its second source, the value, when it is NaN).
func sigmoid() {
	TEXT("sigmoidRowAVX2", NOSPLIT, "func(dst, src *float32, n int, silu int)")
	Doc("sigmoidRowAVX2 sets dst[j] = Sigmoid32(src[j]), times src[j] when silu != 0, for j < n (a multiple of 8).")
	r := loadExpRegs()
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	silu := Load(Param("silu"), GP64())
	bias, sign := expBiasAndSign()

	Label("sigmoid_loop")
	TESTQ(n, n)
	JZ(LabelRef("sigmoid_done"))
	v, x := YMM(), YMM()
	VMOVUPS(Mem{Base: ps}, v)
	VXORPS(sign, v, x)
	p := r.exp(x, bias)
	VADDPS(r.one, p, p)
	y := YMM()
	VDIVPS(p, r.one, y) // 1/(1 + e)
	TESTQ(silu, silu)
	JZ(LabelRef("sigmoid_store"))
	VMULPS(v, y, y)
	Label("sigmoid_store")
	VMOVUPS(y, Mem{Base: pd})
	ADDQ(U8(32), ps)
	ADDQ(U8(32), pd)
	SUBQ(U8(8), n)
	JMP(LabelRef("sigmoid_loop"))

	Label("sigmoid_done")
	VZEROUPPER()
	RET()
}

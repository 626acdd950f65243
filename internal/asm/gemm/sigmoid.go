package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
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
	consts := expConstsData()
	bc := func(i int) VecVirtual {
		v := YMM()
		VMOVUPS(consts.Offset(32*i), v)
		return v
	}
	log2e, c1, c2 := bc(0), bc(1), bc(2)
	one, lo, hi := bc(9), bc(10), bc(11)
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	silu := Load(Param("silu"), GP64())
	t32 := GP32()
	bias, sign := YMM(), YMM()
	MOVL(U32(127), t32)
	VMOVD(t32, bias.AsX())
	VPBROADCASTD(bias.AsX(), bias)
	MOVL(U32(0x80000000), t32)
	VMOVD(t32, sign.AsX())
	VPBROADCASTD(sign.AsX(), sign)

	Label("sigmoid_loop")
	TESTQ(n, n)
	JZ(LabelRef("sigmoid_done"))
	v, x := YMM(), YMM()
	VMOVUPS(Mem{Base: ps}, v)
	VXORPS(sign, v, x)
	VMINPS(x, hi, x) // min(hi, x); NaN x is the second source and stays
	under := YMM()
	VCMPPS(U8(1), lo, x, under) // x < lo, false for NaN
	k := YMM()
	VMULPS(log2e, x, k)
	VROUNDPS(U8(0), k, k) // nearest even
	t := YMM()
	VMULPS(c1, k, t)
	VSUBPS(t, x, x)
	VMULPS(c2, k, t)
	VSUBPS(t, x, x) // r
	p := bc(3)
	for i := 4; i <= 8; i++ {
		VMULPS(x, p, p)
		VADDPS(consts.Offset(32*i), p, p)
	}
	z := YMM()
	VMULPS(x, x, z)
	VMULPS(z, p, p)
	VADDPS(x, p, p)
	VADDPS(one, p, p)
	e := YMM()
	VCVTPS2DQ(k, e)
	VPADDD(bias, e, e)
	VPSLLD(U8(23), e, e)
	VMULPS(e, p, p)
	VANDNPS(p, under, p) // e^x, 0 where x < lo
	VADDPS(one, p, p)
	y := YMM()
	VDIVPS(p, one, y) // 1/(1 + e)
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

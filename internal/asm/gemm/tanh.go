package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// tanhConsts are the constants of tanhRowAVX2 besides e^x's: pkg/kernels'
// tanhSmall, tanhClamp, 2 and the coefficients of Q in Tanh32.
var tanhConsts = []float32{
	0.625, // tanhSmall
	9,     // tanhClamp
	2,
	-5.70498872745e-3, // Q, highest degree first
	2.06390887954e-2,
	-5.37397155531e-2,
	1.33314422036e-1,
	-3.33332819422e-1,
}

// tanh generates tanhRowAVX2(dst, src, n): for j < n (a multiple of 8)
// dst[j] = Tanh32(src[j]) with pkg/kernels' Tanh32, computing both of its
// branches on every lane and keeping one: the same operations in the same
// order, no FMA, so each result is bit-identical. A NaN lane takes the
// polynomial branch (the compare is "not ≥", true when unordered), which
// keeps it NaN.
func tanh() {
	TEXT("tanhRowAVX2", NOSPLIT, "func(dst, src *float32, n int)")
	Doc("tanhRowAVX2 sets dst[j] = Tanh32(src[j]) for j < n (a multiple of 8).")
	consts := GLOBL("tanhconsts", RODATA|NOPTR)
	for i, c := range tanhConsts {
		for l := 0; l < 8; l++ {
			DATA(32*i+4*l, U32(math.Float32bits(c)))
		}
	}
	r := loadExpRegs()
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	bias, sign := expBiasAndSign()

	Label("tanh_loop")
	TESTQ(n, n)
	JZ(LabelRef("tanh_done"))
	v, a := YMM(), YMM()
	VMOVUPS(Mem{Base: ps}, v)
	VANDNPS(v, sign, a) // |v|
	// 1 − 2/(e^{2·min(a, clamp)} + 1)
	x := YMM()
	VMINPS(consts.Offset(32), a, x)
	VADDPS(x, x, x)
	e := r.exp(x, bias)
	VADDPS(r.one, e, e)
	big := YMM()
	VMOVUPS(consts.Offset(64), big)
	VDIVPS(e, big, big)
	VSUBPS(big, r.one, big)
	// ((Q(z)·z)·a) + a
	z, q := YMM(), YMM()
	VMULPS(a, a, z)
	VMOVUPS(consts.Offset(96), q)
	for i := 4; i < len(tanhConsts); i++ {
		VMULPS(z, q, q)
		VADDPS(consts.Offset(32*i), q, q)
	}
	VMULPS(z, q, q)
	VMULPS(a, q, q)
	VADDPS(a, q, q)
	small := YMM()
	VCMPPS(U8(9), consts, a, small) // !(a ≥ tanhSmall): a < tanhSmall or NaN
	VBLENDVPS(small, q, big, big)
	VANDPS(sign, v, v)
	VORPS(v, big, big)
	VMOVUPS(big, Mem{Base: pd})
	ADDQ(U8(32), ps)
	ADDQ(U8(32), pd)
	SUBQ(U8(8), n)
	JMP(LabelRef("tanh_loop"))

	Label("tanh_done")
	VZEROUPPER()
	RET()
}

package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// hardSwish generates hardSwishRowAVX2(dst, src, n, shift, lo, hi, d,
// div): for j < n (a multiple of 8), with x = src[j],
//
//	t = x + shift
//	c = t when it is NaN, else min(max(t, lo), hi) as clipRowAVX2 computes it
//	p = x · c
//	dst[j] = div ? p / d : p · d
//
// each step one IEEE operation, so the result is that of the Go loop of
// pkg/kernels' HardSwishChain for the bounds Clip's vector kernel accepts.
func hardSwish() {
	TEXT("hardSwishRowAVX2", NOSPLIT, "func(dst, src *float32, n int, shift, lo, hi, d float32, div bool)")
	Doc("hardSwishRowAVX2 sets dst[j] = x·clip(x + shift, lo, hi) divided by d (div) or multiplied by it, x = src[j], for j < n (a multiple of 8).")
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	bcast := func(name string) VecVirtual {
		x := XMM()
		Load(Param(name), x)
		v := YMM()
		VBROADCASTSS(x, v)
		return v
	}
	shift, lo, hi, d := bcast("shift"), bcast("lo"), bcast("hi"), bcast("d")
	div := Load(Param("div"), GP8())
	for _, withDiv := range []bool{true, false} {
		loop, done := "hardswish_div", "hardswish_div_done"
		if !withDiv {
			Label("hardswish_mul")
			loop, done = "hardswish_mul_loop", "hardswish_mul_done"
		} else {
			TESTB(div, div)
			JZ(LabelRef("hardswish_mul"))
		}
		Label(loop)
		TESTQ(n, n)
		JZ(LabelRef(done))
		x, t, c, nan := YMM(), YMM(), YMM(), YMM()
		VMOVUPS(Mem{Base: ps}, x)
		VADDPS(shift, x, t)
		VMAXPS(lo, t, c) // t > lo ? t : lo
		VMINPS(hi, c, c) // c < hi ? c : hi
		VCMPPS(U8(3), t, t, nan)
		VBLENDVPS(nan, t, c, c)
		VMULPS(c, x, c)
		if withDiv {
			VDIVPS(d, c, c)
		} else {
			VMULPS(d, c, c)
		}
		VMOVUPS(c, Mem{Base: pd})
		ADDQ(U8(32), ps)
		ADDQ(U8(32), pd)
		SUBQ(U8(8), n)
		JMP(LabelRef(loop))
		Label(done)
		VZEROUPPER()
		RET()
	}
}

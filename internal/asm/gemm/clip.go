package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// clip generates clipRowAVX2(dst, src, n, lo, hi): for j < n (a multiple
// of 8), dst[j] = v = src[j] when it is NaN, else
//
//	m = v > lo ? v : lo
//	dst[j] = m < hi ? m : hi
//
// which is Go's min(max(v, lo), hi) (+0 from max(−0, +0), −0 from
// min(−0, +0)) for lo and hi not NaN, lo not −0 and hi not ±0: pkg/kernels'
// Clip checks that and loops in Go otherwise.
func clip() {
	TEXT("clipRowAVX2", NOSPLIT, "func(dst, src *float32, n int, lo, hi float32)")
	Doc("clipRowAVX2 sets dst[j] = min(max(src[j], lo), hi) as Go computes it, for j < n (a multiple of 8) and bounds Clip accepts.")
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	lx, hx := XMM(), XMM()
	Load(Param("lo"), lx)
	Load(Param("hi"), hx)
	lo, hi := YMM(), YMM()
	VBROADCASTSS(lx, lo)
	VBROADCASTSS(hx, hi)
	Label("clip_loop")
	TESTQ(n, n)
	JZ(LabelRef("clip_done"))
	v, m, nan := YMM(), YMM(), YMM()
	VMOVUPS(Mem{Base: ps}, v)
	VMAXPS(lo, v, m) // v > lo ? v : lo
	VMINPS(hi, m, m) // m < hi ? m : hi
	VCMPPS(U8(3), v, v, nan)
	VBLENDVPS(nan, v, m, m)
	VMOVUPS(m, Mem{Base: pd})
	ADDQ(U8(32), ps)
	ADDQ(U8(32), pd)
	SUBQ(U8(8), n)
	JMP(LabelRef("clip_loop"))
	Label("clip_done")
	VZEROUPPER()
	RET()
}

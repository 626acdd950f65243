package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// erfP and erfQ are the coefficients of pkg/kernels' Erf64, highest
// degree first: erf(v) = v·P(v²)/Q(v²) on v clamped to [−4, 4].
var (
	erfP = []float64{-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02}
	erfQ = []float64{-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02}
)

// erf generates erfRowAVX2: for j < n (a multiple of 8),
//
//	dst[j] = float32(Erf64(float64(src[j])))
//
// in float64 lanes with the same operations in the same order as the Go
// formula (Horner steps rounded after the product and after the add, no
// FMA), so each result is bit-identical to it; the clamp keeps NaN
// (VMINPD/VMAXPD return their second source, the value, when it is NaN).
func erf() {
	TEXT("erfRowAVX2", NOSPLIT, "func(dst, src *float32, n int)")
	Doc("erfRowAVX2 computes dst[j] = erf(src[j]) for j < n (n a multiple of 8), as Erf64 in float64.")
	consts := GLOBL("erfconsts", RODATA|NOPTR)
	all := append(append([]float64{}, erfP...), erfQ...)
	for i, c := range all {
		for l := 0; l < 4; l++ {
			DATA(32*i+8*l, U64(math.Float64bits(c)))
		}
	}
	cp := func(i int) Mem { return consts.Offset(32 * i) }
	cq := func(i int) Mem { return consts.Offset(32 * (len(erfP) + i)) }
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	hi, lo := YMM(), YMM()
	t := GP64()
	MOVQ(U64(math.Float64bits(4)), t)
	VMOVQ(t, hi.AsX())
	VBROADCASTSD(hi.AsX(), hi)
	MOVQ(U64(math.Float64bits(-4)), t)
	VMOVQ(t, lo.AsX())
	VBROADCASTSD(lo.AsX(), lo)
	Label("erf_loop")
	TESTQ(n, n)
	JZ(LabelRef("erf_done"))
	const k = 2 // vectors of 4 doubles per iteration
	v, x2, p, q := make([]VecVirtual, k), make([]VecVirtual, k), make([]VecVirtual, k), make([]VecVirtual, k)
	for i := 0; i < k; i++ {
		v[i], x2[i], p[i], q[i] = YMM(), YMM(), YMM(), YMM()
		VCVTPS2PD(Mem{Base: ps, Disp: 16 * i}, v[i])
		VMINPD(v[i], hi, v[i]) // min(4, v)
		VMAXPD(v[i], lo, v[i]) // max(-4, ·)
		VMULPD(v[i], v[i], x2[i])
		VMULPD(cp(0), x2[i], p[i])
		VADDPD(cp(1), p[i], p[i])
		VMULPD(cq(0), x2[i], q[i])
		VADDPD(cq(1), q[i], q[i])
	}
	for j := 2; j < len(erfP); j++ {
		for i := 0; i < k; i++ {
			VMULPD(x2[i], p[i], p[i])
			VADDPD(cp(j), p[i], p[i])
			if j < len(erfQ) {
				VMULPD(x2[i], q[i], q[i])
				VADDPD(cq(j), q[i], q[i])
			}
		}
	}
	for i := 0; i < k; i++ {
		VMULPD(p[i], v[i], v[i])
		VDIVPD(q[i], v[i], v[i]) // v / q
		VCVTPD2PSY(v[i], v[i].AsX())
		VMOVUPS(v[i].AsX(), Mem{Base: pd, Disp: 16 * i})
	}
	ADDQ(U8(16*k), ps)
	ADDQ(U8(16*k), pd)
	SUBQ(U8(4*k), n)
	JMP(LabelRef("erf_loop"))
	Label("erf_done")
	VZEROUPPER()
	RET()
}

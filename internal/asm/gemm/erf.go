package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// erfP and erfQ are the coefficients of pkg/kernels' Erf32 as float32,
// highest degree first: erf(v) = v·(P(v²)/Q(v²)) on v clamped to [−4, 4].
var (
	erfP = []float32{-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02}
	erfQ = []float32{-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02}
)

// erfConstsMem is the erfconsts data once erfConstsData wrote it.
var erfConstsMem *Mem

// erfConstsData returns the data block of erfP then erfQ, each constant
// repeated over 64 bytes so that it is a memory operand of a YMM or ZMM
// instruction.
func erfConstsData() Mem {
	if erfConstsMem == nil {
		consts := GLOBL("erfconsts", RODATA|NOPTR)
		for i, c := range append(append([]float32{}, erfP...), erfQ...) {
			for l := 0; l < 16; l++ {
				DATA(64*i+4*l, U32(math.Float32bits(c)))
			}
		}
		erfConstsMem = &consts
	}
	return *erfConstsMem
}

// erf generates erfRowAVX2 and erfRowAVX512: for j < n (a multiple of
// two vectors, 16 or 32 floats),
//
//	dst[j] = Erf32(src[j])
//
// in float32 lanes with the same operations in the same order as the Go
// formula (Horner steps rounded after the product and after the add, no
// FMA, the quotient before the product by v), so each result is
// bit-identical to it; the clamp keeps NaN (VMINPS/VMAXPS return their
// second source, the value, when it is NaN).
func erf() {
	erfRows("AVX2", 8, YMM)
	erfRows("AVX512", 16, ZMM)
}

func erfRows(set string, lanes int, vec func() VecVirtual) {
	name := "erfRow" + set
	TEXT(name, NOSPLIT, "func(dst, src *float32, n int)")
	const k = 2 // vectors per iteration
	Doc(fmt.Sprintf("%s computes dst[j] = Erf32(src[j]) for j < n (n a multiple of %d).", name, k*lanes))
	consts := erfConstsData()
	cp := func(i int) Mem { return consts.Offset(64 * i) }
	cq := func(i int) Mem { return consts.Offset(64 * (len(erfP) + i)) }
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	hi, lo := vec(), vec()
	t := GP32()
	MOVL(U32(math.Float32bits(4)), t)
	VMOVD(t, hi.AsX())
	VBROADCASTSS(hi.AsX(), hi)
	MOVL(U32(math.Float32bits(-4)), t)
	VMOVD(t, lo.AsX())
	VBROADCASTSS(lo.AsX(), lo)
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	v, x2, p, q := make([]VecVirtual, k), make([]VecVirtual, k), make([]VecVirtual, k), make([]VecVirtual, k)
	for i := 0; i < k; i++ {
		v[i], x2[i], p[i], q[i] = vec(), vec(), vec(), vec()
		VMOVUPS(Mem{Base: ps, Disp: 4 * lanes * i}, v[i])
		VMINPS(v[i], hi, v[i]) // min(4, v)
		VMAXPS(v[i], lo, v[i]) // max(-4, ·)
		VMULPS(v[i], v[i], x2[i])
		VMULPS(cp(0), x2[i], p[i])
		VADDPS(cp(1), p[i], p[i])
		VMULPS(cq(0), x2[i], q[i])
		VADDPS(cq(1), q[i], q[i])
	}
	for j := 2; j < len(erfP); j++ {
		for i := 0; i < k; i++ {
			VMULPS(x2[i], p[i], p[i])
			VADDPS(cp(j), p[i], p[i])
			if j < len(erfQ) {
				VMULPS(x2[i], q[i], q[i])
				VADDPS(cq(j), q[i], q[i])
			}
		}
	}
	for i := 0; i < k; i++ {
		VDIVPS(q[i], p[i], p[i]) // p / q
		VMULPS(p[i], v[i], v[i])
		VMOVUPS(v[i], Mem{Base: pd, Disp: 4 * lanes * i})
	}
	ADDQ(U32(4*lanes*k), ps)
	ADDQ(U32(4*lanes*k), pd)
	SUBQ(U32(lanes*k), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

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

// expSub512 generates expSubRowAVX512(dst, src, n, m) float64: expSubRowAVX2
// on 16 lanes (n a multiple of 16), each e^x by the same operations in
// the same order (VRNDSCALEPS rounds to nearest even as VROUNDPS does;
// the lanes under the normal range are zeroed by a blend on the compare's
// mask), so every element is bit-identical to it. The sum adds the four
// quarters of each vector to the two float64 accumulators in the order the
// AVX2 kernel adds its two halves of each pair of vectors, so a row whose
// length is a multiple of 16 sums to the same float64 as there.
func expSub512() {
	TEXT("expSubRowAVX512", NOSPLIT, "func(dst, src *float32, n int, m float32) float64")
	Doc("expSubRowAVX512 sets dst[i] = exp(src[i]−m) for i < n (a multiple of 16) and returns their sum in float64.")
	consts := expConstsData()
	load := func(i int) VecVirtual {
		v := ZMM()
		VBROADCASTSS(consts.Offset(32*i), v)
		return v
	}
	log2e, c1, c2 := load(0), load(1), load(2)
	var poly []VecVirtual // r^7 … r^2 coefficients
	for i := 3; i <= 8; i++ {
		poly = append(poly, load(i))
	}
	one, lo, hi := load(9), load(10), load(11)
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	mx := XMM()
	Load(Param("m"), mx)
	m := ZMM()
	VBROADCASTSS(mx, m)
	bias := ZMM()
	b := GP32()
	MOVL(U32(127), b)
	VMOVD(b, bias.AsX())
	VPBROADCASTD(bias.AsX(), bias)
	zero := ZMM()
	VXORPS(zero, zero, zero)
	acc := [2]VecVirtual{YMM(), YMM()}
	VXORPD(acc[0], acc[0], acc[0])
	VXORPD(acc[1], acc[1], acc[1])

	Label("exp512_loop")
	TESTQ(n, n)
	JZ(LabelRef("exp512_done"))
	x := ZMM()
	VMOVUPS(Mem{Base: ps}, x)
	VSUBPS(m, x, x)
	// e^x as expRegs.exp computes it.
	VMINPS(x, hi, x)
	under := K()
	VCMPPS(U8(1), lo, x, under) // x < lo, false for NaN
	k := ZMM()
	VMULPS(log2e, x, k)
	VRNDSCALEPS(U8(0), k, k) // nearest even
	t := ZMM()
	VMULPS(c1, k, t)
	VSUBPS(t, x, x)
	VMULPS(c2, k, t)
	VSUBPS(t, x, x) // r
	p := ZMM()
	VMOVAPS(poly[0], p)
	for _, c := range poly[1:] {
		VMULPS(x, p, p)
		VADDPS(c, p, p)
	}
	z := ZMM()
	VMULPS(x, x, z)
	VMULPS(z, p, p)
	VADDPS(x, p, p)
	VADDPS(one, p, p)
	e := ZMM()
	VCVTPS2DQ(k, e)
	VPADDD(bias, e, e)
	VPSLLD(U8(23), e, e)
	VMULPS(e, p, p)
	VBLENDMPS(zero, p, under, p) // +0 where x < lo
	VMOVUPS(p, Mem{Base: pd})
	for q := 0; q < 4; q++ {
		d := YMM()
		if q == 0 {
			VCVTPS2PD(p.AsX(), d)
		} else {
			h := XMM()
			VEXTRACTF32X4(U8(q), p, h)
			VCVTPS2PD(h, d)
		}
		VADDPD(d, acc[q%2], acc[q%2])
	}
	ADDQ(U32(64), ps)
	ADDQ(U32(64), pd)
	SUBQ(U32(16), n)
	JMP(LabelRef("exp512_loop"))

	Label("exp512_done")
	returnSum(acc)
}

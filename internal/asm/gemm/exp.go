package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// expConsts are the constants of expSubRowAVX2: the range reduction
// x = k·ln2 + r with ln2 split in two (expC1 exact in a few bits, so k·expC1
// is exact for |k| ≤ 2^15), and e^r = 1 + r + r²·P(r) on |r| ≤ ln2/2 with
// the degree-5 minimax P of Cephes' expf (relative error of the whole a
// few float32 ulp, tested against math.Exp in pkg/kernels).
var expConsts = []float32{
	1.44269504088896341, // log2(e)
	0.693359375,         // expC1
	-2.12194440e-4,      // expC2
	1.9875691500e-4,     // r^7 … r^2 coefficients of e^r = 1 + r + r²·P(r)
	1.3981999507e-3,
	8.3334519073e-3,
	4.1665795894e-2,
	1.6666665459e-1,
	5.0000001201e-1,
	1,
	-87.33654,  // below this e^x is under the smallest normal float32: 0
	88.3762626, // above this e^x overflows: clamp (Softmax never gets there)
}

// expConstsMem is the expconsts data once expConstsData wrote it.
var expConstsMem *Mem

// expConstsData returns the data block of expConsts, written on the first
// call: each constant fills a whole vector, so that it can be a memory
// operand of the arithmetic.
func expConstsData() Mem {
	if expConstsMem == nil {
		consts := GLOBL("expconsts", RODATA|NOPTR)
		for i, c := range expConsts {
			for l := 0; l < 8; l++ {
				DATA(32*i+4*l, U32(math.Float32bits(c)))
			}
		}
		expConstsMem = &consts
	}
	return *expConstsMem
}

// expSub generates expSubRowAVX2(dst, src, n, m) float64: dst[i] =
// e^(src[i]−m) for i < n (a multiple of 8) in float32, returning the sum
// of dst in float64 (two accumulators of 4 lanes, added lane by lane at
// the end: the same order for the same n, whatever else runs). NaN stays
// NaN; −Inf and anything below the normal range give +0.
func expSub() {
	TEXT("expSubRowAVX2", NOSPLIT, "func(dst, src *float32, n int, m float32) float64")
	Doc("expSubRowAVX2 sets dst[i] = exp(src[i]−m) for i < n (a multiple of 8) and returns their sum in float64.")
	r := loadExpRegs()
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	mx := XMM()
	Load(Param("m"), mx)
	m := YMM()
	VBROADCASTSS(mx, m)
	bias := YMM()
	b := GP32()
	MOVL(U32(127), b)
	VMOVD(b, bias.AsX())
	VPBROADCASTD(bias.AsX(), bias)
	acc := [2]VecVirtual{YMM(), YMM()}
	VXORPD(acc[0], acc[0], acc[0])
	VXORPD(acc[1], acc[1], acc[1])

	Label("exp_loop")
	TESTQ(n, n)
	JZ(LabelRef("exp_done"))
	x := YMM()
	VMOVUPS(Mem{Base: ps}, x)
	VSUBPS(m, x, x)
	p := r.exp(x, bias)
	VMOVUPS(p, Mem{Base: pd})
	d := YMM()
	VCVTPS2PD(p.AsX(), d)
	VADDPD(d, acc[0], acc[0])
	h := XMM()
	VEXTRACTF128(U8(1), p, h)
	VCVTPS2PD(h, d)
	VADDPD(d, acc[1], acc[1])
	ADDQ(U8(32), ps)
	ADDQ(U8(32), pd)
	SUBQ(U8(8), n)
	JMP(LabelRef("exp_loop"))

	Label("exp_done")
	returnSum(acc)
}

// expRegs holds what an e^x evaluation reads in registers: the expConsts
// data block, the reduction constants and the clamp bounds.
type expRegs struct {
	consts                     Mem
	log2e, c1, c2, one, lo, hi VecVirtual
}

// loadExpRegs loads the constants expRegs.exp reads on every vector.
func loadExpRegs() *expRegs {
	r := &expRegs{consts: expConstsData()}
	r.log2e, r.c1, r.c2 = r.load(0), r.load(1), r.load(2)
	r.one, r.lo, r.hi = r.load(9), r.load(10), r.load(11)
	return r
}

// load loads constant i of expConsts into a new register.
func (r *expRegs) load(i int) VecVirtual {
	v := YMM()
	VMOVUPS(r.consts.Offset(32*i), v)
	return v
}

// exp returns e^x lane by lane (x is overwritten), bias holding 127 in
// each lane: x clamped above at hi (NaN stays NaN: VMINPS returns its
// second source, the value, when it is NaN), x = k·ln2 + r, e^r = 1 + r +
// r²·P(r), times 2^k built in the exponent bits, and +0 where x < lo.
// pkg/kernels' Go loops run the same operations in the same order, no FMA.
func (r *expRegs) exp(x, bias VecVirtual) VecVirtual {
	VMINPS(x, r.hi, x)
	under := YMM()
	VCMPPS(U8(1), r.lo, x, under) // x < lo, false for NaN
	k := YMM()
	VMULPS(r.log2e, x, k)
	VROUNDPS(U8(0), k, k) // nearest even
	t := YMM()
	VMULPS(r.c1, k, t)
	VSUBPS(t, x, x)
	VMULPS(r.c2, k, t)
	VSUBPS(t, x, x) // r
	p := r.load(3)
	for i := 4; i <= 8; i++ {
		VMULPS(x, p, p)
		VADDPS(r.consts.Offset(32*i), p, p)
	}
	z := YMM()
	VMULPS(x, x, z)
	VMULPS(z, p, p)
	VADDPS(x, p, p)
	VADDPS(r.one, p, p)
	e := YMM()
	VCVTPS2DQ(k, e)
	VPADDD(bias, e, e)
	VPSLLD(U8(23), e, e)
	VMULPS(e, p, p)
	VANDNPS(p, under, p)
	return p
}

// returnSum returns the sum of the 8 float64 lanes of acc, lane by lane
// (acc[0] + acc[1], then the halves, then the pair), and returns.
func returnSum(acc [2]VecVirtual) {
	VADDPD(acc[1], acc[0], acc[0])
	hx := XMM()
	VEXTRACTF128(U8(1), acc[0], hx)
	VADDPD(hx, acc[0].AsX(), hx)
	s := XMM()
	VPERMILPD(U8(1), hx, s)
	VADDSD(s, hx, hx)
	VZEROUPPER() // before the legacy-SSE store of the result
	Store(hx, ReturnIndex(0))
	RET()
}

// expBiasAndSign broadcasts the float32 exponent bias (127), which the
// e^x emission adds to build 2^n, and the sign bit, which the row kernels
// strip or flip.
func expBiasAndSign() (bias, sign VecVirtual) {
	t32 := GP32()
	bias, sign = YMM(), YMM()
	MOVL(U32(127), t32)
	VMOVD(t32, bias.AsX())
	VPBROADCASTD(bias.AsX(), bias)
	MOVL(U32(0x80000000), t32)
	VMOVD(t32, sign.AsX())
	VPBROADCASTD(sign.AsX(), sign)
	return bias, sign
}

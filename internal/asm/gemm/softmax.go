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

// exp512 holds in ZMM registers what e^x on 16 lanes reads: the expConsts
// and the exponent bias.
type exp512 struct {
	log2e, c1, c2, one, lo, hi, bias, zero VecVirtual
	poly                                   []VecVirtual // r^7 … r^2 coefficients
}

func loadExp512() *exp512 {
	consts := expConstsData()
	load := func(i int) VecVirtual {
		v := ZMM()
		VBROADCASTSS(consts.Offset(32*i), v)
		return v
	}
	r := &exp512{log2e: load(0), c1: load(1), c2: load(2)}
	for i := 3; i <= 8; i++ {
		r.poly = append(r.poly, load(i))
	}
	r.one, r.lo, r.hi = load(9), load(10), load(11)
	r.bias = ZMM()
	b := GP32()
	MOVL(U32(127), b)
	VMOVD(b, r.bias.AsX())
	VPBROADCASTD(r.bias.AsX(), r.bias)
	r.zero = ZMM()
	VXORPS(r.zero, r.zero, r.zero)
	return r
}

// exp returns e^x (x is overwritten) as expRegs.exp computes it on 8
// lanes: the same operations in the same order (VRNDSCALEPS rounds to
// nearest even as VROUNDPS does; the lanes under the normal range are
// zeroed by a blend on the compare's mask), so each lane gets the same
// bits.
func (r *exp512) exp(x VecVirtual) VecVirtual {
	VMINPS(x, r.hi, x)
	under := K()
	VCMPPS(U8(1), r.lo, x, under) // x < lo, false for NaN
	k := ZMM()
	VMULPS(r.log2e, x, k)
	VRNDSCALEPS(U8(0), k, k) // nearest even
	t := ZMM()
	VMULPS(r.c1, k, t)
	VSUBPS(t, x, x)
	VMULPS(r.c2, k, t)
	VSUBPS(t, x, x) // r
	p := ZMM()
	VMOVAPS(r.poly[0], p)
	for _, c := range r.poly[1:] {
		VMULPS(x, p, p)
		VADDPS(c, p, p)
	}
	z := ZMM()
	VMULPS(x, x, z)
	VMULPS(z, p, p)
	VADDPS(x, p, p)
	VADDPS(r.one, p, p)
	e := ZMM()
	VCVTPS2DQ(k, e)
	VPADDD(r.bias, e, e)
	VPSLLD(U8(23), e, e)
	VMULPS(e, p, p)
	VBLENDMPS(r.zero, p, under, p) // +0 where x < lo
	return p
}

// expSumLoop emits the loop that sets dst[i] = e^(src[i]−m) for i < n (a
// multiple of 16; the registers advance and n counts down to 0) and adds
// them to acc: the four quarters of each vector to the two float64
// accumulators, in the order the AVX2 kernel adds its two halves of each
// pair of vectors, so a row whose length is a multiple of 16 sums to the
// same float64 as there.
func (r *exp512) expSumLoop(name string, pd, ps, n Register, m VecVirtual, acc [2]VecVirtual) {
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	x := ZMM()
	VMOVUPS(Mem{Base: ps}, x)
	VSUBPS(m, x, x)
	p := r.exp(x)
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
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
}

// expSub512 generates expSubRowAVX512(dst, src, n, m) float64: expSubRowAVX2
// on 16 lanes (n a multiple of 16), each e^x bit-identical to it and, for
// a row whose length is a multiple of 16, the same float64 sum.
func expSub512() {
	TEXT("expSubRowAVX512", NOSPLIT, "func(dst, src *float32, n int, m float32) float64")
	Doc("expSubRowAVX512 sets dst[i] = exp(src[i]−m) for i < n (a multiple of 16) and returns their sum in float64.")
	r := loadExp512()
	pd := Load(Param("dst"), GP64())
	ps := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	mx := XMM()
	Load(Param("m"), mx)
	m := ZMM()
	VBROADCASTSS(mx, m)
	acc := [2]VecVirtual{YMM(), YMM()}
	VXORPD(acc[0], acc[0], acc[0])
	VXORPD(acc[1], acc[1], acc[1])
	r.expSumLoop("exp512", pd, ps, n, m, acc)
	returnSum(acc)
}

// softmax512 generates softmaxRowsAVX512(x, y, rows, n): Softmax on rows
// of n floats (a multiple of 16) in one call, each row as kernels.Softmax
// computes it on AVX-512 (rowMaxAVX512, expSubRowAVX512, then the product
// by float32(1/sum)), so the results are the same bits without three
// calls a row.
func softmax512() {
	TEXT("softmaxRowsAVX512", NOSPLIT, "func(x, y *float32, rows, n int)")
	Doc("softmaxRowsAVX512 computes the softmax of each of rows rows of n floats (n a multiple of 16) of x into y.")
	r := loadExp512()
	px := Load(Param("x"), GP64())
	py := Load(Param("y"), GP64())
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	ninf := ZMM()
	t := GP32()
	MOVL(U32(math.Float32bits(float32(math.Inf(-1)))), t)
	VMOVD(t, ninf.AsX())
	VBROADCASTSS(ninf.AsX(), ninf)
	Label("smx_row")
	TESTQ(rows, rows)
	JZ(LabelRef("smx_done"))
	// The row's maximum, as rowMaxAVX512.
	acc := ZMM()
	VMOVAPS(ninf, acc)
	p, c := GP64(), GP64()
	MOVQ(px, p)
	MOVQ(n, c)
	Label("smx_max")
	TESTQ(c, c)
	JZ(LabelRef("smx_max_done"))
	v := ZMM()
	VMOVUPS(Mem{Base: p}, v)
	VMAXPS(acc, v, acc) // v > acc ? v : acc
	ADDQ(U32(64), p)
	SUBQ(U32(16), c)
	JMP(LabelRef("smx_max"))
	Label("smx_max_done")
	h := YMM()
	VEXTRACTF32X8(U8(1), acc, h)
	VMAXPS(h, acc.AsY(), h)
	mx := XMM()
	VEXTRACTF32X4(U8(1), h, mx) // EVEX: the allocator may pick Y16 and up
	VMAXPS(mx, h.AsX(), mx)
	s := XMM()
	VPERMILPS(U8(0x4e), mx, s)
	VMAXPS(s, mx, mx)
	VPERMILPS(U8(0xb1), mx, s)
	VMAXPS(s, mx, mx)
	m := ZMM()
	VBROADCASTSS(mx, m)
	// e^(x−m) into y and their sum, as expSubRowAVX512.
	sum := [2]VecVirtual{YMM(), YMM()}
	VXORPD(sum[0], sum[0], sum[0])
	VXORPD(sum[1], sum[1], sum[1])
	pd := GP64()
	MOVQ(py, pd)
	MOVQ(px, p)
	MOVQ(n, c)
	r.expSumLoop("smx_exp", pd, p, c, m, sum)
	// The sum folded as returnSum folds it, then float32(1/sum).
	VADDPD(sum[1], sum[0], sum[0])
	hx := XMM()
	VEXTRACTF32X4(U8(1), sum[0], hx)
	VADDPD(hx, sum[0].AsX(), hx)
	sd := XMM()
	VPERMILPD(U8(1), hx, sd)
	VADDSD(sd, hx, hx)
	one := XMM()
	MOVQ(U64(math.Float64bits(1)), c)
	VMOVQ(c, one)
	VDIVSD(hx, one, one) // 1/sum
	VCVTSD2SS(one, one, one)
	inv := ZMM()
	VBROADCASTSS(one, inv)
	// y ·= float32(1/sum), as BinaryScalar's product.
	MOVQ(py, pd)
	MOVQ(n, c)
	Label("smx_scale")
	TESTQ(c, c)
	JZ(LabelRef("smx_scale_done"))
	w := ZMM()
	VMULPS(Mem{Base: pd}, inv, w)
	VMOVUPS(w, Mem{Base: pd})
	ADDQ(U32(64), pd)
	SUBQ(U32(16), c)
	JMP(LabelRef("smx_scale"))
	Label("smx_scale_done")
	MOVQ(n, c)
	SHLQ(U8(2), c)
	ADDQ(c, px)
	ADDQ(c, py)
	DECQ(rows)
	JMP(LabelRef("smx_row"))
	Label("smx_done")
	VZEROUPPER()
	RET()
}

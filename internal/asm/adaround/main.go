// Command adaround generates the AVX2 kernel of pkg/kernels that does one
// Adam step of AdaRound's rounding variables (adaround_amd64.s and
// adaround_stubs_amd64.go) with avo.
//
// Eight weights at a time, the operations of kernels.adaRoundUpdateGo in
// its order and roundings (no fused multiply-add), so that the vector and
// the scalar loop agree bit for bit: the soft fraction, the masks of the
// weights inside the rectified sigmoid's open range and inside the grid,
// the rounding term's power as Pow32 computes it (the exponent from the
// bits, the two polynomials, the floor by VROUNDPS), and Adam's update,
// blended into the weights whose fraction is inside (0, 1). A vector with
// no such weight is skipped whole; the warm-up, without the rounding
// term, has a loop of its own.
package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("!noasm,amd64")
	update()
	delta()
	Generate()
}

// Comparison predicates of VCMPPS.
const (
	cmpLT  = 0x01 // less than, ordered
	cmpNEQ = 0x04 // not equal, unordered
	cmpGE  = 0x0d // greater or equal, ordered
	cmpGT  = 0x0e // greater than, ordered
)

var consts = map[string]Mem{}

// f32 is a register holding x in every lane.
func f32(name string, x float32) reg.VecVirtual {
	m, ok := consts[name]
	if !ok {
		m = ConstData(name, U32(math.Float32bits(x)))
		consts[name] = m
	}
	r := YMM()
	VBROADCASTSS(m, r)
	return r
}

// u32 is a register holding x in every lane.
func u32(name string, x uint32) reg.VecVirtual {
	m, ok := consts[name]
	if !ok {
		m = ConstData(name, U32(x))
		consts[name] = m
	}
	r := YMM()
	VPBROADCASTD(m, r)
	return r
}

// mulAdd sets acc = c + t·acc, the step of a Horner evaluation.
func mulAdd(acc, t reg.VecVirtual, name string, c float32) {
	VMULPS(t, acc, acc)
	VADDPS(f32(name, c), acc, acc)
}

// pow32 returns Pow32(x, e) in every lane (x in (0, 1]).
func pow32(x, e reg.VecVirtual) reg.VecVirtual {
	ex := YMM()
	VPSRLD(U8(23), x, ex)
	VPAND(u32("expMask", 0xff), ex, ex)
	VPSUBD(u32("bias", 127), ex, ex)
	VCVTDQ2PS(ex, ex)
	t := YMM()
	VPAND(u32("mantMask", 0x007fffff), x, t)
	VPOR(u32("oneBits", 0x3f800000), t, t)
	VSUBPS(f32("one", 1), t, t)
	// log2(1 + t): t·(c1 + t·(c2 + … + t·c6)).
	l := YMM()
	VMULPS(f32("l6", -0.024568535), t, l)
	VADDPS(f32("l5", 0.117613084), l, l)
	mulAdd(l, t, "l4", -0.272697565)
	mulAdd(l, t, "l3", 0.454508492)
	mulAdd(l, t, "l2", -0.71731278)
	mulAdd(l, t, "l1", 1.442453526)
	VMULPS(t, l, l)
	VADDPS(f32("l0", 2.443e-06), ex, ex)
	VADDPS(l, ex, l)
	y := YMM()
	VMULPS(l, e, y)
	ok := YMM()
	VCMPPS(U8(cmpGE), f32("minExp", -126), y, ok)
	yi := YMM()
	VROUNDPS(U8(1), y, yi)
	f := YMM()
	VSUBPS(yi, y, f)
	q := YMM()
	VMULPS(f32("e5", 0.001893754), f, q)
	VADDPS(f32("e4", 0.00894959), q, q)
	mulAdd(q, f, "e3", 0.055860337)
	mulAdd(q, f, "e2", 0.240141818)
	mulAdd(q, f, "e1", 0.69315449)
	VMULPS(f, q, q)
	VADDPS(f32("e0", 0.999999898), q, q)
	VCVTTPS2DQ(yi, yi)
	VPADDD(u32("bias", 127), yi, yi)
	VPSLLD(U8(23), yi, yi)
	VMULPS(yi, q, q)
	VANDPS(ok, q, q)
	return q
}

func update() {
	TEXT("adaRoundUpdateAVX2", NOSPLIT, "func(v, mom, vel, sig, da, g, gs, low, high []float32, stretch, shift, regStep, exponent, step, invC2 float32, reg int32)")
	Doc("adaRoundUpdateAVX2 is adaRoundUpdateGo for the first len(v) &^ 7 elements;",
		"the other slices are at least as long; reg 0 leaves the rounding term out.")
	names := []string{"v", "mom", "vel", "sig", "da", "g", "gs", "low", "high"}
	base := map[string]reg.Register{}
	for _, n := range names {
		base[n] = Load(Param(n).Base(), GP64())
	}
	n := Load(Param("v").Len(), GP64())
	SHRQ(U8(3), n)
	SHLQ(U8(5), n) // bytes of the whole vectors
	regOn := Load(Param("reg"), GP32())
	i := GP64()
	XORQ(i, i)
	at := func(name string) Mem { return Mem{Base: base[name], Index: i, Scale: 1} }
	for _, withReg := range []bool{false, true} {
		loop, next, done := "plain", "plainNext", "plainDone"
		if withReg {
			loop, next, done = "reg", "regNext", "regDone"
			Label("withReg")
		} else {
			TESTL(regOn, regOn)
			JNZ(LabelRef("withReg"))
		}
		Label(loop)
		CMPQ(i, n)
		JAE(LabelRef(done))
		sg := YMM()
		VMOVUPS(at("sig"), sg)
		h := YMM()
		VBROADCASTSS(NewParamAddr("stretch", 216), h)
		VMULPS(h, sg, h)
		shift := YMM()
		VBROADCASTSS(NewParamAddr("shift", 220), shift)
		VADDPS(shift, h, h)
		zero, active, below := YMM(), YMM(), YMM()
		VXORPS(zero, zero, zero)
		VCMPPS(U8(cmpLT), h, zero, active)
		VCMPPS(U8(cmpLT), f32("one", 1), h, below)
		VANDPS(below, active, active)
		mask := GP32()
		VMOVMSKPS(active, mask)
		TESTL(mask, mask)
		JZ(LabelRef(next))
		grad := YMM()
		VMOVUPS(at("da"), grad)
		VADDPS(at("g"), grad, grad)
		VMULPS(at("gs"), grad, grad)
		in, inHigh := YMM(), YMM()
		VCMPPS(U8(cmpGT), at("low"), h, in) // h > low
		VMOVUPS(at("high"), inHigh)
		VCMPPS(U8(cmpLT), inHigh, h, inHigh) // h < high
		VANDPS(inHigh, in, in)
		VANDPS(in, grad, grad)
		if withReg {
			u := YMM()
			VADDPS(h, h, u)
			VSUBPS(f32("one", 1), u, u)
			ax := YMM()
			VANDPS(u32("absMask", 0x7fffffff), u, ax)
			e := YMM()
			VBROADCASTSS(NewParamAddr("exponent", 228), e)
			r := pow32(ax, e)
			rs := YMM()
			VBROADCASTSS(NewParamAddr("regStep", 224), rs)
			VMULPS(r, rs, r)
			sign := YMM()
			VANDPS(u32("signMask", 0x80000000), u, sign)
			VXORPS(sign, r, r)
			nz := YMM()
			VCMPPS(U8(cmpNEQ), zero, u, nz)
			VANDPS(nz, r, r)
			VSUBPS(r, grad, grad)
		}
		// grad·(σ·(1 − σ)·stretch)
		d := YMM()
		VMOVUPS(f32("one", 1), d)
		VSUBPS(sg, d, d)
		VMULPS(d, sg, d)
		st := YMM()
		VBROADCASTSS(NewParamAddr("stretch", 216), st)
		VMULPS(st, d, d)
		VMULPS(d, grad, grad)
		// m = b1·mom + (1 − b1)·grad
		mom, m, t := YMM(), YMM(), YMM()
		VMOVUPS(at("mom"), mom)
		VMULPS(f32("b1", 0.9), mom, m)
		VMULPS(f32("c1", 1-0.9), grad, t)
		VADDPS(t, m, m)
		VBLENDVPS(active, m, mom, mom)
		VMOVUPS(mom, at("mom"))
		// vv = b2·vel + (1 − b2)·grad·grad
		vel, vv := YMM(), YMM()
		VMOVUPS(at("vel"), vel)
		VMULPS(f32("b2", 0.999), vel, vv)
		VMULPS(f32("c2", 1-0.999), grad, t)
		VMULPS(grad, t, t)
		VADDPS(t, vv, vv)
		VBLENDVPS(active, vv, vel, vel)
		VMOVUPS(vel, at("vel"))
		// v −= step·m / (√(vv·invC2) + eps)
		den := YMM()
		VBROADCASTSS(NewParamAddr("invC2", 236), den)
		VMULPS(den, vv, den)
		VSQRTPS(den, den)
		VADDPS(f32("eps", 1e-8), den, den)
		num := YMM()
		VBROADCASTSS(NewParamAddr("step", 232), num)
		VMULPS(m, num, num)
		VDIVPS(den, num, num)
		v := YMM()
		VMOVUPS(at("v"), v)
		VSUBPS(num, v, num)
		VBLENDVPS(active, num, v, v)
		VMOVUPS(v, at("v"))
		Label(next)
		ADDQ(U8(32), i)
		JMP(LabelRef(loop))
		Label(done)
		if !withReg {
			VZEROUPPER()
			RET()
		}
	}
	VZEROUPPER()
	RET()
}

func delta() {
	TEXT("adaRoundDeltaAVX2", NOSPLIT, "func(d, sig, floor, lo, hi, scale, w []float32, stretch, shift float32)")
	Doc("adaRoundDeltaAVX2 is adaRoundDeltaGo for the first len(d) &^ 7 elements;",
		"the other slices are at least as long.")
	base := map[string]reg.Register{}
	for _, n := range []string{"d", "sig", "floor", "lo", "hi", "scale", "w"} {
		base[n] = Load(Param(n).Base(), GP64())
	}
	n := Load(Param("d").Len(), GP64())
	SHRQ(U8(3), n)
	SHLQ(U8(5), n)
	i := GP64()
	XORQ(i, i)
	at := func(name string) Mem { return Mem{Base: base[name], Index: i, Scale: 1} }
	st, sh, zero, one := YMM(), YMM(), YMM(), YMM()
	VBROADCASTSS(NewParamAddr("stretch", 168), st)
	VBROADCASTSS(NewParamAddr("shift", 172), sh)
	VXORPS(zero, zero, zero)
	VMOVUPS(f32("one", 1), one)
	Label("loop")
	CMPQ(i, n)
	JAE(LabelRef("done"))
	h := YMM()
	VMULPS(at("sig"), st, h)
	VADDPS(sh, h, h)
	VMAXPS(zero, h, h)
	VMINPS(one, h, h)
	VADDPS(at("floor"), h, h)
	VMAXPS(at("lo"), h, h)
	VMINPS(at("hi"), h, h)
	VMULPS(at("scale"), h, h)
	VSUBPS(at("w"), h, h)
	VMOVUPS(h, at("d"))
	ADDQ(U8(32), i)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

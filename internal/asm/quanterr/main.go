// Command quanterr generates the AVX2 kernel of pkg/kernels that scores
// candidate quantization grids of one group of weights
// (quanterr_amd64.s and quanterr_stubs_amd64.go) with avo.
//
// For each candidate k it computes Σ (x − clamp(round(x·inv[k]), lo[k],
// hi[k])·scale[k])² over the whole vectors of x: the multiply, the clamp
// (VMAXPS, VMINPS), the rounding half to even (VROUNDPS mode 0), the
// product with the scale and the difference are each rounded to float32 as
// QuantizeLinear and DequantizeLinear round them; the squares accumulate
// in eight float32 lanes, summed at the end.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

func main() {
	ConstraintExpr("!noasm,amd64")
	sqErrs()
	Generate()
}

func sqErrs() {
	TEXT("quantSqErrsAVX2", NOSPLIT, "func(x, inv, scale, lo, hi, out []float32)")
	Doc("quantSqErrsAVX2 is QuantSqErrs over the first len(x) &^ 7 elements of x",
		"for every candidate k < len(out); inv, scale, lo and hi are at least as",
		"long as out.")
	px := Load(Param("x").Base(), GP64())
	nx := Load(Param("x").Len(), GP64())
	pinv := Load(Param("inv").Base(), GP64())
	psc := Load(Param("scale").Base(), GP64())
	plo := Load(Param("lo").Base(), GP64())
	phi := Load(Param("hi").Base(), GP64())
	pout := Load(Param("out").Base(), GP64())
	k := Load(Param("out").Len(), GP64())
	SHRQ(U8(3), nx)

	vinv, vsc, vlo, vhi := YMM(), YMM(), YMM(), YMM()
	acc0, acc1 := YMM(), YMM()
	v, t, u, w := YMM(), YMM(), YMM(), YMM()
	p, n := GP64(), GP64()

	Label("cand")
	TESTQ(k, k)
	JZ(LabelRef("done"))
	VBROADCASTSS(Mem{Base: pinv}, vinv)
	VBROADCASTSS(Mem{Base: psc}, vsc)
	VBROADCASTSS(Mem{Base: plo}, vlo)
	VBROADCASTSS(Mem{Base: phi}, vhi)
	VXORPS(acc0, acc0, acc0)
	VXORPS(acc1, acc1, acc1)
	MOVQ(px, p)
	MOVQ(nx, n)

	// Two vectors per step into two accumulators, then one if odd.
	Label("pair")
	CMPQ(n, U8(2))
	JL(LabelRef("single"))
	VMOVUPS(Mem{Base: p}, v)
	VMOVUPS(Mem{Base: p, Disp: 32}, u)
	VMULPS(vinv, v, t)
	VMULPS(vinv, u, w)
	VMAXPS(vlo, t, t)
	VMAXPS(vlo, w, w)
	VMINPS(vhi, t, t)
	VMINPS(vhi, w, w)
	VROUNDPS(U8(0), t, t)
	VROUNDPS(U8(0), w, w)
	VMULPS(vsc, t, t)
	VMULPS(vsc, w, w)
	VSUBPS(t, v, t)
	VSUBPS(w, u, w)
	VFMADD231PS(t, t, acc0)
	VFMADD231PS(w, w, acc1)
	ADDQ(U8(64), p)
	SUBQ(U8(2), n)
	JMP(LabelRef("pair"))

	Label("single")
	TESTQ(n, n)
	JZ(LabelRef("sum"))
	VMOVUPS(Mem{Base: p}, v)
	VMULPS(vinv, v, t)
	VMAXPS(vlo, t, t)
	VMINPS(vhi, t, t)
	VROUNDPS(U8(0), t, t)
	VMULPS(vsc, t, t)
	VSUBPS(t, v, t)
	VFMADD231PS(t, t, acc0)

	Label("sum")
	VADDPS(acc1, acc0, acc0)
	x := XMM()
	VEXTRACTF128(U8(1), acc0, x)
	VADDPS(x, acc0.AsX(), x)
	y := XMM()
	VMOVHLPS(x, x, y)
	VADDPS(y, x, x)
	VSHUFPS(U8(1), x, x, y)
	VADDSS(y, x, x)
	VMOVSS(x, Mem{Base: pout})

	ADDQ(U8(4), pinv)
	ADDQ(U8(4), psc)
	ADDQ(U8(4), plo)
	ADDQ(U8(4), phi)
	ADDQ(U8(4), pout)
	DECQ(k)
	JMP(LabelRef("cand"))

	Label("done")
	VZEROUPPER()
	RET()
}

// Command quantize generates the AVX2 kernels of pkg/kernels that write
// 8-bit QuantizeLinear codes, read them back for DequantizeLinear, and do
// both at once for a QuantizeLinear whose only reader is a
// DequantizeLinear (quantize_amd64.s and quantize_stubs_amd64.go) with
// avo.
//
// Quantizing, eight values at a time: the division by the scale
// (VDIVPS, rounded to float32 as ONNX's reference divides), the clamp to
// the codes' range minus the zero point (VMAXPS first, which returns its
// bound for NaN, as QuantizeLinear gives NaN the lowest code), the
// rounding half to even (VROUNDPS mode 0), the zero point added, the
// conversion to int32 (exact: the values are integers) and the packing to
// bytes. Dequantizing: the codes widened to int32, the zero point
// subtracted, the difference converted (exact) and multiplied by the
// scale, one float32 rounding as DequantizeLinear's.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("!noasm,amd64")
	quantize("quantizeU8AVX2", "[]uint8", true)
	quantize("quantizeI8AVX2", "[]int8", false)
	dequantize("dequantizeU8AVX2", "[]uint8", true)
	dequantize("dequantizeI8AVX2", "[]int8", false)
	roundTrip()
	quantizeCols("quantizeColsU8AVX2", "[]uint8", true)
	quantizeCols("quantizeColsI8AVX2", "[]int8", false)
	dequantizeCols("dequantizeColsU8AVX2", "[]uint8", true)
	dequantizeCols("dequantizeColsI8AVX2", "[]int8", false)
	Generate()
}

func quantize(name, codes string, unsigned bool) { quantizeKernel(name, codes, unsigned, false) }

// quantizeCols is quantize with a scale per element and no zero point: a
// row of a weight quantized along its last axis (a MatMul's output
// features), symmetric.
func quantizeCols(name, codes string, unsigned bool) { quantizeKernel(name, codes, unsigned, true) }

func quantizeKernel(name, codes string, unsigned, cols bool) {
	var ps reg.GPVirtual
	var vs, vlo, vhi, vzp reg.VecVirtual
	if cols {
		TEXT(name, NOSPLIT, "func(dst "+codes+", x, scales []float32, lo, hi float32)")
		Doc(name+" writes the codes of the first len(x) &^ 7 elements of x to dst",
			"(scales and dst at least as long): clamp(round(x/scales), lo, hi),",
			"rounding half to even, NaN to lo.")
	} else {
		TEXT(name, NOSPLIT, "func(dst "+codes+", x []float32, scale, lo, hi, zp float32)")
		Doc(name+" writes the codes of the first len(x) &^ 7 elements of x to dst",
			"(at least as long): clamp(round(x/scale), lo, hi) + zp, rounding half",
			"to even, NaN to lo + zp; lo and hi are the codes' range minus zp.")
	}
	pd := Load(Param("dst").Base(), GP64())
	px := Load(Param("x").Base(), GP64())
	if cols {
		ps = Load(Param("scales").Base(), GP64()).(reg.GPVirtual)
	}
	n := Load(Param("x").Len(), GP64())
	SHRQ(U8(3), n)
	if !cols {
		vs = YMM()
	}
	vlo, vhi = YMM(), YMM()
	if cols {
		VBROADCASTSS(NewParamAddr("lo", 72), vlo)
		VBROADCASTSS(NewParamAddr("hi", 76), vhi)
	} else {
		vzp = YMM()
		VBROADCASTSS(NewParamAddr("scale", 48), vs)
		VBROADCASTSS(NewParamAddr("lo", 52), vlo)
		VBROADCASTSS(NewParamAddr("hi", 56), vhi)
		VBROADCASTSS(NewParamAddr("zp", 60), vzp)
	}
	v := YMM()
	x1, x0 := XMM(), XMM()
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VMOVUPS(Mem{Base: px}, v)
	if cols {
		VDIVPS(Mem{Base: ps}, v, v)
	} else {
		VDIVPS(vs, v, v)
	}
	VMAXPS(vlo, v, v)
	VMINPS(vhi, v, v)
	VROUNDPS(U8(0), v, v)
	if !cols {
		VADDPS(vzp, v, v)
	}
	VCVTPS2DQ(v, v)
	VEXTRACTI128(U8(1), v, x1)
	VPACKSSDW(x1, v.AsX(), x0)
	if unsigned {
		VPACKUSWB(x0, x0, x0)
	} else {
		VPACKSSWB(x0, x0, x0)
	}
	VMOVQ(x0, Mem{Base: pd})
	ADDQ(U8(32), px)
	if cols {
		ADDQ(U8(32), ps)
	}
	ADDQ(U8(8), pd)
	DECQ(n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

func dequantize(name, codes string, unsigned bool) { dequantizeKernel(name, codes, unsigned, false) }

// dequantizeCols is dequantize with a scale per element and no zero
// point.
func dequantizeCols(name, codes string, unsigned bool) { dequantizeKernel(name, codes, unsigned, true) }

func dequantizeKernel(name, codes string, unsigned, cols bool) {
	if cols {
		TEXT(name, NOSPLIT, "func(y []float32, codes "+codes+", scales []float32)")
		Doc(name+" writes codes·scales for the first len(y) &^ 7 elements of y;",
			"codes and scales are at least as long.")
	} else {
		TEXT(name, NOSPLIT, "func(y []float32, codes "+codes+", scale float32, zp int32)")
		Doc(name+" writes (codes − zp)·scale for the first len(y) &^ 7 elements",
			"of y; codes is at least as long.")
	}
	py := Load(Param("y").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	pc := Load(Param("codes").Base(), GP64())
	var ps reg.GPVirtual
	var vs, vzp reg.VecVirtual
	if cols {
		ps = Load(Param("scales").Base(), GP64()).(reg.GPVirtual)
	}
	SHRQ(U8(3), n)
	if !cols {
		vs, vzp = YMM(), YMM()
		VBROADCASTSS(NewParamAddr("scale", 48), vs)
		z := Load(Param("zp"), GP32())
		xz := XMM()
		VMOVD(z, xz)
		VPBROADCASTD(xz, vzp)
	}
	var v reg.VecVirtual = YMM()
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	if unsigned {
		VPMOVZXBD(Mem{Base: pc}, v)
	} else {
		VPMOVSXBD(Mem{Base: pc}, v)
	}
	if !cols {
		VPSUBD(vzp, v, v)
	}
	VCVTDQ2PS(v, v)
	if cols {
		VMULPS(Mem{Base: ps}, v, v)
	} else {
		VMULPS(vs, v, v)
	}
	VMOVUPS(v, Mem{Base: py})
	ADDQ(U8(8), pc)
	if cols {
		ADDQ(U8(32), ps)
	}
	ADDQ(U8(32), py)
	DECQ(n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// roundTrip is a QuantizeLinear and its DequantizeLinear in one pass, for
// integer codes of any width up to 16 bits: the clamped, rounded quotient
// is the code minus the zero point, an integer (zero made +0) the
// multiplication by the scale turns into exactly what DequantizeLinear
// computes.
func roundTrip() {
	TEXT("roundTripAVX2", NOSPLIT, "func(y, x []float32, scale, lo, hi float32)")
	Doc("roundTripAVX2 writes clamp(round(x/scale), lo, hi)·scale for the first",
		"len(x) &^ 7 elements of x to y (at least as long), rounding half to even,",
		"NaN to lo; lo and hi are the codes' range minus the zero point.")
	py := Load(Param("y").Base(), GP64())
	px := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	SHRQ(U8(3), n)
	vs, vlo, vhi, zero := YMM(), YMM(), YMM(), YMM()
	VBROADCASTSS(NewParamAddr("scale", 48), vs)
	VBROADCASTSS(NewParamAddr("lo", 52), vlo)
	VBROADCASTSS(NewParamAddr("hi", 56), vhi)
	VXORPS(zero, zero, zero)
	v := YMM()
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VMOVUPS(Mem{Base: px}, v)
	VDIVPS(vs, v, v)
	VMAXPS(vlo, v, v)
	VMINPS(vhi, v, v)
	VROUNDPS(U8(0), v, v)
	// +0 makes a −0 (a small negative quotient rounded) the +0 that
	// DequantizeLinear computes from the integer code.
	VADDPS(zero, v, v)
	VMULPS(vs, v, v)
	VMOVUPS(v, Mem{Base: py})
	ADDQ(U8(32), px)
	ADDQ(U8(32), py)
	DECQ(n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

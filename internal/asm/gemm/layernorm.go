package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// layerNorm generates the AVX2 row kernels of pkg/kernels' LayerNorm, all
// in float64 lanes as the Go code computes:
//
//	sumRowAVX2(x, n) = Σ x[j]
//	sqDevRowAVX2(x, n, mu) = Σ (x[j] − mu)²
//	normRowAVX2(y, x, scale, bias, n, mu, inv):
//	    y[j] = float32((x[j] − mu)·inv)·scale[j] + bias[j]
//
// for n a multiple of 8. The sums keep two accumulators of 4 lanes, added
// lane by lane at the end: a fixed order for a given n. normRowAVX2 rounds
// exactly as the Go loop does, element by element.
func layerNorm() {
	for _, dev := range []bool{false, true} {
		name, sig := "sumRowAVX2", "func(x *float32, n int) float64"
		if dev {
			name, sig = "sqDevRowAVX2", "func(x *float32, n int, mu float64) float64"
		}
		TEXT(name, NOSPLIT, sig)
		Doc(name + " returns the float64 sum over x[:n] (n a multiple of 8) of x, or of (x − mu)² for sqDevRowAVX2.")
		px := Load(Param("x"), GP64())
		n := Load(Param("n"), GP64())
		var mu VecVirtual
		if dev {
			mx := XMM()
			Load(Param("mu"), mx)
			mu = YMM()
			VBROADCASTSD(mx, mu)
		}
		acc := [2]VecVirtual{YMM(), YMM()}
		VXORPD(acc[0], acc[0], acc[0])
		VXORPD(acc[1], acc[1], acc[1])
		Label(name + "_loop")
		TESTQ(n, n)
		JZ(LabelRef(name + "_done"))
		for h := range 2 {
			d := YMM()
			VCVTPS2PD(Mem{Base: px, Disp: 16 * h}, d)
			if dev {
				VSUBPD(mu, d, d)
				VMULPD(d, d, d)
			}
			VADDPD(d, acc[h], acc[h])
		}
		ADDQ(U8(32), px)
		SUBQ(U8(8), n)
		JMP(LabelRef(name + "_loop"))
		Label(name + "_done")
		returnSum(acc)
	}

	normRow(normRowAVX2Width)
}

// normRowWidth is what normRow's two instruction sets differ in: the
// register of 4 or 8 float64 lanes, the register of their float32
// halves, how the halves are narrowed and joined, and names.
type normRowWidth struct {
	name, doc, label string
	floats           int // float32 values a step
	wide, half       func() VecVirtual
	narrow           func(d, h VecVirtual)
	join             func(lo, hi, o VecVirtual)
}

var (
	normRowAVX2Width = normRowWidth{
		name: "normRowAVX2", label: "norm", floats: 8,
		doc:    "normRowAVX2 sets y[j] = float32((x[j]−mu)·inv)·scale[j] + bias[j] for j < n (a multiple of 8); bias may be nil (no add).",
		wide:   func() VecVirtual { return YMM() },
		half:   func() VecVirtual { return XMM() },
		narrow: func(d, h VecVirtual) { VCVTPD2PSY(d, h) },
		join:   func(lo, hi, o VecVirtual) { VINSERTF128(U8(1), hi, lo.AsY(), o) },
	}
	normRowAVX512Width = normRowWidth{
		name: "normRowAVX512", label: "norm512", floats: 16,
		doc:    "normRowAVX512 sets y[j] = float32((x[j]−mu)·inv)·scale[j] + bias[j] for j < n (a multiple of 16); bias may be nil (no add).",
		wide:   func() VecVirtual { return ZMM() },
		half:   func() VecVirtual { return YMM() },
		narrow: func(d, h VecVirtual) { VCVTPD2PS(d, h) },
		join:   func(lo, hi, o VecVirtual) { VINSERTF32X8(U8(1), hi, lo.AsZ(), o) },
	}
)

// normRow512 generates normRowAVX512: normRowAVX2 on 16 floats a step (n
// a multiple of 16), each element by the same operations (float64 lanes,
// eight to a ZMM register), so the results are the same bits.
func normRow512() { normRow(normRowAVX512Width) }

// normRow generates y[j] = float32((x[j]−mu)·inv)·scale[j] + bias[j] in
// steps of w.floats, each half of a step widened to float64 lanes.
func normRow(w normRowWidth) {
	TEXT(w.name, NOSPLIT, "func(y, x, scale, bias *float32, n int, mu, inv float64)")
	Doc(w.doc)
	py, px := Load(Param("y"), GP64()), Load(Param("x"), GP64())
	ps, pb := Load(Param("scale"), GP64()), Load(Param("bias"), GP64())
	n := Load(Param("n"), GP64())
	bcast := func(name string) VecVirtual {
		x := XMM()
		Load(Param(name), x)
		v := w.wide()
		VBROADCASTSD(x, v)
		return v
	}
	mu, inv := bcast("mu"), bcast("inv")
	TESTQ(pb, pb)
	JZ(LabelRef(w.label + "_nobias"))
	for _, withBias := range []bool{true, false} {
		loop, done := w.label+"_bias", w.label+"_bias_done"
		if !withBias {
			Label(w.label + "_nobias")
			loop, done = w.label+"_plain", w.label+"_plain_done"
		}
		Label(loop)
		TESTQ(n, n)
		JZ(LabelRef(done))
		var half [2]VecVirtual
		for h := range 2 {
			d := w.wide()
			VCVTPS2PD(Mem{Base: px, Disp: 2 * w.floats * h}, d)
			VSUBPD(mu, d, d)
			VMULPD(inv, d, d)
			half[h] = w.half()
			w.narrow(d, half[h])
		}
		o := w.wide()
		w.join(half[0], half[1], o)
		VMULPS(Mem{Base: ps}, o, o)
		ptrs := []Register{py, px, ps}
		if withBias {
			VADDPS(Mem{Base: pb}, o, o)
			ptrs = append(ptrs, pb)
		}
		VMOVUPS(o, Mem{Base: py})
		for _, p := range ptrs {
			ADDQ(U8(4*w.floats), p)
		}
		SUBQ(U8(w.floats), n)
		JMP(LabelRef(loop))
		Label(done)
		VZEROUPPER()
		RET()
	}
}

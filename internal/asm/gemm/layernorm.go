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

	TEXT("normRowAVX2", NOSPLIT, "func(y, x, scale, bias *float32, n int, mu, inv float64)")
	Doc("normRowAVX2 sets y[j] = float32((x[j]−mu)·inv)·scale[j] + bias[j] for j < n (a multiple of 8); bias may be nil (no add).")
	py, px := Load(Param("y"), GP64()), Load(Param("x"), GP64())
	ps, pb := Load(Param("scale"), GP64()), Load(Param("bias"), GP64())
	n := Load(Param("n"), GP64())
	bcast := func(name string) VecVirtual {
		x := XMM()
		Load(Param(name), x)
		v := YMM()
		VBROADCASTSD(x, v)
		return v
	}
	mu, inv := bcast("mu"), bcast("inv")
	TESTQ(pb, pb)
	JZ(LabelRef("norm_nobias"))
	for _, withBias := range []bool{true, false} {
		loop, done := "norm_bias", "norm_bias_done"
		if !withBias {
			Label("norm_nobias")
			loop, done = "norm_plain", "norm_plain_done"
		}
		Label(loop)
		TESTQ(n, n)
		JZ(LabelRef(done))
		var half [2]VecVirtual
		for h := range 2 {
			d := YMM()
			VCVTPS2PD(Mem{Base: px, Disp: 16 * h}, d)
			VSUBPD(mu, d, d)
			VMULPD(inv, d, d)
			half[h] = XMM()
			VCVTPD2PSY(d, half[h])
		}
		o := YMM()
		VINSERTF128(U8(1), half[1], half[0].AsY(), o)
		VMULPS(Mem{Base: ps}, o, o)
		ptrs := []Register{py, px, ps}
		if withBias {
			VADDPS(Mem{Base: pb}, o, o)
			ptrs = append(ptrs, pb)
		}
		VMOVUPS(o, Mem{Base: py})
		for _, p := range ptrs {
			ADDQ(U8(32), p)
		}
		SUBQ(U8(8), n)
		JMP(LabelRef(loop))
		Label(done)
		VZEROUPPER()
		RET()
	}
}

// normRow512 generates normRowAVX512: normRowAVX2 on 16 floats a step (n
// a multiple of 16), each element by the same operations (float64 lanes,
// eight to a ZMM register), so the results are the same bits.
func normRow512() {
	TEXT("normRowAVX512", NOSPLIT, "func(y, x, scale, bias *float32, n int, mu, inv float64)")
	Doc("normRowAVX512 sets y[j] = float32((x[j]−mu)·inv)·scale[j] + bias[j] for j < n (a multiple of 16); bias may be nil (no add).")
	py, px := Load(Param("y"), GP64()), Load(Param("x"), GP64())
	ps, pb := Load(Param("scale"), GP64()), Load(Param("bias"), GP64())
	n := Load(Param("n"), GP64())
	bcast := func(name string) VecVirtual {
		x := XMM()
		Load(Param(name), x)
		v := ZMM()
		VBROADCASTSD(x, v)
		return v
	}
	mu, inv := bcast("mu"), bcast("inv")
	TESTQ(pb, pb)
	JZ(LabelRef("norm512_nobias"))
	for _, withBias := range []bool{true, false} {
		loop, done := "norm512_bias", "norm512_bias_done"
		if !withBias {
			Label("norm512_nobias")
			loop, done = "norm512_plain", "norm512_plain_done"
		}
		Label(loop)
		TESTQ(n, n)
		JZ(LabelRef(done))
		var half [2]VecVirtual
		for h := range 2 {
			d := ZMM()
			VCVTPS2PD(Mem{Base: px, Disp: 32 * h}, d)
			VSUBPD(mu, d, d)
			VMULPD(inv, d, d)
			half[h] = YMM()
			VCVTPD2PS(d, half[h])
		}
		o := ZMM()
		VINSERTF32X8(U8(1), half[1], half[0].AsZ(), o)
		VMULPS(Mem{Base: ps}, o, o)
		ptrs := []Register{py, px, ps}
		if withBias {
			VADDPS(Mem{Base: pb}, o, o)
			ptrs = append(ptrs, pb)
		}
		VMOVUPS(o, Mem{Base: py})
		for _, p := range ptrs {
			ADDQ(U8(64), p)
		}
		SUBQ(U8(16), n)
		JMP(LabelRef(loop))
		Label(done)
		VZEROUPPER()
		RET()
	}
}

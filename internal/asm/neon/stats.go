package main

// stats writes the calibration statistics kernels, bit-identical to
// minMaxRef and minMaxAccumRef of pkg/kernels. Each value v becomes
// c = v + (v − v): v − v is +0 for finite v (so c is v with −0 made +0)
// and NaN for ±Inf and NaN (so c is NaN). FMINNM and FMAXNM ignore a NaN
// operand, so folding c skips exactly the non-finite values, and FCMEQ
// c, c (all ones where c is not NaN) counts the finite ones. With −0 gone
// the minimum and maximum of the values seen are unique, so the lane
// order does not matter.
func stats(f *asmFile) {
	minMax(f)
	minMaxAccum(f)
}

// minMax writes minMaxNEON: 16 values an iteration in four vectors, two
// pairs of minimum and maximum accumulators so that consecutive FMINNM and
// FMAXNM do not wait on each other. Per vector: one load quarter, FSUB,
// FADD, FMINNM, FMAXNM, FCMEQ and an integer SUB, six vector operations
// for 4 values, against about five scalar operations and two branches
// per value in Go. The finite counts are int32 lanes; the caller bounds a
// call to 2^28 values.
func minMax(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func minMaxNEON(x []float32) (lo float32, hi float32, nonFinite int)")
	f.raw("TEXT ·minMaxNEON(SB), NOSPLIT, $0-40")
	w("MOVD x_base+0(FP), R0")
	w("MOVD x_len+8(FP), R1")
	w("LSR $4, R1, R2")
	w("MOVW $0x7f800000, R3") // +Inf
	w("VDUP R3, V16.S4")
	w("VDUP R3, V17.S4")
	w("MOVW $0xff800000, R3") // −Inf
	w("VDUP R3, V18.S4")
	w("VDUP R3, V19.S4")
	w("VEOR V20.B16, V20.B16, V20.B16")
	w("VEOR V21.B16, V21.B16, V21.B16")
	w("CBZ R2, reduce")
	f.label("loop")
	w("VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]")
	for i := 0; i < 4; i++ {
		f.fsub(4+i, i, i)
	}
	for i := 0; i < 4; i++ {
		f.fadd(i, i, 4+i)
	}
	for i := 0; i < 4; i++ {
		f.fminnm(16+i%2, 16+i%2, i)
		f.fmaxnm(18+i%2, 18+i%2, i)
		f.fcmeq(4+i, i, i)
		w("VSUB V%d.S4, V%d.S4, V%d.S4", 4+i, 20+i%2, 20+i%2)
	}
	w("SUB $1, R2, R2")
	w("CBNZ R2, loop")
	f.label("reduce")
	f.fminnm(16, 16, 17)
	f.fminnmv(16, 16)
	f.fmaxnm(18, 18, 19)
	f.fmaxnmv(18, 18)
	w("FMOVS F16, lo+24(FP)")
	w("FMOVS F18, hi+28(FP)")
	w("VADD V21.S4, V20.S4, V20.S4")
	w("VADDV V20.S4, V20")
	w("VMOV V20.S[0], R3")
	w("LSR $4, R1, R1")
	w("LSL $4, R1, R1")
	w("SUB R3, R1, R1")
	w("MOVD R1, nonFinite+32(FP)")
	w("RET")
}

// minMaxAccum writes minMaxAccumNEON: one vector of values and its
// minimum and maximum accumulators an iteration (three loads, two stores,
// six vector operations for 4 values); the accumulators of one vector
// depend on nothing else, so iterations overlap.
func minMaxAccum(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func minMaxAccumNEON(x []float32, lo []float32, hi []float32) (nonFinite int)")
	f.raw("TEXT ·minMaxAccumNEON(SB), NOSPLIT, $0-80")
	w("MOVD x_base+0(FP), R0")
	w("MOVD x_len+8(FP), R3")
	w("MOVD lo_base+24(FP), R1")
	w("MOVD hi_base+48(FP), R2")
	w("LSR $2, R3, R4")
	w("VEOR V20.B16, V20.B16, V20.B16")
	w("CBZ R4, count")
	f.label("loop")
	w("VLD1.P 16(R0), [V0.S4]")
	w("VLD1 (R1), [V1.S4]")
	w("VLD1 (R2), [V2.S4]")
	f.fsub(3, 0, 0)
	f.fadd(0, 0, 3)
	f.fminnm(1, 1, 0)
	f.fmaxnm(2, 2, 0)
	w("VST1.P [V1.S4], 16(R1)")
	w("VST1.P [V2.S4], 16(R2)")
	f.fcmeq(3, 0, 0)
	w("VSUB V3.S4, V20.S4, V20.S4")
	w("SUB $1, R4, R4")
	w("CBNZ R4, loop")
	f.label("count")
	w("VADDV V20.S4, V20")
	w("VMOV V20.S[0], R4")
	w("LSR $2, R3, R3")
	w("LSL $2, R3, R3")
	w("SUB R4, R3, R3")
	w("MOVD R3, nonFinite+72(FP)")
	w("RET")
}

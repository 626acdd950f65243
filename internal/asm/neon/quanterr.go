package main

// quantErr writes quantSqErrsNEON, QuantSqErrs of pkg/kernels over the
// first len(x) &^ 7 elements for every candidate k: per value q = x·inv,
// FMAXNM with lo (a NaN q becomes lo, as the reference's !(q >= lo)),
// FMIN with hi, FRINTN (half to even, as the reference's 1.5·2²³
// addition below 2²²), the product with the scale and the difference,
// each rounded to float32 as in the reference; the squares accumulate by
// FMLA in two vectors of four lanes (the reference's e += d·d, which the
// Go compiler fuses on arm64 too), summed pairwise at the end. The sums
// are therefore a float32 reordering of the reference's, as on amd64.
// Per 8 values: one two-register load and 14 vector operations, all
// independent between the two vectors but for the accumulators.
func quantErr(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func quantSqErrsNEON(x []float32, inv []float32, scale []float32, lo []float32, hi []float32, out []float32)")
	f.raw("TEXT ·quantSqErrsNEON(SB), NOSPLIT, $0-144")
	w("MOVD x_base+0(FP), R0")
	w("MOVD x_len+8(FP), R1")
	w("MOVD inv_base+24(FP), R2")
	w("MOVD scale_base+48(FP), R3")
	w("MOVD lo_base+72(FP), R4")
	w("MOVD hi_base+96(FP), R5")
	w("MOVD out_base+120(FP), R6")
	w("MOVD out_len+128(FP), R7")
	w("LSR $3, R1, R1")
	f.label("cand")
	w("CBZ R7, done")
	w("VLD1R.P 4(R2), [V16.S4]")
	w("VLD1R.P 4(R3), [V17.S4]")
	w("VLD1R.P 4(R4), [V18.S4]")
	w("VLD1R.P 4(R5), [V19.S4]")
	w("VEOR V20.B16, V20.B16, V20.B16")
	w("VEOR V21.B16, V21.B16, V21.B16")
	w("MOVD R0, R8")
	w("MOVD R1, R9")
	w("CBZ R9, sum")
	f.label("loop")
	w("VLD1.P 32(R8), [V0.S4, V1.S4]")
	for h := 0; h < 2; h++ {
		f.fmul(2+h, h, 16)
	}
	for h := 0; h < 2; h++ {
		f.fmaxnm(2+h, 2+h, 18)
	}
	for h := 0; h < 2; h++ {
		f.fmin(2+h, 2+h, 19)
	}
	for h := 0; h < 2; h++ {
		f.frintn(2+h, 2+h)
	}
	for h := 0; h < 2; h++ {
		f.fmul(2+h, 2+h, 17)
	}
	for h := 0; h < 2; h++ {
		f.fsub(2+h, h, 2+h)
	}
	for h := 0; h < 2; h++ {
		w("VFMLA V%d.S4, V%d.S4, V%d.S4", 2+h, 2+h, 20+h)
	}
	w("SUB $1, R9, R9")
	w("CBNZ R9, loop")
	f.label("sum")
	f.fadd(20, 20, 21)
	f.faddp(20, 20, 20)
	f.faddpScalar(20, 20)
	w("FMOVS F20, (R6)")
	w("ADD $4, R6, R6")
	w("SUB $1, R7, R7")
	w("B cand")
	f.label("done")
	w("RET")
}

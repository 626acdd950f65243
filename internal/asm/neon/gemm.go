package main

// gemm writes gemm8x8NEON, the SGEMM micro-kernel: it multiplies a packed
// A panel (8 rows per step) by a packed B panel (8 columns per step) over
// kc steps and writes an 8×8 tile of C, with the same order of operations
// as the amd64 kernels:
//
//	for p < kc: acc[i][j] = fma(a[p*8+i], b[p*8+j], acc[i][j])
//	C[i*ldc+j] = acc[i][j]                  (accumulate == 0)
//	C[i*ldc+j] = C[i*ldc+j] + acc[i][j]     (accumulate != 0)
//
// The 16 accumulators (8 rows × two 4-lane vectors) are independent FMA
// chains, enough to cover the FMA latency of current arm64 cores (about
// 4 cycles on 4 pipes). Each step loads two A and two B vectors and
// issues 16 FMLAs, each taking its A element by lane (FMLA by element),
// so no broadcast is needed. Go's assembler has no by-element FMLA and no
// vector FADD, so those are written as WORDs with the instruction in a
// comment; C + acc is an FMLA of acc by a vector of ones, which rounds
// once, exactly as an FADD would.
func gemm(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func gemm8x8NEON(kc int, a *float32, b *float32, c *float32, ldc int, accumulate int)")
	f.raw("TEXT ·gemm8x8NEON(SB), NOSPLIT, $0-48")
	w("MOVD kc+0(FP), R0")
	w("MOVD a+8(FP), R1")
	w("MOVD b+16(FP), R2")
	w("MOVD c+24(FP), R3")
	w("MOVD ldc+32(FP), R4")
	w("MOVD accumulate+40(FP), R5")
	w("LSL $2, R4, R4")
	for v := 0; v < 16; v++ {
		w("VEOR V%d.B16, V%d.B16, V%d.B16", v, v, v)
	}
	w("CBZ R0, done")
	f.label("loop")
	w("VLD1.P 32(R1), [V16.S4, V17.S4]")
	w("VLD1.P 32(R2), [V18.S4, V19.S4]")
	for i := 0; i < 8; i++ {
		src, lane := 16+i/4, i%4
		for h := 0; h < 2; h++ {
			d, n := 2*i+h, 18+h
			f.word(fmlaElem(d, n, src, lane), "FMLA V%d.4S, V%d.4S, V%d.S[%d]", d, n, src, lane)
		}
	}
	w("SUB $1, R0, R0")
	w("CBNZ R0, loop")
	f.label("done")
	w("CBZ R5, store")
	f.word(fmovOnes(31), "FMOV V31.4S, #1.0")
	for i := 0; i < 8; i++ {
		w("VLD1 (R3), [V20.S4, V21.S4]")
		w("VFMLA V31.S4, V%d.S4, V20.S4", 2*i)
		w("VFMLA V31.S4, V%d.S4, V21.S4", 2*i+1)
		w("VST1 [V20.S4, V21.S4], (R3)")
		w("ADD R4, R3, R3")
	}
	w("RET")
	f.label("store")
	for i := 0; i < 8; i++ {
		w("VST1 [V%d.S4, V%d.S4], (R3)", 2*i, 2*i+1)
		w("ADD R4, R3, R3")
	}
	w("RET")
}

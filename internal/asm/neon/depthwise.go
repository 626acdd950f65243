package main

import "fmt"

// depthwise writes the depthwise row kernels, dwRow of pkg/kernels:
// dw3s{1,2}r{1,2,3}NEON for 3×3 kernels over one to three rows (dwRow3)
// and dw5s{1,2}r5NEON for 5×5 kernels over five (dwRow5). Each computes
// eight outputs an iteration in two vectors, accumulated from +0 over the
// taps in the reference's order (rows, then columns) by an FMUL and an
// FADD, so that every product is rounded before its add exactly as the
// reference's explicit float32 conversion demands (no FMLA): the results
// are bit-identical. A tap costs two FMUL and two FADD for 8 outputs, 4
// lanes an instruction, against two scalar operations and two loads per
// output in Go; no load reads past the last tap of the last output.
func depthwise(f *asmFile) {
	for _, stride := range []int{1, 2} {
		for nr := 1; nr <= 3; nr++ {
			dwRow3(f, stride, nr)
		}
		dwRow5(f, stride)
	}
}

// dwRow3 writes dw3s{stride}r{nr}NEON. The nine weights are broadcast once
// into V20..V28. Stride 1 loads the eight inputs of tap kx from column kx
// (three unaligned two-register loads a row). Stride 2 splits the 17
// inputs of a row into even and odd columns with two LD2 and one scalar
// load: taps 0 and 1 are the evens and odds, tap 2 the evens moved one
// lane (two EXT).
func dwRow3(f *asmFile, stride, nr int) {
	w := f.op
	name := fmt.Sprintf("dw3s%dr%dNEON", stride, nr)
	f.raw("")
	f.raw("// func %s(out *float32, n int, x *float32, ldx int, w *float32)", name)
	f.raw("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	w("MOVD out+0(FP), R0")
	w("MOVD n+8(FP), R1")
	w("MOVD x+16(FP), R2")
	w("MOVD ldx+24(FP), R3")
	w("MOVD w+32(FP), R4")
	w("LSL $2, R3, R3")
	for i := 0; i < 3*nr; i++ {
		w("VLD1R.P 4(R4), [V%d.S4]", 20+i)
	}
	w("CBZ R1, done")
	f.label("loop")
	w("VEOR V0.B16, V0.B16, V0.B16")
	w("VEOR V1.B16, V1.B16, V1.B16")
	w("MOVD R2, R5")
	// tap adds the products of weight register wr with the inputs in a
	// and b to the accumulators.
	tap := func(a, b, wr int) {
		f.fmul(9, a, wr)
		f.fmul(10, b, wr)
		f.fadd(0, 0, 9)
		f.fadd(1, 1, 10)
	}
	for r := 0; r < nr; r++ {
		wr := 20 + 3*r
		if stride == 1 {
			w("VLD1 (R5), [V2.S4, V3.S4]")
			w("ADD $4, R5, R6")
			w("VLD1 (R6), [V4.S4, V5.S4]")
			w("ADD $8, R5, R6")
			w("VLD1 (R6), [V6.S4, V7.S4]")
			tap(2, 3, wr)
			tap(4, 5, wr+1)
			tap(6, 7, wr+2)
		} else {
			w("VLD2 (R5), [V2.S4, V3.S4]")
			w("ADD $32, R5, R6")
			w("VLD2 (R6), [V4.S4, V5.S4]")
			w("FMOVS 64(R5), F6")
			f.ext(7, 2, 4, 1)
			f.ext(8, 4, 6, 1)
			tap(2, 4, wr)
			tap(3, 5, wr+1)
			tap(7, 8, wr+2)
		}
		if r < nr-1 {
			w("ADD R3, R5, R5")
		}
	}
	w("VST1.P [V0.S4, V1.S4], 32(R0)")
	w("ADD $%d, R2, R2", 32*stride)
	w("SUB $8, R1, R1")
	w("CBNZ R1, loop")
	f.label("done")
	w("RET")
}

// dwRow5 writes dw5s{stride}r5NEON, dwRow for 5×5 kernels over five
// rows, with the arithmetic of dwRow3. The 25 weights are too many to
// broadcast, so they stay packed in V24..V30 and each product takes its
// weight by lane (FMUL by element, one rounding as the vector FMUL).
// Stride 1 loads the eight inputs of tap kx from column kx (five
// two-register loads a row). Stride 2 splits the 19 inputs of a row into
// evens and odds with two LD2 and three scalar loads; tap kx is the evens
// (kx even) or odds moved kx/2 lanes by EXT.
func dwRow5(f *asmFile, stride int) {
	w := f.op
	name := fmt.Sprintf("dw5s%dr5NEON", stride)
	f.raw("")
	f.raw("// func %s(out *float32, n int, x *float32, ldx int, w *float32)", name)
	f.raw("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	w("MOVD out+0(FP), R0")
	w("MOVD n+8(FP), R1")
	w("MOVD x+16(FP), R2")
	w("MOVD ldx+24(FP), R3")
	w("MOVD w+32(FP), R4")
	w("LSL $2, R3, R3")
	// Weight i is lane i%4 of V24+i/4: 24 by vector loads, the 25th alone.
	w("VLD1.P 64(R4), [V24.S4, V25.S4, V26.S4, V27.S4]")
	w("VLD1.P 32(R4), [V28.S4, V29.S4]")
	w("FMOVS (R4), F30")
	w("CBZ R1, done")
	f.label("loop")
	w("VEOR V0.B16, V0.B16, V0.B16")
	w("VEOR V1.B16, V1.B16, V1.B16")
	w("MOVD R2, R5")
	tap := func(a, b, i int) {
		f.fmulElem(20, a, 24+i/4, i%4)
		f.fmulElem(21, b, 24+i/4, i%4)
		f.fadd(0, 0, 20)
		f.fadd(1, 1, 21)
	}
	for r := 0; r < 5; r++ {
		if stride == 1 {
			for kx := 0; kx < 5; kx++ {
				if kx == 0 {
					w("VLD1 (R5), [V2.S4, V3.S4]")
				} else {
					w("ADD $%d, R5, R6", 4*kx)
					w("VLD1 (R6), [V2.S4, V3.S4]")
				}
				tap(2, 3, 5*r+kx)
			}
		} else {
			// Evens: V2 (columns 0..6), V4 (8..14), V6 (16, 18);
			// odds: V3, V5, V7 (17).
			w("VLD2 (R5), [V2.S4, V3.S4]")
			w("ADD $32, R5, R6")
			w("VLD2 (R6), [V4.S4, V5.S4]")
			w("FMOVS 64(R5), F6")
			w("FMOVS 68(R5), F7")
			w("FMOVS 72(R5), F8")
			w("VMOV V8.S[0], V6.S[1]")
			tap(2, 4, 5*r)
			tap(3, 5, 5*r+1)
			f.ext(10, 2, 4, 1)
			f.ext(11, 4, 6, 1)
			tap(10, 11, 5*r+2)
			f.ext(10, 3, 5, 1)
			f.ext(11, 5, 7, 1)
			tap(10, 11, 5*r+3)
			f.ext(10, 2, 4, 2)
			f.ext(11, 4, 6, 2)
			tap(10, 11, 5*r+4)
		}
		if r < 4 {
			w("ADD R3, R5, R5")
		}
	}
	w("VST1.P [V0.S4, V1.S4], 32(R0)")
	w("ADD $%d, R2, R2", 32*stride)
	w("SUB $8, R1, R1")
	w("CBNZ R1, loop")
	f.label("done")
	w("RET")
}

package main

import "fmt"

// depthwise writes dw3s{1,2}r{1,2,3}NEON, dwRow of pkg/kernels for 3×3
// kernels over one to three rows: eight outputs an iteration in two
// vectors, each accumulated from +0 over the taps in the reference's
// order (rows, then columns) by an FMUL and an FADD, so that every
// product is rounded before its add exactly as the reference's explicit
// float32 conversion demands (no FMLA) and the results are bit-identical.
// The nine weights are broadcast once into V20..V28.
//
// Stride 1 loads the eight inputs of tap kx from column kx (unaligned,
// three two-register loads a row). Stride 2 splits the 17 inputs of a
// row into even and odd columns with two LD2 and one scalar load: taps 0
// and 1 are the evens and odds, tap 2 the evens moved one lane (EXT).
// Per row and 8 outputs: 3 loads (stride 1) or 3 loads and 2 EXT
// (stride 2), and 12 arithmetic operations, 3 per output and tap pair of
// lanes; no load reads past the last tap of the last output.
func depthwise(f *asmFile) {
	for _, stride := range []int{1, 2} {
		for nr := 1; nr <= 3; nr++ {
			dwRow3(f, stride, nr)
		}
	}
}

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

package main

// rows writes the element-wise row kernels of the convolution
// epilogue, pooling, Clip and HardSwish, each bit-identical to its Go
// reference in pkg/kernels (epilogueRowGo, axpyGo, maxRowGo, clipGo,
// hardSwishGo): one IEEE operation per Go operation, products rounded
// before their adds (the references' explicit float32 conversions forbid
// FMA, so no FMLA here). Each runs over n values, a multiple of 8, two
// vectors an iteration: one or two two-register loads and one store per
// 8 values, and two to five vector operations per 4 values where the Go
// loops spend as many scalar ones per value, plus their loads, stores
// and loop control.
func rows(f *asmFile) {
	epilogueRow(f, false)
	epilogueRow(f, true)
	axpy(f)
	maxRow(f)
	clipRow(f)
	hardSwish(f, false)
	hardSwish(f, true)
}

// rowLoop writes the loop over R1 values in steps of 8: load (the inputs
// to V0, V1 and, with R0's, V2, V3), body, and a store of V0, V1 to R0.
func rowLoop(f *asmFile, src string, loadDst bool, body func()) {
	w := f.op
	w("CBZ R1, done")
	f.label("loop")
	w("VLD1.P 32(%s), [V0.S4, V1.S4]", src)
	if loadDst {
		w("VLD1 (R0), [V2.S4, V3.S4]")
	}
	body()
	w("VST1.P [V0.S4, V1.S4], 32(R0)")
	w("SUB $8, R1, R1")
	w("CBNZ R1, loop")
	f.label("done")
	w("RET")
}

// broadcast loads the float32 argument at off(FP) into every lane of Vv.
func broadcast(f *asmFile, arg string, off, v int) {
	f.op("FMOVS %s+%d(FP), F%d", arg, off, v)
	f.op("VDUP V%d.S[0], V%d.S4", v, v)
}

// epilogueRow writes epilogueRow{,Relu}NEON(x *float32, n int, b, s, t
// float32): x[j] = float32(float32(x[j]+b)·s) + t, then with relu
// FMAX with +0, which is the reference's y <= 0 ? 0 : y for every y
// (−0 and negatives become +0, NaN stays NaN).
func epilogueRow(f *asmFile, relu bool) {
	w := f.op
	name := "epilogueRowNEON"
	if relu {
		name = "epilogueRowReluNEON"
	}
	f.raw("")
	f.raw("// func %s(x *float32, n int, b float32, s float32, t float32)", name)
	f.raw("TEXT ·%s(SB), NOSPLIT, $0-28", name)
	w("MOVD x+0(FP), R0")
	w("MOVD n+8(FP), R1")
	w("MOVD R0, R2")
	broadcast(f, "b", 16, 16)
	broadcast(f, "s", 20, 17)
	broadcast(f, "t", 24, 18)
	w("VEOR V19.B16, V19.B16, V19.B16")
	rowLoop(f, "R2", false, func() {
		for h := 0; h < 2; h++ {
			f.fadd(h, h, 16)
		}
		for h := 0; h < 2; h++ {
			f.fmul(h, h, 17)
		}
		for h := 0; h < 2; h++ {
			f.fadd(h, h, 18)
		}
		if relu {
			for h := 0; h < 2; h++ {
				f.fmax(h, h, 19)
			}
		}
	})
}

// axpy writes axpyNEON(dst, src *float32, n int, w float32):
// dst[j] += float32(w·src[j]), an FMUL and an FADD.
func axpy(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func axpyNEON(dst *float32, src *float32, n int, w float32)")
	f.raw("TEXT ·axpyNEON(SB), NOSPLIT, $0-28")
	w("MOVD dst+0(FP), R0")
	w("MOVD src+8(FP), R2")
	w("MOVD n+16(FP), R1")
	broadcast(f, "w", 24, 16)
	rowLoop(f, "R2", true, func() {
		for h := 0; h < 2; h++ {
			f.fmul(h, h, 16)
		}
		for h := 0; h < 2; h++ {
			f.fadd(h, 2+h, h)
		}
	})
}

// maxRow writes maxRowNEON(dst, src *float32, n int): dst[j] = src[j]
// where src[j] > dst[j] (FCMGT, then BIT), else dst[j] kept: unlike FMAX
// this keeps dst on a NaN src and on −0 against +0, as the reference.
func maxRow(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func maxRowNEON(dst *float32, src *float32, n int)")
	f.raw("TEXT ·maxRowNEON(SB), NOSPLIT, $0-24")
	w("MOVD dst+0(FP), R0")
	w("MOVD src+8(FP), R2")
	w("MOVD n+16(FP), R1")
	rowLoop(f, "R2", true, func() {
		for h := 0; h < 2; h++ {
			f.fcmgt(4+h, h, 2+h)
		}
		for h := 0; h < 2; h++ {
			f.bit(2+h, h, 4+h)
		}
		w("VORR V2.B16, V2.B16, V0.B16")
		w("VORR V3.B16, V3.B16, V1.B16")
	})
}

// clipRow writes clipRowNEON(dst, src *float32, n int, lo, hi float32):
// FMAX with lo, then FMIN with hi. FMAX and FMIN pass NaN on as Go's max
// and min do; they may pick either zero of −0 and +0, which Go does not,
// so the caller sends no bound of lo = −0 or hi = ±0 (clipVecOK).
func clipRow(f *asmFile) {
	w := f.op
	f.raw("")
	f.raw("// func clipRowNEON(dst *float32, src *float32, n int, lo float32, hi float32)")
	f.raw("TEXT ·clipRowNEON(SB), NOSPLIT, $0-32")
	w("MOVD dst+0(FP), R0")
	w("MOVD src+8(FP), R2")
	w("MOVD n+16(FP), R1")
	broadcast(f, "lo", 24, 16)
	broadcast(f, "hi", 28, 17)
	rowLoop(f, "R2", false, func() {
		for h := 0; h < 2; h++ {
			f.fmax(h, h, 16)
		}
		for h := 0; h < 2; h++ {
			f.fmin(h, h, 17)
		}
	})
}

// hardSwish writes hardSwish{Mul,Div}RowNEON(dst, src *float32, n int,
// shift, lo, hi, d float32): HardSwishChain's x·min(max(x+shift, lo), hi)
// then ·d or /d, one rounding a step; FMAX and FMIN as in clipRow, so the
// caller sends only bounds clipVecOK takes.
func hardSwish(f *asmFile, div bool) {
	w := f.op
	name := "hardSwishMulRowNEON"
	if div {
		name = "hardSwishDivRowNEON"
	}
	f.raw("")
	f.raw("// func %s(dst *float32, src *float32, n int, shift float32, lo float32, hi float32, d float32)", name)
	f.raw("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	w("MOVD dst+0(FP), R0")
	w("MOVD src+8(FP), R2")
	w("MOVD n+16(FP), R1")
	broadcast(f, "shift", 24, 16)
	broadcast(f, "lo", 28, 17)
	broadcast(f, "hi", 32, 18)
	broadcast(f, "d", 36, 19)
	rowLoop(f, "R2", false, func() {
		for h := 0; h < 2; h++ {
			f.fadd(2+h, h, 16)
		}
		for h := 0; h < 2; h++ {
			f.fmax(2+h, 2+h, 17)
		}
		for h := 0; h < 2; h++ {
			f.fmin(2+h, 2+h, 18)
		}
		for h := 0; h < 2; h++ {
			f.fmul(h, h, 2+h)
		}
		for h := 0; h < 2; h++ {
			if div {
				f.fdiv(h, h, 19)
			} else {
				f.fmul(h, h, 19)
			}
		}
	})
}

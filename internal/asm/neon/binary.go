package main

import "fmt"

// binary writes bin{Add,Sub,Mul,Div}NEON and bin{…}ScalarNEON, Binary and
// BinaryScalar of pkg/kernels over n values (a multiple of 8): one IEEE
// operation a lane, so the same bits as the Go loops but for NaN payloads.
// Per 8 values: two two-register loads (one for the scalar form), two
// vector operations of 4 lanes and one store, against one load pair, one
// operation and one store per value in Go.
func binary(f *asmFile) {
	ops := []struct {
		name string
		op   func(d, n, m int)
	}{{"Add", f.fadd}, {"Sub", f.fsub}, {"Mul", f.fmul}, {"Div", f.fdiv}}
	for _, op := range ops {
		binaryVec(f, op.name, op.op)
	}
	for _, op := range ops {
		binaryScalar(f, op.name, op.op)
	}
}

// binaryVec writes bin{name}NEON(o, a, b *float32, n int): o = a op b.
func binaryVec(f *asmFile, name string, op func(d, n, m int)) {
	w := f.op
	fn := fmt.Sprintf("bin%sNEON", name)
	f.raw("")
	f.raw("// func %s(o *float32, a *float32, b *float32, n int)", fn)
	f.raw("TEXT ·%s(SB), NOSPLIT, $0-32", fn)
	w("MOVD o+0(FP), R0")
	w("MOVD a+8(FP), R1")
	w("MOVD b+16(FP), R2")
	w("MOVD n+24(FP), R3")
	w("CBZ R3, done")
	f.label("loop")
	w("VLD1.P 32(R1), [V0.S4, V1.S4]")
	w("VLD1.P 32(R2), [V2.S4, V3.S4]")
	op(0, 0, 2)
	op(1, 1, 3)
	w("VST1.P [V0.S4, V1.S4], 32(R0)")
	w("SUB $8, R3, R3")
	w("CBNZ R3, loop")
	f.label("done")
	w("RET")
}

// binaryScalar writes bin{name}ScalarNEON(o, a *float32, s float32, n
// int, rev bool): o = a op s, or s op a when rev, each in its own loop.
func binaryScalar(f *asmFile, name string, op func(d, n, m int)) {
	w := f.op
	fn := fmt.Sprintf("bin%sScalarNEON", name)
	f.raw("")
	f.raw("// func %s(o *float32, a *float32, s float32, n int, rev bool)", fn)
	f.raw("TEXT ·%s(SB), NOSPLIT, $0-33", fn)
	w("MOVD o+0(FP), R0")
	w("MOVD a+8(FP), R1")
	broadcast(f, "s", 16, 16)
	w("MOVD n+24(FP), R3")
	w("MOVBU rev+32(FP), R4")
	w("CBZ R3, done")
	w("CBNZ R4, rev")
	for _, rev := range []bool{false, true} {
		label := "fwd"
		if rev {
			label = "rev"
		}
		f.label(label)
		w("VLD1.P 32(R1), [V0.S4, V1.S4]")
		for h := 0; h < 2; h++ {
			if rev {
				op(h, 16, h)
			} else {
				op(h, h, 16)
			}
		}
		w("VST1.P [V0.S4, V1.S4], 32(R0)")
		w("SUB $8, R3, R3")
		w("CBNZ R3, %s", label)
		w("RET")
	}
	f.label("done")
	w("RET")
}

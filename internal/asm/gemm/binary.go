package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// binOps are pkg/kernels' BinOp operations in AVX2, in BinOp order. Each
// is one IEEE operation per element, so the vector results are
// bit-identical to the Go loops.
var binOps = []struct {
	name string
	op   func(ops ...Op) // avo order: op(m, x, dst) is dst = x op m
}{
	{"Add", VADDPS},
	{"Sub", VSUBPS},
	{"Mul", VMULPS},
	{"Div", VDIVPS},
}

// binary generates bin<Op>AVX2(o, a, b, n): o[i] = a[i] op b[i], and
// bin<Op>ScalarAVX2(o, a, s, n, rev): o[i] = a[i] op s, or s op a[i] when
// rev is non-zero, for i < n (a multiple of 8).
func binary() {
	for _, b := range binOps {
		TEXT("bin"+b.name+"AVX2", NOSPLIT, "func(o, a, b *float32, n int)")
		Doc("bin" + b.name + "AVX2 sets o[i] = a[i] " + b.name + " b[i] for i < n (a multiple of 8).")
		po, pa, pb := Load(Param("o"), GP64()), Load(Param("a"), GP64()), Load(Param("b"), GP64())
		n := Load(Param("n"), GP64())
		binLoop("bin"+b.name, n, func(off Register, vecs int) {
			v := make([]VecVirtual, vecs)
			for i := range v {
				v[i] = YMM()
				VMOVUPS(Mem{Base: pa, Index: off, Scale: 1, Disp: 32 * i}, v[i])
			}
			for i := range v {
				b.op(Mem{Base: pb, Index: off, Scale: 1, Disp: 32 * i}, v[i], v[i])
			}
			for i := range v {
				VMOVUPS(v[i], Mem{Base: po, Index: off, Scale: 1, Disp: 32 * i})
			}
		})

		TEXT("bin"+b.name+"ScalarAVX2", NOSPLIT, "func(o, a *float32, s float32, n int, rev bool)")
		Doc("bin" + b.name + "ScalarAVX2 sets o[i] = a[i] " + b.name + " s, or s " + b.name + " a[i] when rev, for i < n (a multiple of 8).")
		po, pa = Load(Param("o"), GP64()), Load(Param("a"), GP64())
		sx := XMM()
		Load(Param("s"), sx)
		s := YMM()
		VBROADCASTSS(sx, s)
		n = Load(Param("n"), GP64())
		rev := Load(Param("rev"), GP8())
		for _, r := range []bool{false, true} {
			name := "bin" + b.name + "Scalar"
			if r {
				name += "Rev"
			} else {
				TESTB(rev, rev)
				JNZ(LabelRef(name + "Rev_start"))
			}
			Label(name + "_start")
			binLoop(name, n, func(off Register, vecs int) {
				v := make([]VecVirtual, vecs)
				for i := range v {
					v[i] = YMM()
					if r {
						b.op(Mem{Base: pa, Index: off, Scale: 1, Disp: 32 * i}, s, v[i]) // s op a
					} else {
						VMOVUPS(Mem{Base: pa, Index: off, Scale: 1, Disp: 32 * i}, v[i])
						b.op(s, v[i], v[i]) // a op s
					}
				}
				for i := range v {
					VMOVUPS(v[i], Mem{Base: po, Index: off, Scale: 1, Disp: 32 * i})
				}
			})
		}
	}
}

// binLoop emits a loop over n elements (a multiple of 8) that calls body
// with the byte offset register for 4 vectors at a time, then 1, and
// returns (the last routine's RET).
func binLoop(name string, n Register, body func(off Register, vecs int)) {
	off := GP64()
	XORQ(off, off)
	end := GP64()
	MOVQ(n, end)
	SHLQ(U8(2), end) // bytes
	big := GP64()
	MOVQ(end, big)
	ANDQ(I32(^127), big)
	Label(name + "_loop4")
	CMPQ(off, big)
	JGE(LabelRef(name + "_loop1"))
	body(off, 4)
	ADDQ(U32(128), off)
	JMP(LabelRef(name + "_loop4"))
	Label(name + "_loop1")
	CMPQ(off, end)
	JGE(LabelRef(name + "_done"))
	body(off, 1)
	ADDQ(U32(32), off)
	JMP(LabelRef(name + "_loop1"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

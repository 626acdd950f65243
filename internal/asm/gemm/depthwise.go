package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// depthwise generates dw3s{stride}r{rows}AVX2, the interior of a 3×3
// depthwise convolution row over rows input rows: for j < n (a multiple of
// 8), with x rows ldx floats apart and w holding 3 weights per row,
//
//	acc = +0
//	for r < rows, kx < 3: acc = acc + float32(w[3r+kx] · x[r·ldx + stride·j + kx])
//	out[j] = acc
//
// the order and roundings of the Go loop (no FMA). Stride 2 splits the
// even and odd inputs with VSHUFPS, which leaves the eight outputs of a
// vector in the order 0 1 4 5 2 3 6 7 for all three taps alike; one
// VPERMPD restores it before the store. Every load stays inside
// [x, x + stride·(n−1) + 3) of each row: the kx = 2 taps of stride 2 are
// the odd lanes of the loads at offsets 1 and 9.
func depthwise(stride, rows int) {
	name := fmt.Sprintf("dw3s%dr%dAVX2", stride, rows)
	TEXT(name, NOSPLIT, "func(out *float32, n int, x *float32, ldx int, w *float32)")
	Doc(fmt.Sprintf("%s computes n (a multiple of 8) outputs of a 3×3 depthwise convolution row, stride %d, from %d input rows.", name, stride, rows))
	po := Load(Param("out"), GP64())
	n := Load(Param("n"), GP64())
	px := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	pw := Load(Param("w"), GP64())
	SHLQ(U8(2), ldx)
	wv := make([]VecVirtual, 3*rows)
	for i := range wv {
		wv[i] = YMM()
		VBROADCASTSS(Mem{Base: pw, Disp: 4 * i}, wv[i])
	}
	// row r of x at byte offset disp.
	at := func(r, disp int) Mem {
		switch r {
		case 0:
			return Mem{Base: px, Disp: disp}
		case 1:
			return Mem{Base: px, Index: ldx, Scale: 1, Disp: disp}
		default:
			return Mem{Base: px, Index: ldx, Scale: 2, Disp: disp}
		}
	}
	loop, done := name+"_loop", name+"_done"
	Label(loop)
	TESTQ(n, n)
	JZ(LabelRef(done))
	acc := YMM()
	VXORPS(acc, acc, acc)
	for r := 0; r < rows; r++ {
		if stride == 1 {
			for kx := 0; kx < 3; kx++ {
				t := YMM()
				VMULPS(at(r, 4*kx), wv[3*r+kx], t)
				VADDPS(t, acc, acc)
			}
			continue
		}
		// a = x[0:8], then x[8:16] as memory: evens are kx = 0, odds kx = 1;
		// b = x[1:9], then x[9:17]: odds are kx = 2.
		a, b := YMM(), YMM()
		VMOVUPS(at(r, 0), a)
		VMOVUPS(at(r, 4), b)
		taps := []VecVirtual{YMM(), YMM(), YMM()}
		VSHUFPS(U8(0x88), at(r, 32), a, taps[0])
		VSHUFPS(U8(0xDD), at(r, 32), a, taps[1])
		VSHUFPS(U8(0xDD), at(r, 36), b, taps[2])
		for kx, t := range taps {
			VMULPS(wv[3*r+kx], t, t)
			VADDPS(t, acc, acc)
		}
	}
	if stride == 2 {
		VPERMPD(U8(0xD8), acc, acc)
	}
	VMOVUPS(acc, Mem{Base: po})
	ADDQ(U8(32), po)
	ADDQ(U8(32*stride), px)
	SUBQ(U8(8), n)
	JMP(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()
}

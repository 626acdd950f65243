// Command stats generates the AVX2 and AVX-512 statistics kernels of
// pkg/kernels (stats_amd64.s and stats_stubs_amd64.go) with avo.
//
// Every kernel folds a value x to x' = x + (x − x): finite values are
// unchanged except that −0 becomes +0, and ±Inf and NaN become NaN. VMINPS
// and VMAXPS return their second source operand when either source is NaN,
// so with the accumulator as the second source non-finite lanes leave it
// untouched; a VCMPPS UNORD of x' counts them. The kernels process whole
// vectors only; the Go wrappers in pkg/kernels finish the tail.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const (
	posInf = 0x7f800000
	negInf = 0xff800000
)

func main() {
	ConstraintExpr("!noasm,amd64")
	minMax(avx2)
	minMax(avx512)
	minMaxAccum(avx2)
	minMaxAccum(avx512)
	histPow2(avx2, histPow2Copies)
	histPow2(avx512, histPow2Copies)
	histPow2F32(histPow2Copies)
	Generate()
}

// isa describes one vector width.
type isa struct {
	name  string
	lanes int
	vec   func() VecVirtual
}

var (
	avx2   = isa{name: "AVX2", lanes: 8, vec: YMM}
	avx512 = isa{name: "AVX512", lanes: 16, vec: ZMM}
)

// broadcast fills a new vector with the float32 bit pattern bits.
func broadcast(s isa, bits uint32) VecVirtual {
	g := GP32()
	MOVL(U32(bits), g)
	x := XMM()
	MOVD(g, x)
	v := s.vec()
	VBROADCASTSS(x, v)
	return v
}

// countState counts non-finite lanes: AVX2 subtracts the all-ones compare
// mask from int32 lanes; AVX-512 subtracts an all-ones vector under the
// compare's k mask.
type countState struct {
	s    isa
	cnt  VecVirtual
	ones VecVirtual
}

func newCount(s isa) *countState {
	c := &countState{s: s, cnt: s.vec()}
	VPXORD_or_VPXOR(s, c.cnt)
	if s.lanes == 16 {
		c.ones = s.vec()
		VPTERNLOGD(U8(0xff), c.ones, c.ones, c.ones)
	}
	return c
}

// VPXORD_or_VPXOR zeroes v.
func VPXORD_or_VPXOR(s isa, v VecVirtual) {
	if s.lanes == 16 {
		VPXORD(v, v, v)
	} else {
		VPXOR(v, v, v)
	}
}

// fold turns v into v + (v − v) and counts its NaN lanes.
func (c *countState) fold(v, t VecVirtual) {
	VSUBPS(v, v, t)
	VADDPS(t, v, v)
	if c.s.lanes == 16 {
		k := K()
		VCMPPS(U8(3), v, v, k)
		VPSUBD(c.ones, c.cnt, k, c.cnt)
	} else {
		VCMPPS(U8(3), v, v, t)
		VPSUBD(t, c.cnt, c.cnt)
	}
}

// sum reduces the int32 lanes of the counter into a 64-bit register.
func (c *countState) sum() GPVirtual {
	y := c.cnt
	if c.s.lanes == 16 {
		hi := YMM()
		VEXTRACTI64X4(U8(1), c.cnt, hi)
		lo := YMM()
		VMOVDQU32(c.cnt.AsY(), lo) // the low half
		VPADDD(hi, lo, lo)
		y = lo
	}
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	xl := y.AsX()
	VPADDD(x, xl, x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VPADDD(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	VPADDD(t, x, x)
	r := GP64()
	VMOVD(x, r.As32())
	return r
}

// reduce folds the lanes of v with op (VMINPS or VMAXPS) into lane 0.
func reduce(s isa, v VecVirtual, op func(...Op)) Op {
	y := v
	if s.lanes == 16 {
		hi := YMM()
		VEXTRACTF64X4(U8(1), v, hi)
		op(hi, v.AsY(), hi)
		y = hi
	}
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	op(x, y.AsX(), x)
	t := XMM()
	VMOVHLPS(x, x, t)
	op(t, x, x)
	VSHUFPS(U8(1), x, x, t)
	op(t, x, x)
	return x
}

func minMax(s isa) {
	const unroll = 4
	step := s.lanes * unroll
	TEXT("minMax"+s.name, NOSPLIT, "func(x []float32) (lo, hi float32, nonFinite int)")
	Doc("minMax" + s.name + " is minMax over the first len(x) &^ " + itoa(step-1) + " elements of x.")
	p := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	SHRQ(U8(log2(step)), n)

	inf := broadcast(s, posInf)
	ninf := broadcast(s, negInf)
	var mn, mx [unroll]VecVirtual
	for i := range unroll {
		mn[i], mx[i] = s.vec(), s.vec()
		VMOVUPS(inf, mn[i])
		VMOVUPS(ninf, mx[i])
	}
	c := newCount(s)
	v := [unroll]VecVirtual{}
	t := [unroll]VecVirtual{}
	for i := range unroll {
		v[i], t[i] = s.vec(), s.vec()
	}

	Label("loop" + s.name)
	TESTQ(n, n)
	JZ(LabelRef("done" + s.name))
	for i := range unroll {
		VMOVUPS(Mem{Base: p, Disp: 4 * s.lanes * i}, v[i])
	}
	for i := range unroll {
		c.fold(v[i], t[i])
		VMINPS(mn[i], v[i], mn[i])
		VMAXPS(mx[i], v[i], mx[i])
	}
	ADDQ(U32(4*step), p)
	DECQ(n)
	JMP(LabelRef("loop" + s.name))

	Label("done" + s.name)
	VMINPS(mn[1], mn[0], mn[0])
	VMINPS(mn[3], mn[2], mn[2])
	VMINPS(mn[2], mn[0], mn[0])
	VMAXPS(mx[1], mx[0], mx[0])
	VMAXPS(mx[3], mx[2], mx[2])
	VMAXPS(mx[2], mx[0], mx[0])
	lo := reduce(s, mn[0], VMINPS)
	hi := reduce(s, mx[0], VMAXPS)
	Store(lo.(VecVirtual).AsX(), ReturnIndex(0))
	Store(hi.(VecVirtual).AsX(), ReturnIndex(1))
	Store(c.sum(), ReturnIndex(2))
	VZEROUPPER()
	RET()
}

func minMaxAccum(s isa) {
	TEXT("minMaxAccum"+s.name, NOSPLIT, "func(x, lo, hi []float32) (nonFinite int)")
	Doc("minMaxAccum" + s.name + " is minMaxAccum over the first len(x) &^ " + itoa(s.lanes-1) + " elements of x; lo and hi are at least as long as x.")
	p := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	pl := Load(Param("lo").Base(), GP64())
	ph := Load(Param("hi").Base(), GP64())
	SHRQ(U8(log2(s.lanes)), n)
	c := newCount(s)
	v, t, a, b := s.vec(), s.vec(), s.vec(), s.vec()

	Label("accum" + s.name)
	TESTQ(n, n)
	JZ(LabelRef("accumDone" + s.name))
	VMOVUPS(Mem{Base: p}, v)
	c.fold(v, t)
	VMOVUPS(Mem{Base: pl}, a)
	VMOVUPS(Mem{Base: ph}, b)
	VMINPS(a, v, a)
	VMAXPS(b, v, b)
	VMOVUPS(a, Mem{Base: pl})
	VMOVUPS(b, Mem{Base: ph})
	ADDQ(U32(4*s.lanes), p)
	ADDQ(U32(4*s.lanes), pl)
	ADDQ(U32(4*s.lanes), ph)
	DECQ(n)
	JMP(LabelRef("accum" + s.name))

	Label("accumDone" + s.name)
	Store(c.sum(), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

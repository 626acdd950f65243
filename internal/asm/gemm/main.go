// Command gemm generates the AVX2 and AVX-512 SGEMM micro-kernels of
// pkg/kernels (gemm_amd64.s and gemm_stubs_amd64.go) with avo.
//
// A micro-kernel multiplies a packed A panel by a packed B panel over kc
// steps and writes an mr×nr tile of C:
//
//	for p < kc: for i < mr: for j < nr:
//	    acc[i][j] += a[p*MR+i] · b[p*NR+j]
//	C[i*ldc+j] = acc[i][j]          (accumulate == 0)
//	C[i*ldc+j] += acc[i][j]         (accumulate != 0)
//
// MR (the A panel's row stride) is fixed per instruction set, so one packed
// panel serves every row-count variant: edge panels use the smallest
// variant that covers their rows. The AVX-512 kernels use FMAs with an
// embedded broadcast of the A element, so the 12×32 tile keeps 24
// accumulators and two B vectors in the 32 ZMM registers. The peak kernels
// are chains of independent FMAs that measure the machine's FMA throughput.
package main

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

type isa struct {
	name  string
	mr    int // A panel row stride
	lanes int
	vecs  int // vectors per tile row; NR = lanes·vecs
	vec   func() VecVirtual
	rows  []int
}

var (
	avx512 = isa{name: "AVX512", mr: 12, lanes: 16, vecs: 2, vec: ZMM, rows: []int{12, 8, 4, 2, 1}}
	avx2   = isa{name: "AVX2", mr: 6, lanes: 8, vecs: 2, vec: YMM, rows: []int{6, 4, 2, 1}}
)

func main() {
	ConstraintExpr("!noasm,amd64")
	for _, s := range []isa{avx512, avx2} {
		for _, r := range s.rows {
			kernel(s, r, false, packedB)
		}
		kernel(s, s.mr, true, packedB)
		if s.lanes == 16 {
			for _, src := range []bSource{stridedB, indirectB} {
				for _, r := range s.rows {
					kernel(s, r, false, src)
				}
				kernel(s, s.mr, true, src)
			}
			// Twelve rows by one vector, B rows ldb apart: a short last
			// panel of at most 16 columns (packed, ldb = NR) at half the
			// cost of the full width.
			narrow := s
			narrow.vecs = 1
			kernel(narrow, s.mr, false, stridedB)
			// One row of A read in place (A row stride 1).
			one := s
			one.name, one.mr = s.name+"A1", 1
			kernel(one, 1, false, packedB)
			kernel(one, 1, false, stridedB)
		}
		peak(s)
	}
	for _, stride := range []int{1, 2} {
		for pixels := 1; pixels <= convRowMax; pixels++ {
			convRow(pixels, stride)
		}
	}
	convRowStore()
	epilogue(false)
	epilogue(true)
	axpy()
	maxRow()
	maxPoolS2()
	for _, stride := range []int{1, 2} {
		for rows := 1; rows <= 3; rows++ {
			depthwise(3, stride, rows)
		}
		depthwise(5, stride, 5)
	}
	erf()
	rowMax()
	binary()
	expSub()
	expSub512()
	softmax512()
	sigmoid()
	tanh()
	clip()
	hardSwish()
	layerNorm()
	normRow512()
	Generate()
}

// aPrefetch is how far ahead the full-height in-place kernels prefetch
// their A panel: about twenty steps.
const aPrefetch = 1024

// bSource is where a micro-kernel reads B's steps from.
type bSource int

const (
	packedB   bSource = iota // consecutive NR-float panel rows
	stridedB                 // rows of a row-major B, ldb apart
	indirectB                // rows at per-step offsets from b
)

// kernel generates one micro-kernel. With ep, the kernel (suffix Ep)
// takes bst, rows triples (b, s, t), and relu, and stores
// ((v + b)·s) + t for each final value v of row i, then zeroes results ≤ 0
// when relu is non-zero: pkg/kernels' row epilogue, with the same three
// roundings, applied in registers instead of in a second pass over C.
// With stridedB (suffix S), B is not packed: step p reads NR consecutive
// floats of row p of a row-major B at b + p·ldb. With indirectB (suffix
// I), step p reads them at b + offs[p]: the rows of a convolution's column
// matrix are shifted windows of one padded image. Either way the floats
// are those a packed panel holds, so the result is the same bit for bit.
func kernel(s isa, rows int, ep bool, src bSource) {
	nr := s.lanes * s.vecs
	name := fmt.Sprintf("gemm%dx%d%s", rows, nr, s.name)
	sig := "func(kc int, a, b, c *float32, ldc int, accumulate int)"
	from := "packed panels"
	switch src {
	case stridedB:
		name += "S"
		sig = "func(kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate int)"
		from = "a packed A panel and rows of B"
	case indirectB:
		name += "I"
		sig = "func(kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate int)"
		from = "a packed A panel and rows of B at offsets from b"
	}
	if ep {
		name += "Ep"
		sig = strings.TrimSuffix(sig, ")") + ", bst *float32, relu int)"
	}
	TEXT(name, NOSPLIT, sig)
	Doc(fmt.Sprintf("%s computes a %d×%d tile of C from %s (A row stride %d).", name, rows, nr, from, s.mr))
	lbl := func(l string) string {
		return fmt.Sprintf("%s%d%s%s_%s", s.name, rows, [...]string{"", "s", "i"}[src], map[bool]string{true: "ep"}[ep], l)
	}
	kc := Load(Param("kc"), GP64())
	pa := Load(Param("a"), GP64())
	pb := Load(Param("b"), GP64())
	var ldb, offs Register
	switch src {
	case stridedB:
		ldb = Load(Param("ldb"), GP64())
		SHLQ(U8(2), ldb)
	case indirectB:
		offs = Load(Param("offs"), GP64())
	}
	acc := make([][]VecVirtual, rows)
	for i := range acc {
		acc[i] = make([]VecVirtual, s.vecs)
		for v := range acc[i] {
			acc[i][v] = s.vec()
			zero(s, acc[i][v])
		}
	}
	bv := make([]VecVirtual, s.vecs)
	for v := range bv {
		bv[v] = s.vec()
	}
	var bc VecVirtual
	if s.lanes == 8 {
		bc = s.vec()
	}
	step := func(off int) {
		var row Register
		if src == indirectB {
			row = GP64()
			MOVQ(Mem{Base: offs, Disp: 8 * off}, row)
		}
		for v := range bv {
			switch src {
			case stridedB:
				VMOVUPS(Mem{Base: pb, Disp: 4 * v * s.lanes}, bv[v])
			case indirectB:
				VMOVUPS(Mem{Base: pb, Index: row, Scale: 4, Disp: 4 * v * s.lanes}, bv[v])
			default:
				VMOVUPS(Mem{Base: pb, Disp: 4 * (off*nr + v*s.lanes)}, bv[v])
			}
		}
		if src == stridedB {
			// This row's floats two panels on: B is read in place, a
			// row per step, too many rows apart for the hardware
			// prefetchers to follow when it is not in cache (MobileNetV2
			// at batch 8: 8 % faster with the next panel, 16 % with two).
			PREFETCHT0(Mem{Base: pb, Disp: 8 * nr})
			PREFETCHT0(Mem{Base: pb, Disp: 8*nr + 64})
			ADDQ(ldb, pb)
			if off == 0 && rows == s.mr && s.vecs == 2 {
				// The A panel aPrefetch bytes on, the lines of four
				// steps: these kernels compute 1×1 convolutions, whose
				// weights come from memory once per run, read 48 bytes a
				// step, which the hardware prefetchers follow too late
				// (MobileNetV2's at 8×8: 0.77× the time with the
				// weights out of cache).
				for l := 0; l < 4*4*s.mr; l += 64 {
					PREFETCHT0(Mem{Base: pa, Disp: aPrefetch + l})
				}
			}
		}
		for i := 0; i < rows; i++ {
			am := Mem{Base: pa, Disp: 4 * (off*s.mr + i)}
			if s.lanes == 16 {
				for v := range bv {
					VFMADD231PS_BCST(am, bv[v], acc[i][v])
				}
			} else {
				VBROADCASTSS(am, bc)
				for v := range bv {
					VFMADD231PS(bv[v], bc, acc[i][v])
				}
			}
		}
	}
	stepLoop(lbl, kc, step, func(steps int) {
		ADDQ(U32(4*steps*s.mr), pa)
		switch src {
		case packedB:
			ADDQ(U32(4*steps*nr), pb)
		case indirectB:
			ADDQ(U8(8*steps), offs)
		}
	})

	Label(lbl("store"))
	finish := func(i int) {}
	if ep {
		finish = epilogueRegs(s, rows, acc)
	}
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	accum := Load(Param("accumulate"), GP64())
	TESTQ(accum, accum)
	JZ(LabelRef(lbl("overwrite")))
	row := GP64()
	MOVQ(pc, row)
	for i := 0; i < rows; i++ {
		for v := 0; v < s.vecs; v++ {
			VADDPS(Mem{Base: row, Disp: 4 * v * s.lanes}, acc[i][v], acc[i][v])
		}
		finish(i)
		for v := 0; v < s.vecs; v++ {
			VMOVUPS(acc[i][v], Mem{Base: row, Disp: 4 * v * s.lanes})
		}
		if i+1 < rows {
			ADDQ(ldc, row)
		}
	}
	VZEROUPPER()
	RET()
	Label(lbl("overwrite"))
	for i := 0; i < rows; i++ {
		finish(i)
		for v := 0; v < s.vecs; v++ {
			VMOVUPS(acc[i][v], Mem{Base: pc, Disp: 4 * v * s.lanes})
		}
		if i+1 < rows {
			ADDQ(ldc, pc)
		}
	}
	VZEROUPPER()
	RET()
}

// stepLoop emits a micro-kernel's loop over kc steps: four steps (step(0)
// … step(3)) an iteration, then one at a time, each followed by
// advance(steps), which moves the operand pointers past them, and a jump
// to lbl("store") when none is left.
func stepLoop(lbl func(string) string, kc Register, step func(off int), advance func(steps int)) {
	const unroll = 4
	Label(lbl("loop4"))
	CMPQ(kc, U8(unroll))
	JL(LabelRef(lbl("tail")))
	for u := 0; u < unroll; u++ {
		step(u)
	}
	advance(unroll)
	SUBQ(U8(unroll), kc)
	JMP(LabelRef(lbl("loop4")))
	Label(lbl("tail"))
	TESTQ(kc, kc)
	JZ(LabelRef(lbl("store")))
	step(0)
	advance(1)
	DECQ(kc)
	JMP(LabelRef(lbl("tail")))
}

// epilogueRegs loads the epilogue parameters and returns the step that
// applies row i's epilogue to acc[i] in registers.
func epilogueRegs(s isa, rows int, acc [][]VecVirtual) func(i int) {
	bst := Load(Param("bst"), GP64())
	relu := Load(Param("relu"), GP64())
	z := s.vec()
	zero(s, z)
	return func(i int) {
		b, sc, t := s.vec(), s.vec(), s.vec()
		VBROADCASTSS(Mem{Base: bst, Disp: 12 * i}, b)
		VBROADCASTSS(Mem{Base: bst, Disp: 12*i + 4}, sc)
		VBROADCASTSS(Mem{Base: bst, Disp: 12*i + 8}, t)
		for _, v := range acc[i] {
			VADDPS(b, v, v)
			VMULPS(sc, v, v)
			VADDPS(t, v, v)
		}
		skip := fmt.Sprintf("%s%dep_norelu%d_%d", s.name, rows, i, epLabels)
		epLabels++
		TESTQ(relu, relu)
		JZ(LabelRef(skip))
		for _, v := range acc[i] {
			// v ≤ 0 (false for NaN) becomes +0.
			if s.lanes == 16 {
				k := K()
				VCMPPS(U8(2), z, v, k)
				VPXORD(v, v, k, v)
			} else {
				m := s.vec()
				VCMPPS(U8(2), z, v, m)
				VANDNPS(v, m, v)
			}
		}
		Label(skip)
	}
}

// epLabels numbers the epilogue's labels, which appear twice per row.
var epLabels int

func zero(s isa, v VecVirtual) {
	if s.lanes == 16 {
		VPXORD(v, v, v)
	} else {
		VXORPS(v, v, v)
	}
}

// peak runs n iterations of 12 independent FMA chains (24 FMAs per
// iteration on AVX-512, 12 on AVX2) and stores the chains' sum to out.
func peak(s isa) {
	TEXT("fmaPeak"+s.name, NOSPLIT, "func(n int, out *float32)")
	Doc(fmt.Sprintf("fmaPeak%s runs n iterations of independent FMA chains to measure peak FMA throughput.", s.name))
	n := Load(Param("n"), GP64())
	chains := 12
	if s.lanes == 16 {
		chains = 24
	}
	acc := make([]VecVirtual, chains)
	for i := range acc {
		acc[i] = s.vec()
		zero(s, acc[i])
	}
	x, y := s.vec(), s.vec()
	zero(s, x)
	zero(s, y)
	Label("peak" + s.name + "_loop")
	for i := range acc {
		VFMADD231PS(x, y, acc[i])
	}
	DECQ(n)
	JNZ(LabelRef("peak" + s.name + "_loop"))
	for i := 1; i < chains; i++ {
		VADDPS(acc[i], acc[0], acc[0])
	}
	out := Load(Param("out"), GP64())
	if s.lanes == 16 {
		VMOVSS(acc[0].AsX(), Mem{Base: out})
	} else {
		VMOVSS(acc[0].AsX(), Mem{Base: out})
	}
	VZEROUPPER()
	RET()
}

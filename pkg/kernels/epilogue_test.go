package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEpilogueReluMatchesMax checks the fused Relu against max(v, 0), the
// standalone op's formula, on signed zeros, NaN and infinities.
func TestEpilogueReluMatchesMax(t *testing.T) {
	in := []float32{-1, 0, float32(math.Copysign(0, -1)), 2.5, float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), -1e-45}
	got := append([]float32(nil), in...)
	(&Epilogue{Act: ActRelu}).Apply(got, len(got), 1, len(got))
	for i, v := range in {
		want := max(v, 0)
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Errorf("relu(%g) = %g (bits %#x), max gives %g (bits %#x)", v, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
		}
	}
}

// TestEpilogueRowMatchesReference checks the row epilogue (assembly where
// the build has it) and epilogueRowPortable against epilogueRowGo bit for
// bit on every length up to 70, random values and specials (signed zeros,
// NaN of either sign, infinities, subnormals), with and without Relu,
// bias and scale.
func TestEpilogueRowMatchesReference(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	specials := []float32{0, negZero, float32(math.NaN()), -float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45, 1e-40, -3e38, 3e38}
	r := rand.New(rand.NewPCG(3, 5))
	params := [][3]float32{{negZero, 1, negZero}, {0.5, 1, negZero}, {-0.25, 1.7, 0.3}, {negZero, -2, 1e-3}, {1e-40, 3e38, -1}}
	for n := 0; n <= 70; n++ {
		x := make([]float32, n)
		for i := range x {
			if r.IntN(4) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			} else {
				x[i] = float32(r.NormFloat64() * 3)
			}
		}
		for _, p := range params {
			for _, relu := range []bool{false, true} {
				want := slices.Clone(x)
				epilogueRowGo(want, p[0], p[1], p[2], relu)
				for _, row := range []struct {
					name string
					f    func(r []float32, b, s, t float32, relu bool)
				}{{"epilogueRow", epilogueRow}, {"epilogueRowPortable", epilogueRowPortable}} {
					got := slices.Clone(x)
					row.f(got, p[0], p[1], p[2], relu)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: n=%d b,s,t=%v relu=%v: [%d] = %g (%#x), reference %g (%#x) from %g", row.name, n, p, relu, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), x[i])
						}
					}
				}
			}
		}
	}
}

// TestAxpyMatchesReference checks axpy (assembly where the build has it)
// against axpyGo bit for bit (any NaN matching any NaN) on every length up
// to 70 with specials.
func TestAxpyMatchesReference(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-40, 3e38}
	r := rand.New(rand.NewPCG(8, 9))
	draw := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			if r.IntN(4) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			} else {
				x[i] = float32(r.NormFloat64())
			}
		}
		return x
	}
	for n := 0; n <= 70; n++ {
		for _, w := range []float32{0.37, -2, 0, 1e-39, 3e38} {
			dst, src := draw(n), draw(n+3)
			got, want := slices.Clone(dst), slices.Clone(dst)
			axpy(got, src, w)
			axpyGo(want, src, w)
			for i := range got {
				if !sameResultBits(got[i], want[i]) {
					t.Fatalf("n=%d w=%g: [%d] = %g, reference %g", n, w, i, got[i], want[i])
				}
			}
		}
	}
}

// TestGemmEpilogueMatchesSeparate checks products with a row epilogue
// (bias, scale and shift, Relu), which full tiles apply in the
// micro-kernel's registers, against the plain product followed by the Go
// row epilogue, and products with a residual or a column bias against the
// plain product followed by Apply: bit for bit, with zeros, NaN and
// infinities among the inputs and with k past one cache block (so tiles
// accumulate into C).
func TestGemmEpilogueMatchesSeparate(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	negZero := float32(math.Copysign(0, -1))
	specials := []float32{0, negZero, float32(math.NaN()), float32(math.Inf(1)), -1e-45}
	draw := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			if r.IntN(40) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			} else {
				x[i] = float32(r.NormFloat64())
			}
		}
		return x
	}
	for _, sh := range []struct{ m, n, k int }{{30, 70, 1}, {24, 64, 7}, {37, 100, 300}, {12, 32, 600}} {
		a, b := draw(sh.m*sh.k), draw(sh.k*sh.n)
		bias, scale, shift := draw(sh.m), draw(sh.m), draw(sh.m)
		for _, ep := range []Epilogue{
			{RowBias: bias},
			{RowBias: bias, Act: ActRelu},
			{RowScale: scale, RowShift: shift, Act: ActRelu},
			{RowBias: bias, RowScale: scale, RowShift: shift},
			{Act: ActRelu},
		} {
			want := make([]float32, sh.m*sh.n)
			Sgemm(false, false, sh.m, sh.n, sh.k, 1, a, sh.k, b, sh.n, 0, want, sh.n)
			for i := 0; i < sh.m; i++ {
				bi, s, t := negZero, float32(1), negZero
				if ep.RowBias != nil {
					bi = ep.RowBias[i]
				}
				if ep.RowScale != nil {
					s, t = ep.RowScale[i], ep.RowShift[i]
				}
				epilogueRowGo(want[i*sh.n:(i+1)*sh.n], bi, s, t, ep.Act == ActRelu)
			}
			got := make([]float32, sh.m*sh.n)
			SgemmPacked(1, PackA(false, sh.m, sh.k, 1, a, sh.k), sh.n, false, b, sh.n, 0, got, sh.n, &ep)
			for i := range want {
				if !sameResultBits(got[i], want[i]) {
					t.Fatalf("%v %+v: C[%d,%d] = %g, want %g", sh, ep.Act, i/sh.n, i%sh.n, got[i], want[i])
				}
			}
		}
	}
	// Epilogues the micro-kernels do not apply (a residual, a column
	// bias), which run on whole sweeps of column panels, against the
	// plain product followed by Apply; 700 columns take several column
	// blocks.
	for _, sh := range []struct{ m, n, k int }{{30, 70, 1}, {37, 100, 300}, {30, 700, 300}, {24, 961, 144}} {
		a, b := draw(sh.m*sh.k), draw(sh.k*sh.n)
		bias, res := draw(sh.m), draw(sh.m*sh.n)
		for _, ep := range []Epilogue{
			{RowBias: bias, Residual: res},
			{RowBias: bias, Residual: res, ResidualFirst: true, Act: ActRelu},
			{ColBias: draw(sh.n), Act: ActRelu},
		} {
			want := make([]float32, sh.m*sh.n)
			Sgemm(false, false, sh.m, sh.n, sh.k, 1, a, sh.k, b, sh.n, 0, want, sh.n)
			ep.Apply(want, sh.n, sh.m, sh.n)
			for threads := 1; threads <= 2; threads++ {
				got := make([]float32, sh.m*sh.n)
				SgemmPacked(threads, PackA(false, sh.m, sh.k, 1, a, sh.k), sh.n, false, b, sh.n, 0, got, sh.n, &ep)
				for i := range want {
					if !sameResultBits(got[i], want[i]) {
						t.Fatalf("%v residual %v threads %d: C[%d,%d] = %g, want %g", sh, ep.Residual != nil, threads, i/sh.n, i%sh.n, got[i], want[i])
					}
				}
			}
		}
	}
}

// sameResultBits reports whether a kernel's result is the reference's bit
// for bit, any NaN matching any NaN. Which NaN comes out where two NaNs meet
// (a NaN accumulator plus 0·Inf) is not the reference's to pin: x86 returns
// the first operand's, and Go orders the operands of a commutative float
// operation as register allocation falls (the race detector's build swaps
// them in axpyGo).
func sameResultBits(a, b float32) bool {
	return (a != a && b != b) || math.Float32bits(a) == math.Float32bits(b)
}

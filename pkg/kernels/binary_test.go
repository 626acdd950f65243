package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// binaryInput draws n floats with specials mixed in.
func binaryInput(r *rand.Rand, n int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -3e-39, math.MaxFloat32, 1}
	x := make([]float32, n)
	for i := range x {
		if r.IntN(5) == 0 {
			x[i] = specials[r.IntN(len(specials))]
		} else {
			x[i] = float32(r.NormFloat64() * 3)
		}
	}
	return x
}

// sameResult is bit equality, any NaN matching any NaN (payloads are the
// hardware's business).
func sameResult(a, b float32) bool { return (a != a && b != b) || sameBits(a, b) }

// TestBinaryMatchesScalar checks the vector kernels element by element
// against one IEEE operation, for every length up to past a few unrolled
// blocks, in place and out of place.
func TestBinaryMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, op := range []BinOp{BinAdd, BinSub, BinMul, BinDiv} {
		for n := 0; n <= 70; n++ {
			a, b := binaryInput(r, n+1), binaryInput(r, n+1)
			s := binaryInput(r, 1)[0]
			check := func(what string, got []float32, want func(i int) float32) {
				t.Helper()
				for i := 0; i < n; i++ {
					if w := want(i); !sameResult(got[i], w) {
						t.Fatalf("op %d n=%d %s [%d]: got %g want %g", op, n, what, i, got[i], w)
					}
				}
				if got[n] != 7 {
					t.Fatalf("op %d n=%d %s: wrote past len(o)", op, n, what)
				}
			}
			o := make([]float32, n+1)
			o[n] = 7
			Binary(op, o[:n], a, b)
			check("a op b", o, func(i int) float32 { return op.Apply(a[i], b[i]) })
			BinaryScalar(op, o[:n], a, s, false)
			check("a op s", o, func(i int) float32 { return op.Apply(a[i], s) })
			BinaryScalar(op, o[:n], a, s, true)
			check("s op a", o, func(i int) float32 { return op.Apply(s, a[i]) })
			in := append([]float32(nil), a...)
			in[n] = 7
			Binary(op, in[:n], in, b)
			check("in place", in, func(i int) float32 { return op.Apply(a[i], b[i]) })
		}
	}
}

func BenchmarkBinary(b *testing.B) {
	const n = 64 << 10
	r := rand.New(rand.NewPCG(1, 2))
	x, y, o := binaryInput(r, n), binaryInput(r, n), make([]float32, n)
	for _, op := range []BinOp{BinAdd, BinDiv} {
		b.Run(fmt.Sprintf("op%d", op), func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				Binary(op, o, x, y)
			}
		})
		b.Run(fmt.Sprintf("op%d-go", op), func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				binaryGo(op, o, x, y)
			}
		})
	}
}

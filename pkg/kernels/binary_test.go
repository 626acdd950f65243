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

// TestExpSubRowAccuracy sweeps float32 arguments of e^x over Softmax's
// range [−104, 0] (every 61st bit pattern, so each binade is sampled
// densely) and checks the kernel against math.Exp: relative error
// ≤ 1e-6 where the result is a normal float32, and +0 below.
func TestExpSubRowAccuracy(t *testing.T) {
	var xs []float32
	for b := uint32(0x80000000); b <= math.Float32bits(-104); b += 61 {
		xs = append(xs, math.Float32frombits(b))
	}
	xs = append(xs, 0, -87.33654, -87.4, float32(math.Inf(-1)), float32(math.NaN()))
	got := make([]float32, len(xs))
	sum := expSubRow(got, xs, 0)
	var worst float64
	var want float64
	for i, x := range xs {
		w := math.Exp(float64(x))
		switch {
		case x != x:
			if got[i] == got[i] {
				t.Fatalf("e^NaN = %g", got[i])
			}
			continue
		case w < 0x1p-126:
			if got[i] != 0 && math.Abs(float64(got[i])-w) > 0x1p-126 {
				t.Fatalf("e^%g = %g, want %g or 0", x, got[i], w)
			}
		default:
			rel := math.Abs(float64(got[i])-w) / w
			worst = max(worst, rel)
			if rel > 1e-6 {
				t.Fatalf("e^%g = %g, want %g (relative error %.3g)", x, got[i], w, rel)
			}
		}
		if x == x {
			want += float64(got[i])
		}
	}
	if sum == sum {
		t.Fatalf("sum over a NaN argument = %g, want NaN", sum)
	}
	finite := expSubRow(got[:len(xs)-1], xs[:len(xs)-1], 0)
	if math.Abs(finite-want)/want > 1e-12 {
		t.Fatalf("sum %g, want %g", finite, want)
	}
	t.Logf("%d arguments, worst relative error %.3g", len(xs), worst)
}

// TestSoftmaxRows checks Softmax against a float64 evaluation for row
// lengths around the vector width. The float32 difference v−m carries an
// error of up to |v−m|·2^−24, which e^x turns into a relative error of
// the same size, hence the tolerance.
func TestSoftmaxRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 1; n <= 40; n++ {
		rows := 3
		x := make([]float32, rows*n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 4)
		}
		y := make([]float32, len(x))
		Softmax(x, y, rows, n, false)
		for row := 0; row < rows; row++ {
			xr := x[row*n : (row+1)*n]
			m := math.Inf(-1)
			for _, v := range xr {
				m = max(m, float64(v))
			}
			var s float64
			for _, v := range xr {
				s += math.Exp(float64(v) - m)
			}
			for j, v := range xr {
				want := math.Exp(float64(v)-m) / s
				tol := want * (1e-6 + 0x1p-23*math.Abs(float64(v)-m))
				if got := float64(y[row*n+j]); math.Abs(got-want) > tol {
					t.Fatalf("n=%d row %d [%d]: %g want %g", n, row, j, got, want)
				}
			}
		}
	}
}

// TestLayerNormRows checks LayerNorm against a float64 evaluation for
// row lengths around the vector width, with and without bias, and the
// vector normalisation step bit for bit against the Go loop.
func TestLayerNormRows(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 41; n++ {
		const rows = 3
		x, scale, bias := make([]float32, rows*n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64()*3 + 1)
		}
		for j := range scale {
			scale[j], bias[j] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		for _, b := range [][]float32{bias, nil} {
			y := make([]float32, len(x))
			mean, inv := make([]float32, rows), make([]float32, rows)
			LayerNorm(x, y, rows, n, scale, b, 1e-5, mean, inv)
			for row := 0; row < rows; row++ {
				xr := x[row*n : (row+1)*n]
				var s, s2 float64
				for _, v := range xr {
					s += float64(v)
				}
				mu := s / float64(n)
				for _, v := range xr {
					s2 += (float64(v) - mu) * (float64(v) - mu)
				}
				is := 1 / math.Sqrt(s2/float64(n)+1e-5)
				for j, v := range xr {
					want := (float64(v) - mu) * is * float64(scale[j])
					if b != nil {
						want += float64(b[j])
					}
					if got := float64(y[row*n+j]); math.Abs(got-want) > 1e-6*(1+math.Abs(want)) {
						t.Fatalf("n=%d bias=%v row %d [%d]: %g want %g", n, b != nil, row, j, got, want)
					}
				}
				got := make([]float32, n)
				normRowGo(got, xr, scale, b, mu, is)
				vec := make([]float32, n)
				normRow(vec, xr, scale, b, mu, is)
				for j := range got {
					if !sameResult(got[j], vec[j]) {
						t.Fatalf("n=%d [%d]: vector %g, Go %g", n, j, vec[j], got[j])
					}
				}
			}
		}
	}
}

//go:build !noasm && amd64

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowMaxVariants holds each assembly row maximum the CPU runs to the
// Go loop's value on the whole vectors of every row of rowMaxCases.
func TestRowMaxVariants(t *testing.T) {
	for _, v := range []struct {
		name   string
		ok     bool
		lanes  int
		kernel func(x *float32, n int) float32
	}{
		{"avx2", hasAVX2, 8, rowMaxAVX2},
		{"avx512", hasAVX512, 16, rowMaxAVX512},
	} {
		if !v.ok {
			t.Logf("%s: not run by this CPU", v.name)
			continue
		}
		for _, x := range rowMaxCases() {
			n := len(x) / v.lanes * v.lanes
			if n == 0 {
				continue
			}
			if got, want := v.kernel(&x[0], n), rowMaxGo(x[:n]); got != want {
				t.Fatalf("%s: max of %v = %g, want %g", v.name, x[:n], got, want)
			}
		}
	}
}

// TestExpSubRowAVX512 holds the AVX-512 e^(x−m) row kernel to the AVX2
// one: the same bits element by element over Softmax's range and the
// specials, and the same float64 sum for a length that is a multiple of
// 16.
func TestExpSubRowAVX512(t *testing.T) {
	if !hasAVX512 {
		t.Skip("the CPU runs no AVX-512")
	}
	var xs []float32
	for b := uint32(0x80000000); b <= math.Float32bits(-104); b += 613 {
		xs = append(xs, math.Float32frombits(b))
	}
	xs = append(xs, 0, 3, -87.33654, -87.4, 89, float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()))
	n := len(xs) / 16 * 16
	want, got := make([]float32, n), make([]float32, n)
	for _, m := range []float32{0, -2.5} {
		ws := expSubRowAVX2(&want[0], &xs[0], n, m)
		gs := expSubRowAVX512(&got[0], &xs[0], n, m)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("m=%g: e^(%g−m) = %g, AVX2 gives %g", m, xs[i], got[i], want[i])
			}
		}
		if math.Float64bits(gs) != math.Float64bits(ws) && !(gs != gs && ws != ws) {
			t.Fatalf("m=%g: sum %g, AVX2 gives %g", m, gs, ws)
		}
	}
}

// TestSoftmaxRowsAVX512 holds the one-call AVX-512 Softmax to the
// row-by-row path (rowMax, expSubRow, the product by the inverse sum) bit
// for bit, on rows with NaN, infinities and rows of one value.
func TestSoftmaxRowsAVX512(t *testing.T) {
	if !hasAVX512 {
		t.Skip("the CPU runs no AVX-512")
	}
	r := rand.New(rand.NewPCG(8, 9))
	for _, n := range []int{16, 32, 128, 272} {
		const rows = 6
		x := make([]float32, rows*n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 6)
		}
		x[3] = float32(math.NaN())
		x[n+5] = float32(math.Inf(1))
		x[2*n+1] = float32(math.Inf(-1))
		for i := range n {
			x[3*n+i] = 2.5
			x[4*n+i] = float32(math.Inf(-1))
		}
		got, want := make([]float32, len(x)), make([]float32, len(x))
		if !softmaxRows(x, got, rows, n) {
			t.Fatalf("n=%d: not run", n)
		}
		for row := 0; row < rows; row++ {
			xr, wr := x[row*n:(row+1)*n], want[row*n:(row+1)*n]
			s := expSubRow(wr, xr, rowMax(xr))
			BinaryScalar(BinMul, wr, wr, float32(1/s), false)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("n=%d [%d] (x %g): %g, row by row %g", n, i, x[i], got[i], want[i])
			}
		}
	}
}

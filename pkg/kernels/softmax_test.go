package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// rowMaxCases are rows of every length up to 70 at every offset up to 3,
// holding NaN, −Inf and both zeros among normal values.
func rowMaxCases() [][]float32 {
	r := rand.New(rand.NewPCG(3, 4))
	base := make([]float32, 80)
	for i := range base {
		base[i] = float32(r.NormFloat64() * 5)
	}
	base[5], base[17], base[40] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1))
	zeros := make([]float32, 40)
	zeros[3] = float32(math.Copysign(0, -1))
	nans := []float32{float32(math.NaN()), float32(math.NaN())}
	var rows [][]float32
	for off := 0; off < 4; off++ {
		for n := 0; off+n <= 74 && n <= 70; n++ {
			rows = append(rows, base[off:off+n])
		}
	}
	return append(rows, zeros, nans, zeros[:16])
}

// TestRowMax holds rowMax to the Go loop's value (zeros of either sign
// compare equal: e^(x−m) is the same for both) on every row of
// rowMaxCases.
func TestRowMax(t *testing.T) {
	for _, x := range rowMaxCases() {
		if got, want := rowMax(x), rowMaxGo(x); got != want {
			t.Fatalf("rowMax(%v) = %g, want %g", x, got, want)
		}
	}
}

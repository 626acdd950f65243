package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGoTile checks the portable micro-kernel on its own against a float64
// product of its panels: every row count, k steps from none to a whole
// block, C wider than the tile, overwriting and accumulating. Its sums
// are float32 multiply-adds in step order (fused where the compiler
// fuses them), held to 1e-5·√kc·(1+|C|) as TestSgemmArches holds the
// blocked products; C outside the tile must not change.
func TestGoTile(t *testing.T) {
	const mr, nr = 4, 8
	r := rand.New(rand.NewPCG(11, 12))
	for _, kc := range []int{0, 1, 2, 7, 64, 256} {
		for _, rows := range []int{4, 3, 1} {
			for _, ldc := range []int{nr, 13} {
				for _, accumulate := range []bool{false, true} {
					t.Run(fmt.Sprintf("kc=%d/rows=%d/ldc=%d/acc=%v", kc, rows, ldc, accumulate), func(t *testing.T) {
						a, b := randSlice(r, kc*mr+1), randSlice(r, kc*nr+1)
						c0 := randSlice(r, mr*ldc)
						c := append([]float32(nil), c0...)
						goTile(rows, kc, &a[0], &b[0], &c[0], ldc, accumulate)
						tol := 1e-5 * math.Sqrt(float64(kc))
						for i := range c {
							row, col := i/ldc, i%ldc
							if row >= rows || col >= nr {
								if c[i] != c0[i] {
									t.Fatalf("C[%d,%d] outside the tile changed: %g, was %g", row, col, c[i], c0[i])
								}
								continue
							}
							var want float64
							for p := 0; p < kc; p++ {
								want += float64(a[p*mr+row]) * float64(b[p*nr+col])
							}
							if accumulate {
								want += float64(c0[i])
							}
							if math.Abs(float64(c[i])-want) > tol*(1+math.Abs(want)) {
								t.Fatalf("C[%d,%d] = %g, want %g", row, col, c[i], want)
							}
						}
					})
				}
			}
		}
	}
}

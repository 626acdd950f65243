//go:build !noasm && arm64

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemm8x8Ref is gemm8x8NEON's arithmetic in Go: per element, fused
// multiply-adds in step order from zero, then one rounded addition to C.
// The float64 FMA rounds twice (to float64, then float32), which can
// differ from the one rounding of FMLA in the last bit; the test allows
// one unit in the last place for that.
func gemm8x8Ref(kc int, a, b, c []float32, ldc int, accumulate bool) {
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			var acc float32
			for p := 0; p < kc; p++ {
				acc = float32(math.FMA(float64(a[p*8+i]), float64(b[p*8+j]), float64(acc)))
			}
			if accumulate {
				acc += c[i*ldc+j]
			}
			c[i*ldc+j] = acc
		}
	}
}

func ulpsApart(x, y float32) uint32 {
	a, b := int64(math.Float32bits(x)), int64(math.Float32bits(y))
	if a < 0 != (b < 0) {
		return math.MaxUint32
	}
	d := a - b
	if d < 0 {
		d = -d
	}
	return uint32(d)
}

func TestGemm8x8NEONMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, kc := range []int{0, 1, 2, 7, 64, 256} {
		for _, ldc := range []int{8, 13} {
			for _, accumulate := range []bool{false, true} {
				t.Run(fmt.Sprintf("kc=%d/ldc=%d/acc=%v", kc, ldc, accumulate), func(t *testing.T) {
					a, b := make([]float32, kc*8+1), make([]float32, kc*8+1)
					for i := range a {
						a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
					}
					c := make([]float32, 7*ldc+8+3)
					for i := range c {
						c[i] = float32(r.NormFloat64())
					}
					want := append([]float32(nil), c...)
					gemm8x8Ref(kc, a, b, want, ldc, accumulate)
					got := append([]float32(nil), c...)
					gemm8x8NEON(kc, &a[0], &b[0], &got[0], ldc, flag(accumulate))
					for i := range got {
						if i%ldc >= 8 || i >= 8*ldc {
							if got[i] != c[i] {
								t.Fatalf("C[%d] outside the tile changed: %g, was %g", i, got[i], c[i])
							}
							continue
						}
						if ulpsApart(got[i], want[i]) > 1 {
							t.Fatalf("C[%d,%d] = %g, want %g", i/ldc, i%ldc, got[i], want[i])
						}
					}
				})
			}
		}
	}
}

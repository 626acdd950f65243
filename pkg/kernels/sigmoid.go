package kernels

import "math"

// The constants of Sigmoid32's e^x: the range reduction x = k·ln2 + r with
// ln2 split in two (expC1 has few bits, so k·expC1 is exact for |k| ≤ 2^15)
// and e^r = 1 + r + r²·P(r) on |r| ≤ ln2/2 with the degree-5 minimax P of
// Cephes' expf; expSubRowAVX2 uses the same (internal/asm/gemm/exp.go).
const (
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	// expLo and expHi bound e^x: below expLo it is under the smallest
	// normal float32 and taken as 0; above expHi it would overflow.
	expLo = -87.33654
	expHi = 88.3762626
)

// expP are P's coefficients, highest degree first.
var expP = [6]float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}

// Sigmoid32 is the logistic function 1/(1 + e^−v) in float32 steps, the
// loop that Sigmoid's AVX2 kernel computes lane by lane, bit for bit:
//
//	x = min(−v, expHi)
//	e = 0                                           when x < expLo, else
//	    k = roundToEven(x·log2e)
//	    r = (x − k·expC1) − k·expC2
//	    p = ((((P0·r + P1)·r + P2)·r + P3)·r + P4)·r + P5
//	    e = ((p·r² + r) + 1)·2^k
//	σ = 1/(1 + e)
//
// with every operation rounded to float32 (the explicit conversions keep
// the compiler from fusing a product and an add). e is within a few ulp
// of e^x, σ within 3e-7 relative error of the exact logistic for v above
// −87 and within 1e-38 absolutely below it (exact: 1 for v > 87.3, where
// e^−v is under the normal range). NaN stays NaN.
func Sigmoid32(v float32) float32 {
	x := -v
	if x != x {
		return x
	}
	x = min(x, expHi)
	if x < expLo {
		return 1
	}
	e := expReduced(x)
	return 1 / (1 + e)
}

// expReduced is e^x for expLo ≤ x ≤ expHi by the steps Sigmoid32 lists
// (range reduction, P, scaling by 2^k), each rounded to float32.
func expReduced(x float32) float32 {
	k := float32(math.RoundToEven(float64(float32(x * expLog2e))))
	r := x - float32(k*expC1)
	r -= float32(k * expC2)
	p := expP[0]
	for _, c := range expP[1:] {
		p = float32(p*r) + c
	}
	p = float32(p*float32(r*r)) + r
	p++
	return float32(p * math.Float32frombits(uint32(int32(k)+127)<<23))
}

// sigmoidGo is Sigmoid element by element in Go (silu: SiLU).
func sigmoidGo(dst, src []float32, silu bool) {
	src = src[:len(dst)]
	for i, v := range src {
		s := Sigmoid32(v)
		if silu {
			s = float32(v * s)
		}
		dst[i] = s
	}
}

// Sigmoid sets dst[i] = Sigmoid32(src[i]) for i < len(dst); src must be
// at least as long, and may be dst. Every element goes through the same
// code whatever the length and offset of the call, so results do not
// depend on how a row is split.
func Sigmoid(dst, src []float32) { sigmoidRow(dst, src[:len(dst)], false) }

// SiLU sets dst[i] = float32(src[i] · Sigmoid32(src[i])): a Sigmoid whose
// output is multiplied by its input, as Sigmoid then Mul compute it.
func SiLU(dst, src []float32) { sigmoidRow(dst, src[:len(dst)], true) }

package kernels

import "math"

// The constants of Tanh32: below tanhSmall, tanh is x + x³·Q(x²) with the
// degree-4 minimax Q of Cephes' tanhf; from tanhSmall on it is
// 1 − 2/(e^{2x} + 1), with x clamped at tanhClamp, where tanh already
// rounds to 1 in float32.
const (
	tanhSmall = 0.625
	tanhClamp = 9
)

// tanhQ are Q's coefficients, highest degree first.
var tanhQ = [5]float32{-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1}

// Tanh32 is the hyperbolic tangent in float32 steps, the loop that Tanh's
// AVX2 kernel computes lane by lane, bit for bit:
//
//	a = |v|
//	t = ((Q(z)·z)·a) + a,  z = a·a,  Q by Horner   when a < tanhSmall
//	t = 1 − 2/(e + 1),  e = e^{2·min(a, tanhClamp)}  otherwise (expReduced)
//	tanh = t with v's sign
//
// every operation rounded to float32. It is within 2 ulp of the exact
// tanh (TestTanhRow checks it; 1.24 ulp is the largest error it meets); ±0 keep their sign, ±Inf give ±1, NaN
// stays NaN.
func Tanh32(v float32) float32 {
	const sign = 1 << 31
	a := math.Float32frombits(math.Float32bits(v) &^ sign)
	if a != a {
		return v
	}
	var t float32
	if a < tanhSmall {
		z := float32(a * a)
		q := tanhQ[0]
		for _, c := range tanhQ[1:] {
			q = float32(q*z) + c
		}
		t = float32(float32(q*z)*a) + a
	} else {
		e := expReduced(2 * min(a, tanhClamp))
		t = 1 - 2/(e+1)
	}
	return math.Float32frombits(math.Float32bits(t) | math.Float32bits(v)&sign)
}

// tanhGo is Tanh element by element in Go.
func tanhGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = Tanh32(v)
	}
}

// Tanh sets dst[i] = Tanh32(src[i]) for i < len(dst); src must be at
// least as long, and may be dst. Every element goes through the same code
// whatever the length and offset of the call.
func Tanh(dst, src []float32) { tanhRow(dst, src[:len(dst)]) }

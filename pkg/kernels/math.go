package kernels

import "math"

var float32negInf = float32(math.Inf(-1))

// Softmax normalises each of the rows of x (rows × n) into y:
//
//	for r < rows: m = max_j x[r,j]; y[r,j] = exp(x[r,j]−m) / Σ_j exp(x[r,j]−m)
//
// With log set it computes log-softmax: y[r,j] = x[r,j] − m − log Σ_j exp(x[r,j]−m).
func Softmax(x, y []float32, rows, n int, log bool) {
	if !log && softmaxRows(x, y, rows, n) {
		return
	}
	for r := 0; r < rows; r++ {
		xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
		m := rowMax(xr)
		var s float64
		if log {
			for _, v := range xr {
				s += math.Exp(float64(v - m))
			}
			ls := float32(math.Log(s))
			for j, v := range xr {
				yr[j] = v - m - ls
			}
			continue
		}
		s = expSubRow(yr, xr, m)
		BinaryScalar(BinMul, yr, yr, float32(1/s), false)
	}
}

// rowMaxGo is the largest of x and −Inf, NaN skipped.
func rowMaxGo(x []float32) float32 {
	m := float32negInf
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// expSubRowGo sets dst[i] = e^(src[i]−m) and returns their sum in float64.
func expSubRowGo(dst, src []float32, m float32) float64 {
	var s float64
	for j, v := range src[:len(dst)] {
		e := float32(math.Exp(float64(v - m)))
		dst[j] = e
		s += float64(e)
	}
	return s
}

// LayerNorm normalises each row of x (rows × n) with scale and bias (each
// of length n, bias may be nil) into y, and stores each row's mean and
// inverse standard deviation in mean and invStd when they are non-nil:
//
//	μ = Σ_j x[r,j]/n;  σ² = Σ_j (x[r,j]−μ)²/n
//	y[r,j] = (x[r,j]−μ)/√(σ²+eps) · scale[j] + bias[j]
func LayerNorm(x, y []float32, rows, n int, scale, bias []float32, eps float32, mean, invStd []float32) {
	for r := 0; r < rows; r++ {
		xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
		mu := sumRow(xr) / float64(n)
		inv := 1 / math.Sqrt(sqDevRow(xr, mu)/float64(n)+float64(eps))
		var br []float32
		if bias != nil {
			br = bias[:n]
		}
		normRow(yr, xr, scale[:n], br, mu, inv)
		if mean != nil {
			mean[r] = float32(mu)
		}
		if invStd != nil {
			invStd[r] = float32(inv)
		}
	}
}

// Sum is Σ x[j] in float64, summed as LayerNorm sums a row: in eight
// float64 lanes where the kernel set has AVX2, in order otherwise.
func Sum(x []float32) float64 { return sumRow(x) }

// sumRowGo is Σ x[j] in float64.
func sumRowGo(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}

// sqDevRowGo is Σ (x[j] − mu)² in float64.
func sqDevRowGo(x []float32, mu float64) float64 {
	var s float64
	for _, v := range x {
		d := float64(v) - mu
		s += d * d
	}
	return s
}

// normRowGo sets y[j] = float32((x[j] − mu)·inv)·scale[j] + bias[j], with
// no add when bias is nil.
func normRowGo(y, x, scale, bias []float32, mu, inv float64) {
	x, scale = x[:len(y)], scale[:len(y)]
	if bias == nil {
		for j, v := range x {
			y[j] = float32(float32((float64(v)-mu)*inv) * scale[j])
		}
		return
	}
	bias = bias[:len(y)]
	for j, v := range x {
		y[j] = float32(float32((float64(v)-mu)*inv)*scale[j]) + bias[j] // no FMA
	}
}

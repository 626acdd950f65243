//go:build noasm || !amd64

package kernels

func erfRow(dst, src []float32) { erfGo(dst, src) }

func expSubRow(dst, src []float32, m float32) float64 { return expSubRowGo(dst, src, m) }

func sumRow(x []float32) float64 { return sumRowGo(x) }

func sqDevRow(x []float32, mu float64) float64 { return sqDevRowGo(x, mu) }

func normRow(y, x, scale, bias []float32, mu, inv float64) { normRowGo(y, x, scale, bias, mu, inv) }

const haveMaxPoolS2 = false

func maxPoolS2Rows(x []float32, at, ldx, rows, taps, n int, y []float32, count, xstep, ystep int) bool {
	return false
}

func sigmoidRow(dst, src []float32, silu bool) { sigmoidGo(dst, src, silu) }

func tanhRow(dst, src []float32) { tanhGo(dst, src) }

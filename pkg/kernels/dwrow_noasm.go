//go:build noasm || !(amd64 || arm64)

package kernels

func dwRow(out, x []float32, ldx, nr, size, stride int, w []float32) {
	dwRowGo(out, x, ldx, nr, size, stride, w)
}

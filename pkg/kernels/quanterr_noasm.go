//go:build noasm || !(amd64 || arm64)

package kernels

func quantSqErrs(x, inv, scale, lo, hi, out []float32) int {
	clear(out)
	return 0
}

//go:build noasm || !amd64

package kernels

// depthwise3x3AVX512 reports false: without assembly every channel takes
// depthwise3x3's padded rows.
func depthwise3x3AVX512(g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) bool {
	return false
}

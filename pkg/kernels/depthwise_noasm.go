//go:build noasm || !amd64

package kernels

// depthwiseAVX512 reports false: without assembly every channel takes
// the Go loops.
func depthwiseAVX512(size int, g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) bool {
	return false
}

//go:build !noasm && amd64

package kernels

// hardSwishVec computes the first len(dst) &^ 7 elements of
// HardSwishChain in AVX2 and returns how many; the caller has checked the
// bounds (clipVecOK).
func hardSwishVec(dst, src []float32, p HardSwishParams) int {
	n := len(dst) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	hardSwishRowAVX2(&dst[0], &src[0], n, p.Shift, p.Lo, p.Hi, p.D, p.Div)
	return n
}

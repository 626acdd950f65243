//go:build !noasm && arm64

package kernels

// quantSqErrsNEON is QuantSqErrs over the first len(x) &^ 7 elements of x
// for every candidate k < len(out); inv, scale, lo and hi are at least as
// long as out. See internal/asm/neon/quanterr.go.
//
//go:noescape
func quantSqErrsNEON(x, inv, scale, lo, hi, out []float32)

// quantSqErrs runs the kernel over the whole vectors of x, writing out, and
// returns how many elements it covered (0 under the portable set, out
// zeroed).
func quantSqErrs(x, inv, scale, lo, hi, out []float32) int {
	if !hasNEON || len(x) < 8 || len(out) == 0 {
		clear(out)
		return 0
	}
	k := len(out)
	_, _, _, _ = inv[k-1], scale[k-1], lo[k-1], hi[k-1]
	n := len(x) &^ 7
	quantSqErrsNEON(x[:n], inv, scale, lo, hi, out)
	return n
}

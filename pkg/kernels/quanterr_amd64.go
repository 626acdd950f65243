//go:build !noasm && amd64

package kernels

import "golang.org/x/sys/cpu"

//go:generate sh -c "cd ../../internal/asm/quanterr && go run . -out ../../../pkg/kernels/quanterr_amd64.s -stubs ../../../pkg/kernels/quanterr_stubs_amd64.go -pkg kernels"

var hasFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// quantSqErrs runs the kernel over the whole vectors of x, writing out, and
// returns how many elements it covered (0 without AVX2 and FMA, out
// zeroed).
func quantSqErrs(x, inv, scale, lo, hi, out []float32) int {
	if !hasFMA || len(x) < 8 {
		clear(out)
		return 0
	}
	n := len(x) &^ 7
	quantSqErrsAVX2(x[:n], inv, scale, lo, hi, out)
	return n
}

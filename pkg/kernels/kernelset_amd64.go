//go:build !noasm && amd64

package kernels

import "golang.org/x/sys/cpu"

// kernelSets are this build's sets, narrowest first.
var kernelSets = []string{SetPortable, SetAVX2, SetAVX512}

// availableKernelLevel is the widest set this CPU runs: AVX-512 needs the
// foundation and vector-length extensions (the kernels use 256-bit forms
// of AVX-512 instructions), AVX2 needs FMA as well.
func availableKernelLevel() int {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return 2
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return 1
	}
	return 0
}

// The assembly families the chosen set allows.
var (
	hasAVX512 = kernelLevel >= 2
	hasAVX2   = kernelLevel >= 1
)

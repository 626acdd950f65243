//go:build !noasm && arm64

package kernels

// kernelSets are this build's sets, narrowest first.
var kernelSets = []string{SetPortable, SetNEON}

// availableKernelLevel is NEON: every arm64 CPU has Advanced SIMD.
func availableKernelLevel() int { return 1 }

// hasNEON says whether the chosen set allows the NEON kernels.
var hasNEON = kernelLevel >= 1

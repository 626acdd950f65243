//go:build noasm || !(amd64 || arm64)

package kernels

// kernelSets are this build's sets: it has no assembly.
var kernelSets = []string{SetPortable}

// availableKernelLevel is portable: this build has no assembly.
func availableKernelLevel() int { return 0 }

//go:build noasm || !amd64

package kernels

// availableKernelLevel is portable: this build has no assembly.
func availableKernelLevel() int { return 0 }

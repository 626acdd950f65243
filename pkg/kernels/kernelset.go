package kernels

import (
	"fmt"
	"os"
	"strings"
)

// KernelsEnv names the environment variable that narrows the kernel set a
// process runs: COREAIQ_KERNELS=avx2 on an AVX-512 machine runs the AVX2
// kernels, =portable the Go kernels every platform has. It can only narrow
// (a set the CPU or the build lacks is an error), and is read once at start.
const KernelsEnv = "COREAIQ_KERNELS"

// The kernel sets. portable is the Go code every build has (the noasm
// build and every GOARCH without assembly run only it); amd64 adds avx2
// and avx512, arm64 neon. Each build lists its own in kernelSets,
// narrowest first.
const (
	SetPortable = "portable"
	SetAVX2     = "avx2"
	SetAVX512   = "avx512"
	SetNEON     = "neon"
)

// chooseKernelLevel returns the index in sets (a build's kernelSets) of
// the set to run: the widest the CPU and the build offer (available, an
// index), or the one named by request when that is no wider. An unknown
// or unavailable request leaves the widest and returns an error saying
// why.
func chooseKernelLevel(request string, sets []string, available int) (int, error) {
	request = strings.ToLower(strings.TrimSpace(request))
	if request == "" {
		return available, nil
	}
	for i, s := range sets {
		if s != request {
			continue
		}
		if i > available {
			return available, fmt.Errorf("%s=%s: this CPU and build run at most %q", KernelsEnv, request, sets[available])
		}
		return i, nil
	}
	return available, fmt.Errorf("%s=%s: unknown kernel set for this build (want one of %s)", KernelsEnv, request, strings.Join(sets, ", "))
}

var kernelLevel, kernelLevelErr = chooseKernelLevel(os.Getenv(KernelsEnv), kernelSets, availableKernelLevel())

// ActiveSet names the kernel set this process runs: avx512, avx2, neon or
// portable.
func ActiveSet() string { return kernelSets[kernelLevel] }

// KernelSetError is non-nil when KernelsEnv asked for a set that does not
// exist or that this CPU and build cannot run; the widest set runs then.
func KernelSetError() error { return kernelLevelErr }

//go:build noasm || !(amd64 || arm64)

package kernels

// gemmArches lists the micro-kernel families this build runs.
func gemmArches() []*gemmArch { return []*gemmArch{goArch} }

var activeGemm = goArch

//go:build noasm || !(amd64 || arm64)

package kernels

func hardSwishVec(dst, src []float32, p HardSwishParams) int { return 0 }

//go:build noasm || !amd64

package kernels

func adaRoundUpdate(_, _, _, _, _, _, _, _, _ []float32, _ AdaRoundStep) int { return 0 }

func adaRoundDelta(_, _, _, _, _, _, _ []float32, _, _ float32) int { return 0 }

//go:build noasm || !amd64

package kernels

func rowMax(x []float32) float32 { return rowMaxGo(x) }

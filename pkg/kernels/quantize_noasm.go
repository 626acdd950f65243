//go:build noasm || !amd64

package kernels

func quantizeU8([]uint8, []float32, float32, float32, float32, float32) int { return 0 }

func quantizeI8([]int8, []float32, float32, float32, float32, float32) int { return 0 }

func dequantizeU8([]float32, []uint8, float32, int32) int { return 0 }

func dequantizeI8([]float32, []int8, float32, int32) int { return 0 }

func roundTrip([]float32, []float32, float32, float32, float32) int { return 0 }

func quantizeColsU8([]uint8, []float32, []float32, float32, float32) int { return 0 }

func quantizeColsI8([]int8, []float32, []float32, float32, float32) int { return 0 }

func dequantizeColsU8([]float32, []uint8, []float32) int { return 0 }

func dequantizeColsI8([]float32, []int8, []float32) int { return 0 }

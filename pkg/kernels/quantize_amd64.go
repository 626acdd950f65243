//go:build !noasm && amd64

package kernels

//go:generate sh -c "cd ../../internal/asm/quantize && go run . -out ../../../pkg/kernels/quantize_amd64.s -stubs ../../../pkg/kernels/quantize_stubs_amd64.go -pkg kernels"

// avx2Vectors is how many of n elements the AVX2 kernels of 8 lanes
// (quantization here, AdaRound's steps) cover:
// whole vectors of eight, none without AVX2.
func avx2Vectors(n int) int {
	if !hasAVX2 {
		return 0
	}
	return n &^ 7
}

func quantizeU8(dst []uint8, x []float32, scale, lo, hi, zp float32) int {
	n := avx2Vectors(min(len(x), len(dst)))
	if n > 0 {
		quantizeU8AVX2(dst[:n], x[:n], scale, lo, hi, zp)
	}
	return n
}

func quantizeI8(dst []int8, x []float32, scale, lo, hi, zp float32) int {
	n := avx2Vectors(min(len(x), len(dst)))
	if n > 0 {
		quantizeI8AVX2(dst[:n], x[:n], scale, lo, hi, zp)
	}
	return n
}

func dequantizeU8(y []float32, codes []uint8, scale float32, zp int32) int {
	n := avx2Vectors(min(len(y), len(codes)))
	if n > 0 {
		dequantizeU8AVX2(y[:n], codes[:n], scale, zp)
	}
	return n
}

func dequantizeI8(y []float32, codes []int8, scale float32, zp int32) int {
	n := avx2Vectors(min(len(y), len(codes)))
	if n > 0 {
		dequantizeI8AVX2(y[:n], codes[:n], scale, zp)
	}
	return n
}

func roundTrip(y, x []float32, scale, lo, hi float32) int {
	n := avx2Vectors(min(len(x), len(y)))
	if n > 0 {
		roundTripAVX2(y[:n], x[:n], scale, lo, hi)
	}
	return n
}

func quantizeColsU8(dst []uint8, x, scales []float32, lo, hi float32) int {
	n := avx2Vectors(min(len(x), len(dst), len(scales)))
	if n > 0 {
		quantizeColsU8AVX2(dst[:n], x[:n], scales[:n], lo, hi)
	}
	return n
}

func quantizeColsI8(dst []int8, x, scales []float32, lo, hi float32) int {
	n := avx2Vectors(min(len(x), len(dst), len(scales)))
	if n > 0 {
		quantizeColsI8AVX2(dst[:n], x[:n], scales[:n], lo, hi)
	}
	return n
}

func dequantizeColsU8(y []float32, codes []uint8, scales []float32) int {
	n := avx2Vectors(min(len(y), len(codes), len(scales)))
	if n > 0 {
		dequantizeColsU8AVX2(y[:n], codes[:n], scales[:n])
	}
	return n
}

func dequantizeColsI8(y []float32, codes []int8, scales []float32) int {
	n := avx2Vectors(min(len(y), len(codes), len(scales)))
	if n > 0 {
		dequantizeColsI8AVX2(y[:n], codes[:n], scales[:n])
	}
	return n
}

package runtime

import (
	"fmt"
	"sync"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// contribOps are the ops outside the default domain that the engine runs,
// by domain and op type: those coreaiq writes.
var contribOps = map[string]map[string]func(*builder) (kernel, error){
	"com.microsoft": {"MatMulNBits": buildMatMulNBits},
}

// buildMatMulNBits returns ONNX Runtime's com.microsoft MatMulNBits:
// Y = A · W (+ bias) with W [K, N] stored as B uint8 [N, ⌈K/block⌉,
// block·bits/8] (codes low bits first), scales [N, ⌈K/block⌉], and zero
// points packed like B (uint8) or one per block in the scales' type; 2^(bits−1)
// when absent. W is dequantized as (q − zero point)·scale in float32 — what
// DequantizeLinear computes and what ONNX Runtime's kernels compute before
// their float GEMM — once for a constant B, and multiplied by the engine's
// MatMul. g_idx (input 4, a deprecated act-order permutation) is refused.
func buildMatMulNBits(b *builder) (kernel, error) {
	k, n := int(b.int("K", 0)), int(b.int("N", 0))
	bits, block := int(b.int("bits", 4)), int(b.int("block_size", 0))
	switch {
	case k <= 0 || n <= 0:
		return nil, fmt.Errorf("attributes K = %d and N = %d must be positive", k, n)
	case bits != 2 && bits != 4 && bits != 8:
		return nil, unsupportedf("MatMulNBits with %d bits is not supported (2, 4 or 8)", bits)
	case block < 16 || block&(block-1) != 0:
		return nil, fmt.Errorf("block_size %d is not a power of two ≥ 16", block)
	}
	if len(b.n.Inputs) > 4 && b.n.Inputs[4] != nil {
		return nil, unsupportedf("MatMulNBits with g_idx is not supported")
	}
	var (
		mu     sync.Mutex
		srcB   *tensor.Tensor
		weight *tensor.Tensor
	)
	cache := b.c.newPackCache()
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		if len(in) < 3 || in[1] == nil || in[2] == nil {
			return nil, fmt.Errorf("MatMulNBits needs A, B and scales")
		}
		mu.Lock()
		w := weight
		if srcB != in[1] {
			var zp *tensor.Tensor
			if len(in) > 3 {
				zp = in[3]
			}
			data, err := DequantizeNBits(k, n, bits, block, in[1], in[2], zp)
			if err != nil {
				mu.Unlock()
				return nil, err
			}
			w = tensor.FromFloat32(data, k, n)
			srcB, weight = in[1], w
		}
		mu.Unlock()
		a := in[0]
		if a.DType != tensor.Float {
			return nil, fmt.Errorf("input A is %s, not float", a.DType)
		}
		out, err := matMul(rc, []*tensor.Tensor{a, w}, cache)
		if err != nil {
			return nil, err
		}
		if len(in) > 5 && in[5] != nil {
			bias, err := floats(in[5], "bias")
			if err != nil {
				return nil, err
			}
			if len(bias) != n {
				return nil, fmt.Errorf("bias has %d values for N = %d", len(bias), n)
			}
			y := out[0].Float32s()
			for i := range y {
				y[i] += bias[i%n]
			}
		}
		return out, nil
	}, nil
}

// DequantizeNBits returns the [K, N] float32 weight of a MatMulNBits node
// from its B, scales and (optional) zero points, laid out as
// buildMatMulNBits describes.
func DequantizeNBits(k, n, bits, block int, b, scales, zeroPoints *tensor.Tensor) ([]float32, error) {
	kb := (k + block - 1) / block
	blob := block * bits / 8
	bd, ok := b.Data.([]uint8)
	if !ok || len(bd) != n*kb*blob {
		return nil, fmt.Errorf("input B is %s%v, want uint8 [%d, %d, %d]", b.DType, b.Shape, n, kb, blob)
	}
	sc, err := scales.AsFloat32()
	if err != nil || len(sc) != n*kb {
		return nil, fmt.Errorf("scales are %s%v, want [%d, %d] of the float type", scales.DType, scales.Shape, n, kb)
	}
	mask := uint8(1<<bits - 1)
	perByte := 8 / bits
	zpOf := func(int) float32 { return float32(int(1) << (bits - 1)) }
	if zeroPoints != nil {
		switch zd := zeroPoints.Data.(type) {
		case []uint8:
			row := (kb*bits + 7) / 8
			if len(zd) != n*row {
				return nil, fmt.Errorf("zero_points are uint8%v, want %d bytes per row of %d blocks", zeroPoints.Shape, row, kb)
			}
			zpOf = func(i int) float32 {
				r, j := i/kb, i%kb
				return float32(zd[r*row+j/perByte] >> (bits * (j % perByte)) & mask)
			}
		default:
			zf, err := zeroPoints.AsFloat32()
			if err != nil || len(zf) != n*kb {
				return nil, fmt.Errorf("zero_points are %s%v, want uint8 or [%d, %d] of the scales' type", zeroPoints.DType, zeroPoints.Shape, n, kb)
			}
			zpOf = func(i int) float32 { return zf[i] }
		}
	}
	w := make([]float32, k*n)
	for col := range n {
		for j := range kb {
			g := col*kb + j
			s, z := sc[g], zpOf(g)
			codes := bd[g*blob : (g+1)*blob]
			for i := range min(block, k-j*block) {
				q := codes[i/perByte] >> (bits * (i % perByte)) & mask
				w[(j*block+i)*n+col] = (float32(q) - z) * s
			}
		}
	}
	return w, nil
}

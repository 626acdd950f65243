package runtime

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// buildRotaryEmbedding builds RotaryEmbedding: in each head's vector of
// each token, the first rotary_embedding_dim values (all of them when it
// is 0) turn as pairs by the angles of the token's position, whose cosines
// and sines are a row of cos_cache and sin_cache; the other values are
// copied. A pair is (x[i], x[i+d/2]), or (x[2i], x[2i+1]) when interleaved:
//
//	y₁ = cos·x₁ − sin·x₂,  y₂ = sin·x₁ + cos·x₂
//
// X is [batch, heads, sequence, head_size] (num_heads is not read), or
// [batch, sequence, hidden] with num_heads heads of hidden/num_heads
// values. The row of token (b, s) is position_ids[b, s] of caches
// [positions, d/2], or (b, s) of caches [batch, sequence, d/2] when
// position_ids is absent. A batch axis of 1 in position_ids or the caches
// serves every batch entry and a cache row may be longer than d/2 (its
// first d/2 values are the angles), as in ONNX's reference implementation,
// which broadcasts and slices them. Tokens are split over the run's
// threads.
func buildRotaryEmbedding(b *builder) (kernel, error) {
	interleaved := b.int("interleaved", 0) != 0
	numHeads := int(b.int("num_heads", 0))
	rotaryDim := int(b.int("rotary_embedding_dim", 0))
	if numHeads < 0 {
		return nil, fmt.Errorf("num_heads %d is negative", numHeads)
	}
	if rotaryDim < 0 || rotaryDim%2 != 0 {
		return nil, fmt.Errorf("rotary_embedding_dim %d is not a non-negative even number", rotaryDim)
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		cosCache, err := floats(in[1], "cos_cache")
		if err != nil {
			return nil, err
		}
		sinCache, err := floats(in[2], "sin_cache")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		var batch, seq, heads, headSize int
		switch {
		case len(xs) == 4:
			batch, heads, seq, headSize = xs[0], xs[1], xs[2], xs[3]
		case len(xs) == 3 && numHeads == 0:
			return nil, fmt.Errorf("input X %v is 3-D and num_heads is not set", xs)
		case len(xs) == 3 && xs[2]%numHeads != 0:
			return nil, fmt.Errorf("num_heads %d does not divide the hidden size of input X %v", numHeads, xs)
		case len(xs) == 3:
			batch, seq, heads, headSize = xs[0], xs[1], numHeads, xs[2]/numHeads
		default:
			return nil, fmt.Errorf("input X %v is neither 3-D nor 4-D", xs)
		}
		dim := rotaryDim
		if dim == 0 {
			dim = headSize
		}
		if dim > headSize || dim%2 != 0 {
			return nil, fmt.Errorf("cannot rotate %d values of heads of %d", dim, headSize)
		}
		half := dim / 2
		if !slices.Equal(in[1].Shape, in[2].Shape) {
			return nil, fmt.Errorf("cos_cache %v and sin_cache %v differ in shape", in[1].Shape, in[2].Shape)
		}
		var positions *tensor.Tensor
		if len(in) > 3 {
			positions = in[3]
		}
		rows, width, err := rotaryRows(positions, in[1].Shape, batch, seq)
		if err != nil {
			return nil, err
		}
		if width < half {
			return nil, fmt.Errorf("cos_cache %v has %d values per position; rotating %d values takes %d", in[1].Shape, width, dim, half)
		}
		// headAt is the offset of head h's vector of token (bi, s) in X.
		headAt := func(bi, s, h int) int { return ((bi*seq+s)*heads + h) * headSize }
		if len(xs) == 4 {
			headAt = func(bi, s, h int) int { return ((bi*heads+h)*seq + s) * headSize }
		}
		out := rc.newFloatOut(xs...)
		y := out.Float32s()
		kernels.Parallel(rc.threads, batch*seq, max(1, parGrain/max(1, heads*headSize)), func(lo, hi int) {
			for t := lo; t < hi; t++ {
				r := rows[t] * width
				cos, sin := cosCache[r:r+half], sinCache[r:r+half]
				for h := range heads {
					o := headAt(t/seq, t%seq, h)
					rotateHead(y[o:o+headSize], x[o:o+headSize], cos, sin, interleaved)
				}
			}
		})
		return one(out), nil
	}, nil
}

// rotaryRows returns the cache row of each token of a [batch, seq] input
// (b·seq + s for token (b, s)) and the length of a cache row, for caches
// of shape cacheShape looked up by position_ids (positions, nil when the
// input is absent).
func rotaryRows(positions *tensor.Tensor, cacheShape []int, batch, seq int) (rows []int, width int, err error) {
	rows = make([]int, batch*seq)
	if positions == nil {
		if len(cacheShape) != 3 || cacheShape[1] != seq || (cacheShape[0] != batch && cacheShape[0] != 1) {
			return nil, 0, fmt.Errorf("cos_cache %v is not [%d, %d, rotary dim/2], as it must be without position_ids", cacheShape, batch, seq)
		}
		for t := range rows {
			rows[t] = t
			if cacheShape[0] == 1 {
				rows[t] = t % seq
			}
		}
		return rows, cacheShape[2], nil
	}
	ids, ok := positions.Data.([]int64)
	if !ok {
		return nil, 0, fmt.Errorf("position_ids: type %s is not int64", positions.DType)
	}
	ps := positions.Shape
	if len(ps) != 2 || ps[1] != seq || (ps[0] != batch && ps[0] != 1) {
		return nil, 0, fmt.Errorf("position_ids %v is not [%d, %d]", ps, batch, seq)
	}
	if len(cacheShape) != 2 {
		return nil, 0, fmt.Errorf("cos_cache %v is not [positions, rotary dim/2], as it must be with position_ids", cacheShape)
	}
	for t := range rows {
		i := t
		if ps[0] == 1 {
			i = t % seq
		}
		p := ids[i]
		if p < 0 || p >= int64(cacheShape[0]) {
			return nil, 0, fmt.Errorf("position_ids[%d, %d] = %d is outside the %d cached positions", i/seq, i%seq, p, cacheShape[0])
		}
		rows[t] = int(p)
	}
	return rows, cacheShape[1], nil
}

// rotateHead writes head vector x to y with its first 2·len(cos) values
// turned, pair i by the angle of cosine cos[i] and sine sin[i], and the
// others copied. Each product is rounded before the sum or difference (no
// fused multiply-add), as ONNX's reference rounds them, so the bits do
// not depend on the machine.
func rotateHead(y, x, cos, sin []float32, interleaved bool) {
	half := len(cos)
	for i, c := range cos {
		s := sin[i]
		j1, j2 := i, i+half
		if interleaved {
			j1, j2 = 2*i, 2*i+1
		}
		x1, x2 := x[j1], x[j2]
		y[j1] = float32(c*x1) - float32(s*x2)
		y[j2] = float32(s*x1) + float32(c*x2)
	}
	copy(y[2*half:], x[2*half:])
}

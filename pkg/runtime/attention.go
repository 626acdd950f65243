package runtime

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// attnRowBlock is how many query rows one task of Attention takes. It is
// fixed, not derived from the thread count, so that every row's products
// go through the same GEMM calls whatever the threads: results do not
// change with them.
const attnRowBlock = 32

// attnGeom is the geometry of one Attention run, in heads: Q is read as
// [batch, qHeads, qSeq, head] and the keys and values (past and new) as
// [batch, kvHeads, total, head] and [batch, kvHeads, total, vHead].
type attnGeom struct {
	batch, qHeads, kvHeads, qSeq, kvSeq, past, total, head, vHead int
	rank3                                                         bool
}

// buildAttention builds Attention (opset 23): scaled dot-product attention
// of query heads on key and value heads, each key/value head serving
// qHeads/kvHeads consecutive query heads (grouped-query attention). For
// each query head, with K and V the past keys and values followed by the
// new ones:
//
//	S = scale · Q·Kᵀ                         (qk_matmul_output_mode 0)
//	S = softcap · tanh(S/softcap)  if softcap > 0           (mode 1)
//	S = S + bias                                            (mode 2)
//	P = softmax(S) along the keys                           (mode 3)
//	Y = P·V
//
// The bias is attn_mask (added when float; −∞ where false when bool; −∞ on
// keys past its last axis when that axis is shorter than the keys) and,
// with is_causal, −∞ where key j lies after query i shifted by the past
// length (j > i + past), both applying. Softcap comes before the bias, as
// the op's corrected definition and ONNX's reference implementation order
// them, so a masked score stays −∞ instead of becoming −softcap (ONNX
// Runtime 1.23 still adds the mask first); a query whose keys are all
// masked gets NaN, as in the reference's softmax. The products are the
// engine's float32 GEMM (alpha = scale) and its softmax; query rows are
// split in fixed blocks over the run's threads.
func buildAttention(b *builder) (kernel, error) {
	causal := b.int("is_causal", 0) != 0
	qHeads, kvHeads := int(b.int("q_num_heads", 0)), int(b.int("kv_num_heads", 0))
	mode := b.int("qk_matmul_output_mode", 0)
	softcap := b.float("softcap", 0)
	scale, hasScale := b.float("scale", 0), b.has("scale")
	if p := b.int("softmax_precision", 0); p != 0 && p != int64(onnxpb.TensorProto_FLOAT) {
		// Softmax runs in float32; a wider or narrower precision would
		// round differently from what the model asks for.
		return nil, unsupportedf("softmax_precision %d is not supported (only float, %d)", p, onnxpb.TensorProto_FLOAT)
	}
	if mode < 0 || mode > 3 {
		return nil, fmt.Errorf("qk_matmul_output_mode %d is not 0, 1, 2 or 3", mode)
	}
	if qHeads < 0 || kvHeads < 0 {
		return nil, fmt.Errorf("q_num_heads %d or kv_num_heads %d is negative", qHeads, kvHeads)
	}
	if hasScale && !(scale > 0) {
		return nil, fmt.Errorf("scale %g is not positive", scale)
	}
	if softcap < 0 || math.IsNaN(float64(softcap)) {
		return nil, fmt.Errorf("softcap %g is negative", softcap)
	}
	if b.inputCount() > 6 {
		// Input 7, nonpad_kv_seqlen, came with opset 24, which the op
		// table does not claim; this is a malformed opset-23 node.
		return nil, fmt.Errorf("Attention-23 takes at most 6 inputs, the node lists %d", b.inputCount())
	}
	// The qk_matmul_output copy is made only when the node names it.
	wantQK := len(b.n.Outputs) > 3 && b.n.Outputs[3] != nil
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		g, err := attentionGeom(in, qHeads, kvHeads)
		if err != nil {
			return nil, err
		}
		q, _ := floats(in[0], "Q")
		presentK, presentV, err := attentionCaches(rc, in, g)
		if err != nil {
			return nil, err
		}
		var mask *attnMask
		if len(in) > 3 && in[3] != nil {
			if mask, err = attentionMask(in[3], g); err != nil {
				return nil, err
			}
		}
		s := scale
		if !hasScale {
			s = float32(1 / math.Sqrt(float64(g.head)))
		}
		var y *tensor.Tensor
		if g.rank3 {
			y = rc.newFloatOut(g.batch, g.qSeq, g.qHeads*g.vHead)
		} else {
			y = rc.newFloatOut(g.batch, g.qHeads, g.qSeq, g.vHead)
		}
		var qk *tensor.Tensor
		var qkOut []float32
		if wantQK {
			qk = rc.newFloatOut(g.batch, g.qHeads, g.qSeq, g.total)
			qkOut = qk.Float32s()
		}
		ks, vs, ys := presentK.Float32s(), presentV.Float32s(), y.Float32s()
		group := g.qHeads / g.kvHeads
		blocks := (g.qSeq + attnRowBlock - 1) / attnRowBlock
		T := g.total
		kernels.Parallel(rc.threads, g.batch*g.qHeads*blocks, 1, func(lo, hi int) {
			sc := make([]float32, attnRowBlock*T)
			pr := make([]float32, attnRowBlock*T)
			for t := lo; t < hi; t++ {
				bi, h, i0 := t/(g.qHeads*blocks), t/blocks%g.qHeads, t%blocks*attnRowBlock
				rows := min(attnRowBlock, g.qSeq-i0)
				kvh := h / group
				qa, lda := ((bi*g.qHeads+h)*g.qSeq+i0)*g.head, g.head
				ya, ldy := ((bi*g.qHeads+h)*g.qSeq+i0)*g.vHead, g.vHead
				if g.rank3 {
					qa, lda = (bi*g.qSeq+i0)*g.qHeads*g.head+h*g.head, g.qHeads*g.head
					ya, ldy = (bi*g.qSeq+i0)*g.qHeads*g.vHead+h*g.vHead, g.qHeads*g.vHead
				}
				kv := (bi*g.kvHeads + kvh) * T
				scores, probs := sc[:rows*T], pr[:rows*T]
				kernels.Sgemm(false, true, rows, T, g.head, s, q[qa:], lda, ks[kv*g.head:], g.head, 0, scores, T)
				// keep copies the scores to qk_matmul_output at stage m.
				keep := func(m int64) {
					if qkOut != nil && mode == m {
						copy(qkOut[((bi*g.qHeads+h)*g.qSeq+i0)*T:], scores)
					}
				}
				keep(0)
				if softcap > 0 {
					c := float64(softcap)
					for j, x := range scores {
						scores[j] = float32(c * math.Tanh(float64(x)/c))
					}
				}
				keep(1)
				attentionBias(scores, rows, T, bi, h, i0, g.past, causal, mask)
				keep(2)
				kernels.Softmax(scores, probs, rows, T, false)
				if qkOut != nil && mode == 3 {
					copy(qkOut[((bi*g.qHeads+h)*g.qSeq+i0)*T:], probs)
				}
				kernels.Sgemm(false, false, rows, g.vHead, T, 1, probs, T, vs[kv*g.vHead:], g.vHead, 0, ys[ya:], ldy)
			}
		})
		return []*tensor.Tensor{y, presentK, presentV, qk}, nil
	}, nil
}

// attentionGeom reads the shapes of Q, K and V (and past_key, past_value)
// as the heads of an Attention run: 4-D [batch, heads, seq, head], or 3-D
// [batch, seq, heads·head] with qHeads and kvHeads from the attributes.
func attentionGeom(in []*tensor.Tensor, qHeads, kvHeads int) (attnGeom, error) {
	var g attnGeom
	for i, name := range []string{"Q", "K", "V"} {
		if _, err := floats(in[i], name); err != nil {
			return g, err
		}
	}
	qs, ks, vs := in[0].Shape, in[1].Shape, in[2].Shape
	if len(qs) != len(ks) || len(qs) != len(vs) || (len(qs) != 3 && len(qs) != 4) {
		return g, fmt.Errorf("inputs Q %v, K %v and V %v are not all 3-D or all 4-D", qs, ks, vs)
	}
	if len(qs) == 4 {
		g.batch, g.qHeads, g.qSeq, g.head = qs[0], qs[1], qs[2], qs[3]
		g.kvHeads, g.kvSeq, g.vHead = ks[1], ks[2], vs[3]
		if ks[0] != g.batch || ks[3] != g.head || vs[0] != g.batch || vs[1] != g.kvHeads || vs[2] != g.kvSeq {
			return g, fmt.Errorf("inputs Q %v, K %v and V %v do not fit", qs, ks, vs)
		}
	} else {
		if qHeads == 0 || kvHeads == 0 {
			return g, fmt.Errorf("inputs are 3-D and q_num_heads (%d) or kv_num_heads (%d) is not set", qHeads, kvHeads)
		}
		if qs[2]%qHeads != 0 || vs[2]%kvHeads != 0 {
			return g, fmt.Errorf("q_num_heads %d and kv_num_heads %d do not divide the hidden sizes of Q %v and V %v", qHeads, kvHeads, qs, vs)
		}
		g.rank3 = true
		g.batch, g.qSeq, g.qHeads, g.head = qs[0], qs[1], qHeads, qs[2]/qHeads
		g.kvSeq, g.kvHeads, g.vHead = ks[1], kvHeads, vs[2]/kvHeads
		if ks[0] != g.batch || ks[2] != kvHeads*g.head || vs[0] != g.batch || vs[1] != g.kvSeq {
			return g, fmt.Errorf("inputs Q %v, K %v and V %v do not fit %d query and %d key/value heads", qs, ks, vs, qHeads, kvHeads)
		}
	}
	if g.kvHeads == 0 || g.qHeads%g.kvHeads != 0 {
		return g, fmt.Errorf("%d key/value heads do not divide %d query heads", g.kvHeads, g.qHeads)
	}
	pk, pv := optionalInput(in, 4), optionalInput(in, 5)
	if (pk == nil) != (pv == nil) {
		return g, fmt.Errorf("past_key and past_value must be given together")
	}
	if pk != nil {
		if _, err := floats(pk, "past_key"); err != nil {
			return g, err
		}
		if _, err := floats(pv, "past_value"); err != nil {
			return g, err
		}
		ps, pvs := pk.Shape, pv.Shape
		if len(ps) != 4 || ps[0] != g.batch || ps[1] != g.kvHeads || ps[3] != g.head ||
			len(pvs) != 4 || pvs[0] != g.batch || pvs[1] != g.kvHeads || pvs[2] != ps[2] || pvs[3] != g.vHead {
			return g, fmt.Errorf("past_key %v and past_value %v are not [%d, %d, past, %d] and [%d, %d, past, %d]",
				ps, pvs, g.batch, g.kvHeads, g.head, g.batch, g.kvHeads, g.vHead)
		}
		g.past = ps[2]
	}
	g.total = g.past + g.kvSeq
	return g, nil
}

func optionalInput(in []*tensor.Tensor, i int) *tensor.Tensor {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// attentionCaches returns present_key and present_value, [batch, kvHeads,
// total, head]: each head's past rows followed by its new ones. They are
// also the keys and values the products read, laid out head by head
// whatever the rank of K and V.
func attentionCaches(rc *runCtx, in []*tensor.Tensor, g attnGeom) (pk, pv *tensor.Tensor, err error) {
	fill := func(cur, past *tensor.Tensor, width int) *tensor.Tensor {
		out := rc.newFloatOut(g.batch, g.kvHeads, g.total, width)
		o, x := out.Float32s(), cur.Float32s()
		var p []float32
		if past != nil {
			p = past.Float32s()
		}
		for bh := range g.batch * g.kvHeads {
			dst := o[bh*g.total*width:]
			copy(dst, p[bh*g.past*width:(bh+1)*g.past*width])
			dst = dst[g.past*width:]
			if !g.rank3 {
				copy(dst[:g.kvSeq*width], x[bh*g.kvSeq*width:])
				continue
			}
			bi, h := bh/g.kvHeads, bh%g.kvHeads
			for s := range g.kvSeq {
				row := ((bi*g.kvSeq+s)*g.kvHeads + h) * width
				copy(dst[s*width:(s+1)*width], x[row:row+width])
			}
		}
		return out
	}
	return fill(in[1], optionalInput(in, 4), g.head), fill(in[2], optionalInput(in, 5), g.vHead), nil
}

// attnMask is attn_mask read for broadcasting to [batch, qHeads, qSeq,
// width]: the element of (b, h, i, j) is at b·st[0] + h·st[1] + i·st[2] +
// j·st[3] of bools (a bool mask) or floats, for j < width; keys from width
// on are masked.
type attnMask struct {
	bools  []bool
	floats []float32
	st     [4]int
	width  int
}

func attentionMask(m *tensor.Tensor, g attnGeom) (*attnMask, error) {
	ms := m.Shape
	if len(ms) < 1 || len(ms) > 4 {
		return nil, fmt.Errorf("attn_mask %v is not of rank 1 to 4", ms)
	}
	width := ms[len(ms)-1]
	if width > g.total {
		return nil, fmt.Errorf("attn_mask %v has more than the %d keys", ms, g.total)
	}
	full := []int{g.batch, g.qHeads, g.qSeq, width}
	for i, d := range ms {
		if f := full[4-len(ms)+i]; d != f && d != 1 {
			return nil, fmt.Errorf("attn_mask %v does not broadcast to [%d, %d, %d, %d]", ms, g.batch, g.qHeads, g.qSeq, g.total)
		}
	}
	am := &attnMask{width: width}
	copy(am.st[:], bcastStrides(ms, full))
	switch x := m.Data.(type) {
	case []bool:
		am.bools = x
	case []float32:
		am.floats = x
	default:
		return nil, fmt.Errorf("attn_mask: type %s is not supported (bool or float only)", m.DType)
	}
	return am, nil
}

// attentionBias adds the mask and the causal limit to the scores of rows
// query rows from i0 of head h of batch entry b, each of total keys.
func attentionBias(scores []float32, rows, total, b, h, i0, past int, causal bool, m *attnMask) {
	inf := float32(math.Inf(-1))
	for r := range rows {
		row := scores[r*total : (r+1)*total]
		i := i0 + r
		if m != nil {
			base := b*m.st[0] + h*m.st[1] + i*m.st[2]
			switch {
			case m.bools != nil:
				for j := range m.width {
					if !m.bools[base+j*m.st[3]] {
						row[j] = inf
					}
				}
			default:
				for j := range m.width {
					row[j] += m.floats[base+j*m.st[3]]
				}
			}
			for j := m.width; j < total; j++ {
				row[j] = inf
			}
		}
		if causal {
			for j := min(i+past+1, total); j < total; j++ {
				row[j] = inf
			}
		}
	}
}

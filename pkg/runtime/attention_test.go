package runtime

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// attnCase is one Attention node: its inputs (nil: omitted) and
// attributes.
type attnCase struct {
	name                string
	batch, qSeq, kvSeq  int
	qHeads, kvHeads     int
	head, vHead, past   int
	rank3               bool
	mask                []int // attn_mask shape; nil: none
	boolMask            bool
	causal              bool
	scale, softcap      float32 // 0: attribute absent
	mode                int64   // qk_matmul_output_mode; −1: output absent
	fullyMaskedFirstRow bool    // the bool mask hides every key of query 0
}

// attnInputs makes the case's inputs.
func (c attnCase) inputs() []*tensor.Tensor {
	var q, k, v *tensor.Tensor
	if c.rank3 {
		q = randomInput(31, c.batch, c.qSeq, c.qHeads*c.head)
		k = randomInput(32, c.batch, c.kvSeq, c.kvHeads*c.head)
		v = randomInput(33, c.batch, c.kvSeq, c.kvHeads*c.vHead)
	} else {
		q = randomInput(31, c.batch, c.qHeads, c.qSeq, c.head)
		k = randomInput(32, c.batch, c.kvHeads, c.kvSeq, c.head)
		v = randomInput(33, c.batch, c.kvHeads, c.kvSeq, c.vHead)
	}
	ins := []*tensor.Tensor{q, k, v, nil, nil, nil}
	if c.mask != nil {
		if c.boolMask {
			m := tensor.New(tensor.Bool, c.mask...)
			bs := m.Data.([]bool)
			for i := range bs {
				bs[i] = (i*7+3)%5 != 0 // four keys in five attend
			}
			if c.fullyMaskedFirstRow {
				for j := range c.mask[len(c.mask)-1] {
					bs[j] = false
				}
			}
			ins[3] = m
		} else {
			ins[3] = randomInput(34, c.mask...)
		}
	}
	if c.past > 0 {
		ins[4] = randomInput(35, c.batch, c.kvHeads, c.past, c.head)
		ins[5] = randomInput(36, c.batch, c.kvHeads, c.past, c.vHead)
	}
	for len(ins) > 3 && ins[len(ins)-1] == nil {
		ins = ins[:len(ins)-1]
	}
	return ins
}

func (c attnCase) attrs() []*onnxpb.AttributeProto {
	var a []*onnxpb.AttributeProto
	if c.rank3 {
		a = append(a, testmodels.AttrInt("q_num_heads", int64(c.qHeads)), testmodels.AttrInt("kv_num_heads", int64(c.kvHeads)))
	}
	if c.causal {
		a = append(a, testmodels.AttrInt("is_causal", 1))
	}
	if c.scale != 0 {
		a = append(a, testmodels.AttrFloat("scale", c.scale))
	}
	if c.softcap != 0 {
		a = append(a, testmodels.AttrFloat("softcap", c.softcap))
	}
	if c.mode > 0 {
		a = append(a, testmodels.AttrInt("qk_matmul_output_mode", c.mode))
	}
	return a
}

// attnModel is one Attention node with outputs y, present_key,
// present_value and (unless mode is −1) qk, fed ins.
func attnModel(c attnCase, ins []*tensor.Tensor, opset int64) (*testmodels.Builder, map[string]*tensor.Tensor) {
	b := testmodels.New("attention", opset)
	names, feed := feedInputs(b, ins)
	outs := []string{"y", "present_key", "present_value"}
	if c.mode >= 0 {
		outs = append(outs, "qk")
	}
	for _, o := range outs {
		b.Output(o, tensor.Float)
	}
	b.Node("Attention", "attn", names, outs, c.attrs()...)
	return b, feed
}

// attentionByHand is Attention in float64, written out from the operator's
// definition: heads of 3-D inputs split from the hidden axis; the past
// keys and values before the new ones; scores scale·q·k; softcap; the
// mask (bool: false hides the key; float: added; keys past its last axis
// hidden) and, with is_causal, keys after query i + past hidden; softmax
// (NaN for a query with every key hidden); y = p·v. Query head h reads
// key/value head h/(qHeads/kvHeads). It returns y, present_key,
// present_value and the scores at stage mode.
func attentionByHand(c attnCase, ins []*tensor.Tensor) (y, pk, pv, qk []float64) {
	T := c.past + c.kvSeq
	// at reads element (b, h, s, d) of a 4-D input or its 3-D form.
	at := func(x *tensor.Tensor, heads, width, seq, b, h, s, d int) float64 {
		if c.rank3 {
			return float64(x.Float32s()[((b*seq+s)*heads+h)*width+d])
		}
		return float64(x.Float32s()[((b*heads+h)*seq+s)*width+d])
	}
	cache := func(cur, past *tensor.Tensor, width int) []float64 {
		out := make([]float64, c.batch*c.kvHeads*T*width)
		for b := range c.batch {
			for h := range c.kvHeads {
				for s := range T {
					for d := range width {
						var v float64
						if s < c.past {
							v = float64(past.Float32s()[((b*c.kvHeads+h)*c.past+s)*width+d])
						} else {
							v = at(cur, c.kvHeads, width, c.kvSeq, b, h, s-c.past, d)
						}
						out[((b*c.kvHeads+h)*T+s)*width+d] = v
					}
				}
			}
		}
		return out
	}
	var past, pastV *tensor.Tensor
	if c.past > 0 {
		past, pastV = ins[4], ins[5]
	}
	pk, pv = cache(ins[1], past, c.head), cache(ins[2], pastV, c.vHead)
	scale := 1 / math.Sqrt(float64(c.head))
	if c.scale != 0 {
		scale = float64(c.scale)
	}
	var mask *tensor.Tensor
	if len(ins) > 3 {
		mask = ins[3]
	}
	maskAt := func(b, h, i, j int) (add float64, hidden bool) {
		ms := mask.Shape
		if j >= ms[len(ms)-1] {
			return 0, true
		}
		idx := []int{b, h, i, j}[4-len(ms):]
		off := 0
		for a, d := range ms {
			off *= d
			if d != 1 {
				off += idx[a]
			}
		}
		if bs, ok := mask.Data.([]bool); ok {
			return 0, !bs[off]
		}
		return float64(mask.Float32s()[off]), false
	}
	y = make([]float64, c.batch*c.qHeads*c.qSeq*c.vHead)
	qk = make([]float64, c.batch*c.qHeads*c.qSeq*T)
	group := c.qHeads / c.kvHeads
	for b := range c.batch {
		for h := range c.qHeads {
			kh := b*c.kvHeads + h/group
			for i := range c.qSeq {
				s := make([]float64, T)
				stage := make([][]float64, 4)
				for j := range T {
					for d := range c.head {
						s[j] += at(ins[0], c.qHeads, c.head, c.qSeq, b, h, i, d) * pk[(kh*T+j)*c.head+d]
					}
					s[j] *= scale
				}
				stage[0] = slices.Clone(s)
				if c.softcap > 0 {
					for j := range s {
						s[j] = float64(c.softcap) * math.Tanh(s[j]/float64(c.softcap))
					}
				}
				stage[1] = slices.Clone(s)
				for j := range s {
					if mask != nil {
						add, hidden := maskAt(b, h, i, j)
						s[j] += add
						if hidden {
							s[j] = math.Inf(-1)
						}
					}
					if c.causal && j > i+c.past {
						s[j] = math.Inf(-1)
					}
				}
				stage[2] = slices.Clone(s)
				m := math.Inf(-1)
				for _, v := range s {
					m = math.Max(m, v)
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - m) // NaN throughout when m is −∞
					sum += s[j]
				}
				for j := range s {
					s[j] /= sum
				}
				stage[3] = s
				if c.mode >= 0 {
					copy(qk[((b*c.qHeads+h)*c.qSeq+i)*T:], stage[c.mode])
				}
				for d := range c.vHead {
					var acc float64
					for j := range T {
						acc += s[j] * pv[(kh*T+j)*c.vHead+d]
					}
					o := ((b*c.qHeads+h)*c.qSeq+i)*c.vHead + d
					if c.rank3 {
						o = ((b*c.qSeq+i)*c.qHeads+h)*c.vHead + d
					}
					y[o] = acc
				}
			}
		}
	}
	return y, pk, pv, qk
}

// attnClose checks got's shape and values against want within 2e-5 of
// the larger of 1 and |want|; NaN matches NaN only.
func attnClose(t *testing.T, what string, got *tensor.Tensor, shape []int, want []float64) {
	t.Helper()
	if !slices.Equal(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	for i, v := range got.Float32s() {
		w := want[i]
		if math.IsNaN(w) || math.IsNaN(float64(v)) {
			if math.IsNaN(w) != math.IsNaN(float64(v)) {
				t.Fatalf("%s[%d] = %g, want %g", what, i, v, w)
			}
			continue
		}
		if math.IsInf(w, 0) && float64(v) == w {
			continue
		}
		if !(math.Abs(float64(v)-w) <= 2e-5*math.Max(1, math.Abs(w))) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, v, w)
		}
	}
}

var attnCases = []attnCase{
	{name: "4d", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 3, kvHeads: 3, head: 8, vHead: 6, mode: -1},
	{name: "3d", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 4, rank3: true, mode: -1},
	{name: "4d_gqa", batch: 2, qSeq: 3, kvSeq: 5, qHeads: 6, kvHeads: 2, head: 4, vHead: 4, mode: -1},
	{name: "3d_gqa", batch: 1, qSeq: 4, kvSeq: 4, qHeads: 4, kvHeads: 2, head: 8, vHead: 8, rank3: true, mode: -1},
	{name: "mqa_long_query", batch: 1, qSeq: 70, kvSeq: 70, qHeads: 2, kvHeads: 1, head: 8, vHead: 8, causal: true, mode: 3},
	{name: "bool_mask_2d", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, mask: []int{4, 5}, boolMask: true, mode: 2},
	{name: "bool_mask_4d_broadcast", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 1, head: 8, vHead: 8, mask: []int{2, 1, 4, 5}, boolMask: true, mode: -1},
	{name: "bool_mask_short", batch: 1, qSeq: 3, kvSeq: 6, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, mask: []int{1, 1, 3, 4}, boolMask: true, mode: 2},
	{name: "float_mask_4d", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 3, kvHeads: 3, head: 8, vHead: 8, mask: []int{2, 3, 4, 5}, mode: 2},
	{name: "float_mask_row", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, mask: []int{1, 5}, rank3: true, mode: -1},
	{name: "float_mask_heads_3d", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, mask: []int{2, 1, 5}, mode: 2},
	{name: "float_mask_short", batch: 1, qSeq: 2, kvSeq: 5, qHeads: 1, kvHeads: 1, head: 4, vHead: 4, mask: []int{2, 3}, mode: 2},
	{name: "causal", batch: 2, qSeq: 5, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, causal: true, mode: 2},
	{name: "causal_cross", batch: 1, qSeq: 3, kvSeq: 6, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, causal: true, mode: 2},
	{name: "causal_past", batch: 2, qSeq: 3, kvSeq: 3, past: 4, qHeads: 2, kvHeads: 2, head: 8, vHead: 6, causal: true, mode: 2},
	{name: "causal_past_decode_3d_gqa", batch: 2, qSeq: 1, kvSeq: 1, past: 5, qHeads: 4, kvHeads: 2, head: 4, vHead: 4, rank3: true, causal: true, mode: 3},
	{name: "causal_bool_mask", batch: 2, qSeq: 4, kvSeq: 4, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, mask: []int{2, 1, 4, 4}, boolMask: true, causal: true, mode: 2},
	{name: "causal_float_mask_past", batch: 1, qSeq: 3, kvSeq: 3, past: 2, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, mask: []int{3, 5}, causal: true, mode: 2},
	{name: "past_3d", batch: 2, qSeq: 2, kvSeq: 3, past: 3, qHeads: 2, kvHeads: 1, head: 4, vHead: 8, rank3: true, mode: 0},
	{name: "softcap", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, softcap: 1.5, mode: 1},
	{name: "softcap_causal_mask", batch: 1, qSeq: 4, kvSeq: 4, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, softcap: 2, mask: []int{4, 4}, causal: true, mode: 2},
	{name: "scale", batch: 2, qSeq: 4, kvSeq: 5, qHeads: 2, kvHeads: 2, head: 8, vHead: 8, scale: 0.9, mode: 0},
	{name: "mode0", batch: 1, qSeq: 3, kvSeq: 4, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, softcap: 1, mask: []int{3, 4}, mode: 0},
	{name: "mode1", batch: 1, qSeq: 3, kvSeq: 4, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, softcap: 1, mask: []int{3, 4}, mode: 1},
	{name: "mode2", batch: 1, qSeq: 3, kvSeq: 4, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, softcap: 1, mask: []int{3, 4}, mode: 2},
	{name: "mode3", batch: 1, qSeq: 3, kvSeq: 4, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, softcap: 1, mask: []int{3, 4}, mode: 3},
	{name: "fully_masked_row", batch: 1, qSeq: 3, kvSeq: 4, qHeads: 1, kvHeads: 1, head: 4, vHead: 4, mask: []int{3, 4}, boolMask: true, fullyMaskedFirstRow: true, mode: 3},
}

// TestAttention checks Attention against attentionByHand: 3-D and 4-D
// inputs, grouped and multi-query heads, bool and float masks of several
// broadcast shapes and shorter than the keys, is_causal with and without
// past keys and values, softcap, scale, each qk_matmul_output_mode, the
// present outputs, a query with every key masked, and more query rows
// than one task takes. Each case also runs on 4 threads, bit-identical to
// 1.
func TestAttention(t *testing.T) {
	for _, c := range attnCases {
		t.Run(c.name, func(t *testing.T) {
			ins := c.inputs()
			b, feed := attnModel(c, ins, 23)
			got := runModel(t, b, 1, feed)
			y, pk, pv, qk := attentionByHand(c, ins)
			T := c.past + c.kvSeq
			yShape := []int{c.batch, c.qHeads, c.qSeq, c.vHead}
			if c.rank3 {
				yShape = []int{c.batch, c.qSeq, c.qHeads * c.vHead}
			}
			attnClose(t, "Y", got["y"], yShape, y)
			attnClose(t, "present_key", got["present_key"], []int{c.batch, c.kvHeads, T, c.head}, pk)
			attnClose(t, "present_value", got["present_value"], []int{c.batch, c.kvHeads, T, c.vHead}, pv)
			if c.mode >= 0 {
				attnClose(t, "qk_matmul_output", got["qk"], []int{c.batch, c.qHeads, c.qSeq, T}, qk)
			}
			more := runModel(t, b, 4, feed)
			for name, v := range got {
				checkBits(t, name+" on 4 threads", more[name], v.Shape, v.Float32s())
			}
		})
	}
}

// TestAttentionRefusals checks what Attention refuses: a softmax precision
// other than float before anything runs, and inputs that do not fit, each
// error naming the node.
func TestAttentionRefusals(t *testing.T) {
	c := attnCase{batch: 1, qSeq: 2, kvSeq: 2, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, mode: -1}
	b, _ := attnModel(c, c.inputs(), 23)
	b.Model.Graph.Node[0].Attribute = append(b.Model.Graph.Node[0].Attribute, testmodels.AttrInt("softmax_precision", int64(onnxpb.TensorProto_DOUBLE)))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewGoSession(m, Options{Threads: 1}); err == nil || !strings.Contains(err.Error(), "softmax_precision 11 is not supported") {
		t.Errorf("softmax_precision double: err = %v", err)
	}
	// The same node with softmax_precision float runs.
	b.Model.Graph.Node[0].Attribute[len(b.Model.Graph.Node[0].Attribute)-1] = testmodels.AttrInt("softmax_precision", int64(onnxpb.TensorProto_FLOAT))
	if m, err = onnxgraph.LoadBytes(b.Bytes(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := NewGoSession(m, Options{Threads: 1}); err != nil {
		t.Errorf("softmax_precision float: %v", err)
	}

	x3 := randomInput(1, 1, 2, 8)
	x4 := randomInput(1, 1, 3, 2, 4)
	k4 := randomInput(2, 1, 2, 2, 4)
	for _, tc := range []struct {
		name  string
		ins   []*tensor.Tensor
		attrs []*onnxpb.AttributeProto
		want  string
	}{
		{"3d_without_heads", []*tensor.Tensor{x3, x3, x3}, nil, "q_num_heads (0) or kv_num_heads (0) is not set"},
		{"heads_not_dividing", []*tensor.Tensor{x4, k4, k4}, nil, "2 key/value heads do not divide 3 query heads"},
		{"past_key_alone", []*tensor.Tensor{k4, k4, k4, nil, k4}, nil, "past_key and past_value must be given together"},
		{"mask_too_long", []*tensor.Tensor{k4, k4, k4, randomInput(3, 2, 3)}, nil, "attn_mask [2 3] has more than the 2 keys"},
		{"mask_not_broadcasting", []*tensor.Tensor{k4, k4, k4, randomInput(3, 3, 2)}, nil, "attn_mask [3 2] does not broadcast"},
		{"mode_4", []*tensor.Tensor{k4, k4, k4}, []*onnxpb.AttributeProto{testmodels.AttrInt("qk_matmul_output_mode", 4)}, "qk_matmul_output_mode 4 is not 0, 1, 2 or 3"},
	} {
		err := runOneNodeErr(t, 23, "Attention", tc.ins, tc.attrs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Attention") {
			t.Errorf("%s: err = %v, want %q of node Attention", tc.name, err, tc.want)
		}
	}
}

// TestAttentionOpset24Refused checks that an opset-24 model, whose
// Attention may read nonpad_kv_seqlen, is reported unsupported rather
// than run as opset 23.
func TestAttentionOpset24Refused(t *testing.T) {
	c := attnCase{batch: 1, qSeq: 2, kvSeq: 2, qHeads: 2, kvHeads: 2, head: 4, vHead: 4, mode: -1}
	b, _ := attnModel(c, c.inputs(), 24)
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewGoSession(m, Options{Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "opset 24 is not supported") {
		t.Errorf("opset 24: err = %v", err)
	}
}

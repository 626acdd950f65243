package runtime

import (
	"math"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// ropeByHand is rotary embedding in float64, written out for X of shape
// [batch, heads, seq, head] (rank 4) or [batch, seq, heads·head] (rank 3):
// in each head vector of token (b, s), pair i, (x[i], x[i+dim/2]) or
// (x[2i], x[2i+1]) when interleaved, becomes
// (c·x₁ − s·x₂, s·x₁ + c·x₂) with c, s = cosAt(b, s, i), sinAt(b, s, i);
// the values past the first dim stay.
func ropeByHand(x []float32, xs []int, numHeads, dim int, interleaved bool, cosAt, sinAt func(b, s, i int) float64) []float64 {
	var batch, seq, heads, head int
	if len(xs) == 4 {
		batch, heads, seq, head = xs[0], xs[1], xs[2], xs[3]
	} else {
		batch, seq, heads, head = xs[0], xs[1], numHeads, xs[2]/numHeads
	}
	if dim == 0 {
		dim = head
	}
	y := widen(x)
	for b := range batch {
		for s := range seq {
			for h := range heads {
				base := ((b*seq+s)*heads + h) * head
				if len(xs) == 4 {
					base = ((b*heads+h)*seq + s) * head
				}
				for i := range dim / 2 {
					j1, j2 := base+i, base+i+dim/2
					if interleaved {
						j1, j2 = base+2*i, base+2*i+1
					}
					c, sn := cosAt(b, s, i), sinAt(b, s, i)
					x1, x2 := float64(x[j1]), float64(x[j2])
					y[j1] = c*x1 - sn*x2
					y[j2] = sn*x1 + c*x2
				}
			}
		}
	}
	return y
}

// ropePositions are the positions of the test's tokens, [batch][seq]; the
// second sequence is out of order and repeats one.
var ropePositions = [][]int64{{0, 1, 2, 3}, {7, 2, 9, 2}}

// ropeAngle is the angle of pair i at position p for cache rows of width
// values: p·10000^(−i/width), RoPE's usual frequencies.
func ropeAngle(p int64, i, width int) float64 {
	return float64(p) * math.Pow(10000, -float64(i)/float64(width))
}

// ropeCaches returns cos_cache and sin_cache for the positions mode:
// "ids" and "ids_batch1" are tables of 10 positions, [10, width], read
// through position_ids of shape [2, 4] or [1, 4]; "none" and
// "none_batch1" hold the angles of each token, [2, 4, width] or
// [1, 4, width]. It also returns the position_ids (nil for "none*") and
// the position of token (b, s).
func ropeCaches(mode string, width int) (cos, sin, ids *tensor.Tensor, posAt func(b, s int) int64) {
	batch1 := strings.HasSuffix(mode, "batch1")
	posAt = func(b, s int) int64 {
		if batch1 {
			b = 0
		}
		return ropePositions[b][s]
	}
	table := func(rows int, pos func(r int) int64, shape ...int) (*tensor.Tensor, *tensor.Tensor) {
		c, s := tensor.New(tensor.Float, shape...), tensor.New(tensor.Float, shape...)
		for r := range rows {
			for i := range width {
				a := ropeAngle(pos(r), i, width)
				c.Float32s()[r*width+i], s.Float32s()[r*width+i] = float32(math.Cos(a)), float32(math.Sin(a))
			}
		}
		return c, s
	}
	batch := 2
	if batch1 {
		batch = 1
	}
	if strings.HasPrefix(mode, "ids") {
		cos, sin = table(10, func(r int) int64 { return int64(r) }, 10, width)
		ids = tensor.New(tensor.Int64, batch, 4)
		for b := range batch {
			copy(ids.Data.([]int64)[b*4:], ropePositions[b])
		}
		return cos, sin, ids, posAt
	}
	cos, sin = table(batch*4, func(r int) int64 { return ropePositions[r/4][r%4] }, batch, 4, width)
	return cos, sin, nil, posAt
}

// TestRotaryEmbedding checks RotaryEmbedding against ropeByHand on X of
// rank 4 and 3 (2 sequences of 4 tokens, 3 heads of 8 values), halves and
// interleaved pairs, the whole head and its first 4 values turned, with
// position_ids into a table of positions and with per-token caches (the
// absent position_ids left out or named ""), each also with a batch axis
// of 1, and with cache rows longer than the turned values need.
func TestRotaryEmbedding(t *testing.T) {
	tests := []struct {
		name        string
		rank        int
		interleaved bool
		dim         int    // rotary_embedding_dim; 0: absent (the whole head)
		mode        string // see ropeCaches
		width       int    // values per cache row; 0: the turned values' half
	}{
		{"rank4_halves_ids", 4, false, 0, "ids", 0},
		{"rank4_interleaved_ids", 4, true, 0, "ids", 0},
		{"rank4_halves_no_ids", 4, false, 0, "none", 0},
		{"rank3_halves_no_ids", 3, false, 0, "none", 0},
		{"rank3_interleaved_ids", 3, true, 0, "ids", 0},
		{"rank3_interleaved_no_ids", 3, true, 0, "none", 0},
		{"rank4_partial_halves_ids", 4, false, 4, "ids", 0},
		{"rank4_partial_interleaved_no_ids", 4, true, 4, "none", 0},
		{"rank3_partial_halves_ids", 3, false, 4, "ids", 0},
		{"rank3_partial_interleaved_ids", 3, true, 6, "ids", 0},
		{"rank4_ids_batch1", 4, false, 0, "ids_batch1", 0},
		{"rank3_no_ids_batch1", 3, true, 0, "none_batch1", 0},
		{"rank4_partial_wide_cache", 4, false, 4, "ids", 4},
	}
	const batch, seq, heads, head = 2, 4, 3, 8
	for _, tc := range tests {
		xs := []int{batch, heads, seq, head}
		if tc.rank == 3 {
			xs = []int{batch, seq, heads * head}
		}
		x := randomInput(21, xs...)
		dim := tc.dim
		if dim == 0 {
			dim = head
		}
		width := tc.width
		if width == 0 {
			width = dim / 2
		}
		cos, sin, ids, posAt := ropeCaches(tc.mode, width)
		var attrs []*onnxpb.AttributeProto
		if tc.interleaved {
			attrs = append(attrs, testmodels.AttrInt("interleaved", 1))
		}
		if tc.rank == 3 {
			attrs = append(attrs, testmodels.AttrInt("num_heads", heads))
		}
		if tc.dim != 0 {
			attrs = append(attrs, testmodels.AttrInt("rotary_embedding_dim", int64(tc.dim)))
		}
		ins := []*tensor.Tensor{x, cos, sin}
		switch {
		case ids != nil:
			ins = append(ins, ids)
		case tc.mode == "none":
			ins = append(ins, nil) // position_ids named "", as exporters omit it
		}
		got := runOneNode(t, 23, "RotaryEmbedding", tensor.Float, ins, attrs...)
		// The hand computation takes the angles' cosines and sines as the
		// caches hold them, rounded to float32.
		cosAt := func(b, s, i int) float64 { return float64(float32(math.Cos(ropeAngle(posAt(b, s), i, width)))) }
		sinAt := func(b, s, i int) float64 { return float64(float32(math.Sin(ropeAngle(posAt(b, s), i, width)))) }
		closeTo(t, tc.name, got, xs, ropeByHand(x.Float32s(), xs, heads, tc.dim, tc.interleaved, cosAt, sinAt))
	}
}

// TestRotaryEmbeddingRefusals checks the errors of attributes and inputs
// that do not fit, each naming the node.
func TestRotaryEmbeddingRefusals(t *testing.T) {
	cos, sin, ids, _ := ropeCaches("ids", 4)
	x4, x3 := randomInput(22, 2, 3, 4, 8), randomInput(22, 2, 4, 24)
	outside := tensor.New(tensor.Int64, 2, 4)
	outside.Data.([]int64)[5] = 10
	int32IDs := &tensor.Tensor{DType: tensor.Int32, Shape: []int{2, 4}, Data: make([]int32, 8)}
	for _, tc := range []struct {
		name  string
		ins   []*tensor.Tensor
		attrs []*onnxpb.AttributeProto
		want  string
	}{
		{"rank3_without_num_heads", []*tensor.Tensor{x3, cos, sin, ids}, nil, "input X [2 4 24] is 3-D and num_heads is not set"},
		{"num_heads_not_dividing", []*tensor.Tensor{x3, cos, sin, ids}, []*onnxpb.AttributeProto{testmodels.AttrInt("num_heads", 5)}, "num_heads 5 does not divide"},
		{"odd_rotary_dim", []*tensor.Tensor{x4, cos, sin, ids}, []*onnxpb.AttributeProto{testmodels.AttrInt("rotary_embedding_dim", 3)}, "rotary_embedding_dim 3 is not a non-negative even number"},
		{"rotary_dim_beyond_head", []*tensor.Tensor{x4, cos, sin, ids}, []*onnxpb.AttributeProto{testmodels.AttrInt("rotary_embedding_dim", 10)}, "cannot rotate 10 values of heads of 8"},
		{"position_outside_cache", []*tensor.Tensor{x4, cos, sin, outside}, nil, "position_ids[1, 1] = 10 is outside the 10 cached positions"},
		{"int32_positions", []*tensor.Tensor{x4, cos, sin, int32IDs}, nil, "position_ids: type int32 is not int64"},
		{"table_without_positions", []*tensor.Tensor{x4, cos, sin}, nil, "cos_cache [10 4] is not [2, 4, rotary dim/2]"},
		{"narrow_cache", []*tensor.Tensor{x4, randomInput(23, 10, 3), randomInput(24, 10, 3), ids}, nil, "cos_cache [10 3] has 3 values per position; rotating 8 values takes 4"},
	} {
		err := runOneNodeErr(t, 23, "RotaryEmbedding", tc.ins, tc.attrs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "RotaryEmbedding") {
			t.Errorf("%s: err = %v, want %q of node RotaryEmbedding", tc.name, err, tc.want)
		}
	}
}

// TestRotaryEmbeddingThreads checks RotaryEmbedding on enough tokens for
// several chunks, in both layouts and both pairings.
func TestRotaryEmbeddingThreads(t *testing.T) {
	const batch, heads, seq, head, positions = 4, 8, 64, 64, 128
	cos, sin := randomInput(25, positions, head/2), randomInput(26, positions, head/2)
	ids := tensor.New(tensor.Int64, batch, seq)
	for i := range ids.Data.([]int64) {
		ids.Data.([]int64)[i] = int64(i*37) % positions
	}
	for _, interleaved := range []int64{0, 1} {
		sameBitsEveryRun(t, 23, "RotaryEmbedding", []*tensor.Tensor{randomInput(27, batch, heads, seq, head), cos, sin, ids},
			testmodels.AttrInt("interleaved", interleaved))
		sameBitsEveryRun(t, 23, "RotaryEmbedding", []*tensor.Tensor{randomInput(28, batch, seq, heads*head), cos, sin, ids},
			testmodels.AttrInt("interleaved", interleaved), testmodels.AttrInt("num_heads", heads))
	}
}

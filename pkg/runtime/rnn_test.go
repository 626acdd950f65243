package runtime

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// rnnByHand is the plain RNN written out one batch row and one hidden
// unit at a time in float64, on inputs of layout 0: x (seq, batch, in),
// w (dirs, hidden, in), r (dirs, hidden, hidden), bias (dirs, 2·hidden)
// or nil, lens (batch) or nil, h0 (dirs, batch, hidden) or nil; acts
// holds each direction's activation. It returns Y (seq, dirs, batch,
// hidden), zero past each row's length, and Y_h (dirs, batch, hidden).
func rnnByHand(x []float32, seq, batch, in int, w, r, bias []float32, lens []int32, h0 []float32,
	hidden, dirs int, reverse bool, clip float64, acts []func(float64) float64) (y, yh []float64) {
	y = make([]float64, seq*dirs*batch*hidden)
	yh = make([]float64, dirs*batch*hidden)
	for dir := 0; dir < dirs; dir++ {
		back := reverse || dir == 1
		for b := 0; b < batch; b++ {
			n := seq
			if lens != nil {
				n = int(lens[b])
			}
			h := make([]float64, hidden)
			if h0 != nil {
				for j := range h {
					h[j] = float64(h0[(dir*batch+b)*hidden+j])
				}
			}
			for step := 0; step < n; step++ {
				t := step
				if back {
					t = n - 1 - step
				}
				next := make([]float64, hidden)
				for j := range next {
					acc := 0.0
					for k := 0; k < in; k++ {
						acc += float64(x[(t*batch+b)*in+k]) * float64(w[(dir*hidden+j)*in+k])
					}
					for k := 0; k < hidden; k++ {
						acc += h[k] * float64(r[(dir*hidden+j)*hidden+k])
					}
					if bias != nil {
						acc += float64(bias[dir*2*hidden+j]) + float64(bias[dir*2*hidden+hidden+j])
					}
					if clip > 0 {
						acc = min(max(acc, -clip), clip)
					}
					next[j] = acts[dir](acc)
				}
				h = next
				copy(y[((t*dirs+dir)*batch+b)*hidden:], h)
			}
			copy(yh[(dir*batch+b)*hidden:], h)
		}
	}
	return y, yh
}

// TestRNN checks RNN against rnnByHand in the variants the ONNX node
// tests leave out: reverse and bidirectional runs, per-row sequence
// lengths with an initial state, a clip, activations with their alphas
// paired to their directions, the batch-first layout, and opset 7.
func TestRNN(t *testing.T) {
	tanh := math.Tanh
	leaky := func(alpha float64) func(float64) float64 {
		return func(v float64) float64 {
			if v < 0 {
				return alpha * v
			}
			return v
		}
	}
	tests := []struct {
		name      string
		opset     int64
		direction string
		layout    int64
		bias      bool
		lens      []int32
		h0        bool
		clip      float32
		// activations and alphas are the node's attributes (none when
		// nil), handActs the functions rnnByHand applies per direction.
		activations []string
		alphas      []float32
		handActs    []func(float64) float64
	}{
		{name: "reverse_lens_h0", opset: 14, direction: "reverse", bias: true, lens: []int32{3, 1, 4}, h0: true, handActs: []func(float64) float64{tanh}},
		{name: "bidirectional_lens", opset: 14, direction: "bidirectional", bias: true, lens: []int32{4, 0, 2}, handActs: []func(float64) float64{tanh, tanh}},
		{name: "bidirectional_batchwise_clip_leaky", opset: 14, direction: "bidirectional", layout: 1, h0: true, clip: 0.5,
			activations: []string{"LeakyRelu", "LeakyRelu"}, alphas: []float32{0.2, 0.05}, handActs: []func(float64) float64{leaky(0.2), leaky(0.05)}},
		{name: "forward_opset7_nobias", opset: 7, direction: "forward", handActs: []func(float64) float64{tanh}},
	}
	const seq, batch, in, hidden = 4, 3, 5, 6
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dirs := len(tc.handActs)
			seed := uint64(10 * i)
			x := randomInput(seed+1, seq, batch, in)
			w, r := randomInput(seed+2, dirs, hidden, in), randomInput(seed+3, dirs, hidden, hidden)
			bias, h0 := randomInput(seed+4, dirs, 2*hidden), randomInput(seed+5, dirs, batch, hidden)

			b := testmodels.New("rnn", tc.opset)
			inputs := map[string]*tensor.Tensor{"x": x}
			if tc.layout == 1 {
				inputs["x"] = transpose(x, []int{1, 0, 2})
			}
			b.Input("x", tensor.Float, inputs["x"].Shape[0], inputs["x"].Shape[1], in).Output("y", tensor.Float).Output("yh", tensor.Float)
			addInit(t, b, "w", w)
			addInit(t, b, "r", r)
			names := []string{"x", "w", "r", "", "", ""}
			var biasData, h0Data []float32
			if tc.bias {
				addInit(t, b, "b", bias)
				names[3], biasData = "b", bias.Float32s()
			}
			if tc.lens != nil {
				addInit(t, b, "lens", &tensor.Tensor{DType: tensor.Int32, Shape: []int{batch}, Data: tc.lens})
				names[4] = "lens"
			}
			if tc.h0 {
				h := h0
				if tc.layout == 1 {
					h = transpose(h0, []int{1, 0, 2})
				}
				addInit(t, b, "h0", h)
				names[5], h0Data = "h0", h0.Float32s()
			}
			for names[len(names)-1] == "" {
				names = names[:len(names)-1]
			}
			attrs := []*onnxpb.AttributeProto{testmodels.AttrInt("hidden_size", hidden), testmodels.AttrString("direction", tc.direction)}
			if tc.layout != 0 {
				attrs = append(attrs, testmodels.AttrInt("layout", tc.layout))
			}
			if tc.clip != 0 {
				attrs = append(attrs, testmodels.AttrFloat("clip", tc.clip))
			}
			if tc.activations != nil {
				a := &onnxpb.AttributeProto{Name: proto.String("activations"), Type: onnxpb.AttributeProto_STRINGS.Enum()}
				for _, s := range tc.activations {
					a.Strings = append(a.Strings, []byte(s))
				}
				attrs = append(attrs, a, testmodels.AttrFloats("activation_alpha", tc.alphas...))
			}
			b.Node("RNN", "rnn", names, []string{"y", "yh"}, attrs...)
			outs := runModel(t, b, 2, inputs)

			wantY, wantH := rnnByHand(x.Float32s(), seq, batch, in, w.Float32s(), r.Float32s(), biasData, tc.lens, h0Data,
				hidden, dirs, tc.direction == "reverse", float64(tc.clip), tc.handActs)
			gotY, gotH := outs["y"], outs["yh"]
			if tc.layout == 1 {
				gotY, gotH = transpose(gotY, []int{1, 2, 0, 3}), transpose(gotH, []int{1, 0, 2})
			}
			closeTo(t, "Y", gotY, []int{seq, dirs, batch, hidden}, wantY)
			closeTo(t, "Y_h", gotH, []int{dirs, batch, hidden}, wantH)
		})
	}
}

// closeTo checks got's shape and its values within 1e-5 of want (a NaN
// is never close).
func closeTo(t *testing.T, what string, got *tensor.Tensor, shape []int, want []float64) {
	t.Helper()
	if !slices.Equal(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	for i, v := range got.Float32s() {
		if !(math.Abs(float64(v)-want[i]) <= 1e-5) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, v, want[i])
		}
	}
}

// TestRNNRefusals checks that an activation the engine lacks is reported
// before anything runs, naming it, and that a sequence length beyond the
// input's steps is an error of the node, not a crash.
func TestRNNRefusals(t *testing.T) {
	b := testmodels.New("rnn", 14)
	b.Input("x", tensor.Float, 2, 1, 3).Output("y", tensor.Float)
	addInit(t, b, "w", randomInput(1, 1, 4, 3))
	addInit(t, b, "r", randomInput(2, 1, 4, 4))
	act := &onnxpb.AttributeProto{Name: proto.String("activations"), Type: onnxpb.AttributeProto_STRINGS.Enum(), Strings: [][]byte{[]byte("Gelu")}}
	b.Node("RNN", "gelu_rnn", []string{"x", "w", "r"}, []string{"y"}, testmodels.AttrInt("hidden_size", 4), act)
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewGoSession(m, Options{})
	var ue *UnsupportedError
	if !errors.As(err, &ue) || len(ue.Items) != 1 || ue.Items[0].Node != "gelu_rnn" || ue.Items[0].Feature != `activation "Gelu" is not supported` {
		t.Errorf("err = %v, want the Gelu activation reported for node gelu_rnn", err)
	}

	b = testmodels.New("rnn", 14)
	b.Input("x", tensor.Float, 2, 1, 3).Output("y", tensor.Float)
	addInit(t, b, "w", randomInput(1, 1, 4, 3))
	addInit(t, b, "r", randomInput(2, 1, 4, 4))
	addInit(t, b, "lens", &tensor.Tensor{DType: tensor.Int32, Shape: []int{1}, Data: []int32{3}})
	b.Node("RNN", "long_rnn", []string{"x", "w", "r", "", "lens"}, []string{"y"}, testmodels.AttrInt("hidden_size", 4))
	s := session(t, b)
	_, err = s.Run(context.Background(), map[string]*tensor.Tensor{"x": randomInput(3, 2, 1, 3)}, RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "long_rnn") || !strings.Contains(err.Error(), "sequence_lens[0] = 3 is outside [0, 2]") {
		t.Errorf("err = %v, want sequence_lens[0] out of range in node long_rnn", err)
	}
}

// TestRNNHiddenFromR checks an RNN without hidden_size, which takes the
// size from R's shape at each run, in two runs at once of one session,
// long enough to overlap (under -race: the node's attributes are not
// written while running).
func TestRNNHiddenFromR(t *testing.T) {
	const seq, batch, in, hidden = 400, 2, 4, 5
	x := randomInput(1, seq, batch, in)
	w, r := randomInput(2, 1, hidden, in), randomInput(3, 1, hidden, hidden)
	b := testmodels.New("rnn", 14)
	b.Input("x", tensor.Float, seq, batch, in).Output("y", tensor.Float)
	addInit(t, b, "w", w)
	addInit(t, b, "r", r)
	b.Node("RNN", "rnn", []string{"x", "w", "r"}, []string{"y"})
	s := session(t, b)
	wantY, _ := rnnByHand(x.Float32s(), seq, batch, in, w.Float32s(), r.Float32s(), nil, nil, nil, hidden, 1, false, 0,
		[]func(float64) float64{math.Tanh})
	var wg sync.WaitGroup
	outs := make([]map[string]*tensor.Tensor, 2)
	errs := make([]error, 2)
	for i := range outs {
		wg.Go(func() {
			outs[i], errs[i] = s.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, RunOptions{})
		})
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		closeTo(t, "Y", outs[i]["y"], []int{seq, 1, batch, hidden}, wantY)
	}
}

package passes

import (
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// stemNet is x [N, c, 16, 16] → Conv k×k stride 2 to 8 channels → Relu →
// Conv 1×1 → output: the stem of a CNN on a c-channel image.
func stemNet(t *testing.T, c, k int) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("stem", 13)
	b.Input("x", tensor.Float, "N", c, 16, 16).Output("output", tensor.Float, "N", 4, 8, 8)
	b.RandomInit("stem.weight", 0.5, 8, int64(c), int64(k), int64(k)).RandomInit("stem.bias", 0.2, 8)
	b.RandomInit("head.weight", 0.4, 4, 8, 1, 1).RandomInit("head.bias", 0.1, 4)
	p := int64(k / 2)
	b.Node("Conv", "stem", []string{"x", "stem.weight", "stem.bias"}, []string{"s"},
		testmodels.AttrInts("kernel_shape", int64(k), int64(k)), testmodels.AttrInts("pads", p, p, p, p), testmodels.AttrInts("strides", 2, 2))
	b.Node("Relu", "stem_relu", []string{"s"}, []string{"r"})
	b.Node("Conv", "head", []string{"r", "head.weight", "head.bias"}, []string{"output"}, testmodels.AttrInts("kernel_shape", 1, 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stemCases are the stems finalize pads to 4 channels for ONNX Runtime
// targets (3×3 Convs of 1 to 3 channels) and those it leaves.
var stemCases = []struct {
	name   string
	c, k   int
	padded bool
}{
	{"3x3 of 3 channels", 3, 3, true},
	{"3x3 of 1 channel", 1, 3, true},
	{"3x3 of 2 channels", 2, 3, true},
	{"5x5 of 2 channels", 2, 5, false},
	{"7x7 of 3 channels", 3, 7, false},
	{"3x3 of 4 channels", 4, 3, false},
}

// stemInput is 8 samples of x for a c-channel stemNet.
func stemInput(t *testing.T, c int) map[string]*tensor.Tensor {
	t.Helper()
	in, err := newSampleSource(1, 8, c, 16, 16).Batch(0, 8)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestStemChannelsPadded checks the written form (a Pad of the integers
// before the stem's DequantizeLinear, a 4-channel weight whose added
// channels hold its zero point, a note) and that the built-in engine
// gives exactly the outputs of the plan written without the rewrite.
// TestORTStemChannelsPadded checks the same models in ONNX Runtime.
func TestStemChannelsPadded(t *testing.T) {
	for _, tc := range stemCases {
		t.Run(tc.name, func(t *testing.T) {
			in := stemInput(t, tc.c)
			u, plain := quantizeChain(t, stemNet(t, tc.c, tc.k), in)
			m := u.Result.Model
			pads := 0
			for _, n := range m.Graph.Nodes {
				if n.OpType != "Pad" {
					continue
				}
				pads++
				if p := n.Inputs[0].Producer; p == nil || p.OpType != "QuantizeLinear" {
					t.Errorf("%s pads %s, want the image's integers", n, p)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.padded]; pads != want {
				t.Errorf("%d Pad nodes, want %d", pads, want)
			}
			for _, n := range m.Graph.Nodes {
				if n.OpType != "Conv" || n.Name != "stem" {
					continue
				}
				wq := n.Inputs[1].Producer.Inputs[0]
				dims := wq.Const.GetDims()
				if got, want := dims[1], int64(tc.c); tc.padded && got != 4 || !tc.padded && got != want {
					t.Errorf("stem weight %v, padded %v", dims, tc.padded)
				}
				if tc.padded {
					w, err := tensor.FromProto(wq.Const, m)
					if err != nil {
						t.Fatal(err)
					}
					codes, _ := w.AsFloat32()
					per := int(dims[2] * dims[3])
					for o := range int(dims[0]) {
						for c := tc.c; c < 4; c++ {
							for i := range per {
								if v := codes[(o*4+c)*per+i]; v != 0 {
									t.Fatalf("weight channel %d of output %d holds %g, want the zero point 0", c, o, v)
								}
							}
						}
					}
				}
			}
			noted := slices.ContainsFunc(u.Result.Notes, func(s string) bool { return strings.Contains(s, "padded to 4 channels") })
			if noted != tc.padded {
				t.Errorf("a note on the stem: %v, want %v", noted, tc.padded)
			}
			want := runGo(t, plain.Model, in)
			got := runGo(t, m, in)
			if !slices.Equal(want, got) {
				t.Errorf("outputs differ from the model written without the rewrite (SQNR %.1f dB)", sqnr(want, got))
			}
		})
	}
}

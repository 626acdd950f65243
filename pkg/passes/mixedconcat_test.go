package passes

import (
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// detectorHead ends like an exported YOLO detector with its decoding in the
// graph: boxes in pixels (a Sigmoid scaled by the 640-pixel image size)
// concatenated with 6 class probabilities (Sigmoids), then reshaped to
// [1, 10, 16] as the model's output. boxScale sets the boxes' range; more,
// when given, adds to the graph.
func detectorHead(t *testing.T, boxScale float32, more ...func(*testmodels.Builder)) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("dethead", 13)
	b.Input("x", tensor.Float, 1, 3, 4, 4).Output("out", tensor.Float, 1, 10, 16)
	w := func(n int) []float32 { return sinWeights(n, 1) }
	b.Init("wb", []int64{4, 3, 1, 1}, w(12)).Init("wc", []int64{6, 3, 1, 1}, w(18))
	b.Init("size", []int64{}, []float32{boxScale})
	b.InitInt64("shape", []int64{3}, []int64{1, 10, 16})
	b.Node("Conv", "box_conv", []string{"x", "wb"}, []string{"braw"})
	b.Node("Sigmoid", "box_sig", []string{"braw"}, []string{"bs"})
	b.Node("Mul", "box_px", []string{"bs", "size"}, []string{"boxes"})
	b.Node("Conv", "cls_conv", []string{"x", "wc"}, []string{"craw"})
	b.Node("Sigmoid", "cls_sig", []string{"craw"}, []string{"scores"})
	b.Node("Concat", "cat", []string{"boxes", "scores"}, []string{"dets"}, testmodels.AttrInt("axis", 1))
	b.Node("Reshape", "flat", []string{"dets", "shape"}, []string{"out"})
	for _, f := range more {
		f(b)
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMixedConcatStaysFloat: with boxes up to 640 pixels beside
// probabilities in [0, 1], one 8-bit scale for the Concat would round every
// probability to 0 or to one step of 2.5 (errors up to 0.95 with the rule
// off); the Concat's output, the Reshape after it and the boxes that share
// its scale stay in float, and the probabilities keep the error of their
// own quantization and of the Conv before them (0.008). Boxes up to 4 keep
// the probabilities 64 levels, and the Concat stays quantized (0.020).
func TestMixedConcatStaysFloat(t *testing.T) {
	cases := []struct {
		name     string
		boxScale float32
		opts     PrepareOptions
		float    bool
		// The largest error of a probability lies in [least, most].
		least, most float64
	}{
		{"pixels", 640, PrepareOptions{}, true, 0, 0.02},
		{"pixels, rule off", 640, PrepareOptions{NoMixedConcat: true}, false, 0.5, 1},
		{"small boxes", 4, PrepareOptions{}, false, 0, 0.05},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := detectorHead(t, c.boxScale)
			u := quantize(t, m, "w8a8", c.opts)
			for _, v := range []string{"dets", "out", "boxes"} {
				if got := u.Plan.Tensor(v) == nil; got != c.float {
					t.Errorf("%q in float: %v, want %v", v, got, c.float)
				}
			}
			if u.Plan.Tensor("scores") == nil {
				t.Errorf("the probabilities lost their own quantization")
			}
			in := randomInputs(m, 9)
			run := func(m *onnxgraph.Model) []float32 {
				f, err := enginetest.Run(t, m, in)["out"].AsFloat32()
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			ref, got := run(m), run(u.Result.Model)
			// Rows 4..9 of [1, 10, 16] are the probabilities.
			worst := 0.0
			for i := 4 * 16; i < len(ref); i++ {
				worst = max(worst, math.Abs(float64(got[i]-ref[i])))
			}
			t.Logf("largest probability error %.4f", worst)
			if worst < c.least || worst > c.most {
				t.Errorf("largest probability error %.4f, want it in [%g, %g]", worst, c.least, c.most)
			}
		})
	}
}

// TestMixedConcatAcrossScales: a detector that concatenates boxes and
// probabilities per scale, reshapes each and concatenates the scales
// (YOLOv5's layout) has one qparams group for all of it, the last Concat
// its root; the per-scale Concats end the model through the last one, so
// the whole group stays in float and every scale's probabilities keep
// their own quantization.
func TestMixedConcatAcrossScales(t *testing.T) {
	b := testmodels.New("twoscales", 13)
	b.Input("x", tensor.Float, 1, 3, 4, 4).Output("out", tensor.Float, 1, 10, 32)
	w := sinWeights
	b.Init("size", []int64{}, []float32{640})
	b.InitInt64("shape", []int64{3}, []int64{1, 10, 16})
	for s, name := range []string{"p3", "p4"} {
		b.Init(name+"_wb", []int64{4, 3, 1, 1}, w(12, s+1)).Init(name+"_wc", []int64{6, 3, 1, 1}, w(18, s+5))
		b.Node("Conv", name+"_box_conv", []string{"x", name + "_wb"}, []string{name + "_braw"})
		b.Node("Sigmoid", name+"_box_sig", []string{name + "_braw"}, []string{name + "_bs"})
		b.Node("Mul", name+"_box_px", []string{name + "_bs", "size"}, []string{name + "_boxes"})
		b.Node("Conv", name+"_cls_conv", []string{"x", name + "_wc"}, []string{name + "_craw"})
		b.Node("Sigmoid", name+"_cls_sig", []string{name + "_craw"}, []string{name + "_scores"})
		b.Node("Concat", name+"_cat", []string{name + "_boxes", name + "_scores"}, []string{name + "_dets"}, testmodels.AttrInt("axis", 1))
		b.Node("Reshape", name+"_flat", []string{name + "_dets", "shape"}, []string{name + "_rows"})
	}
	b.Node("Concat", "scales", []string{"p3_rows", "p4_rows"}, []string{"out"}, testmodels.AttrInt("axis", 2))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	u := quantize(t, m, "w8a8", PrepareOptions{})
	for _, v := range []string{"out", "p3_dets", "p4_dets", "p3_rows", "p4_boxes"} {
		if u.Plan.Tensor(v) != nil {
			t.Errorf("%q is still quantized", v)
		}
	}
	for _, v := range []string{"p3_scores", "p4_scores"} {
		if u.Plan.Tensor(v) == nil {
			t.Errorf("%q lost its own quantization", v)
		}
	}
}

// TestMixedConcatInputReadElsewhere: when a value that shares the Concat's
// scale is also read by a layer (here a Conv with a bias), leaving the
// group in float leaves that layer's input in float too; its weight stays
// quantized and its bias, whose scale needs the input's, stays float. The
// plan keeps its invariants (test binaries check them after every pass).
func TestMixedConcatInputReadElsewhere(t *testing.T) {
	m := detectorHead(t, 640, func(b *testmodels.Builder) {
		b.Output("tap", tensor.Float, 1, 2, 4, 4)
		b.Init("wt", []int64{2, 4, 1, 1}, sinWeights(8, 1)).Init("bt", []int64{2}, []float32{0.5, -0.5})
		b.Node("Conv", "tap_conv", []string{"boxes", "wt", "bt"}, []string{"tap"})
	})
	u := quantize(t, m, "w8a8", PrepareOptions{})
	for v, quantized := range map[string]bool{"dets": false, "boxes": false, "bt": false, "wt": true, "scores": true} {
		if got := u.Plan.Tensor(v) != nil; got != quantized {
			t.Errorf("%q quantized: %v, want %v", v, got, quantized)
		}
	}
}

// sinWeights are n deterministic weights in [-2, 2], 2·sin(3i + phase).
func sinWeights(n, phase int) []float32 {
	o := make([]float32, n)
	for i := range o {
		o[i] = float32(math.Sin(float64(3*i+phase))) * 2
	}
	return o
}

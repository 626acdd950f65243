//go:build ort

package ort

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// parityTolerance is the largest error of the built-in engine against ONNX
// Runtime, relative to the largest reference magnitude of an output.
const parityTolerance = 1e-4

// compareEngines runs m in the built-in engine and in ONNX Runtime on the
// same inputs and checks every output within parityTolerance.
func compareEngines(t *testing.T, l *Library, m *onnxgraph.Model, inputs map[string]*tensor.Tensor, so SessionOptions) {
	t.Helper()
	goSess, err := runtime.Open("go", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatalf("built-in engine: %v", err)
	}
	defer goSess.Close()
	ortSess, err := l.Open(m, so)
	if err != nil {
		t.Fatalf("onnxruntime: %v", err)
	}
	defer ortSess.Close()
	ctx := context.Background()
	want, err := ortSess.Run(ctx, inputs, runtime.RunOptions{})
	if err != nil {
		t.Fatalf("onnxruntime: %v", err)
	}
	got, err := goSess.Run(ctx, inputs, runtime.RunOptions{})
	if err != nil {
		t.Fatalf("built-in engine: %v", err)
	}
	for _, name := range sortedKeys(want) {
		ref, y := want[name], got[name]
		if y == nil || y.DType != ref.DType || !slices.Equal(y.Shape, ref.Shape) {
			t.Errorf("output %q: built-in %v, onnxruntime %v", name, y, ref)
			continue
		}
		d, scale := maxAbsDiff(asFloat64(y), asFloat64(ref))
		if d > parityTolerance*scale {
			t.Errorf("output %q: max abs error %g > %g × max |ref| %g", name, d, parityTolerance, scale)
		}
		t.Logf("output %q %v: max abs error %g, max |ref| %g", name, y.Shape, d, scale)
	}
	if len(got) != len(want) {
		t.Errorf("built-in engine gave %d outputs, onnxruntime %d", len(got), len(want))
	}
}

// TestParitySharedModels compares the built-in engine with ONNX Runtime on
// every shared model, on the reference inputs.
func TestParitySharedModels(t *testing.T) {
	l := testLibrary(t)
	for _, c := range sharedCases(t) {
		t.Run(c.name, func(t *testing.T) {
			m, err := onnxgraph.Load(c.model)
			if err != nil {
				t.Fatal(err)
			}
			compareEngines(t, l, m, c.inputs, SessionOptions{IntraOpThreads: 1})
		})
	}
}

// randomInputs fills every graph input with deterministic values: floats
// in [-2, 2), integers in [0, 8), booleans either way.
func randomInputs(t *testing.T, m *onnxgraph.Model, batch int) map[string]*tensor.Tensor {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	in := map[string]*tensor.Tensor{}
	for _, v := range m.Graph.Inputs {
		dims, ok := v.Shape()
		if !ok {
			t.Fatalf("input %q has no shape", v.Name)
		}
		shape := make([]int, len(dims))
		for i, d := range dims {
			shape[i] = int(d.Size)
			if d.Size < 0 {
				shape[i] = batch
			}
		}
		x := tensor.New(v.DType(), shape...)
		switch d := x.Data.(type) {
		case []float32:
			for i := range d {
				d[i] = rng.Float32()*4 - 2
			}
		case []int64:
			for i := range d {
				d[i] = rng.Int64N(8)
			}
		case []bool:
			for i := range d {
				d[i] = rng.IntN(2) == 1
			}
		default:
			t.Fatalf("input %q: no generator for %s", v.Name, x.DType)
		}
		in[v.Name] = x
	}
	return in
}

// generated are small models built in Go, covering ops the shared models
// do not stress on their own.
func generated() map[string]*testmodels.Builder {
	models := map[string]*testmodels.Builder{}
	for name, build := range testmodels.Catalog {
		models[name] = build()
	}

	b := testmodels.New("softmax_layernorm", 17)
	b.Input("x", tensor.Float, "N", 6, 16).Output("y", tensor.Float, "N", 6, 16)
	b.RandomInit("scale", 1, 16).RandomInit("bias", 0.5, 16).RandomInit("w", 0.3, 16, 16)
	b.Node("MatMul", "mm", []string{"x", "w"}, []string{"h"})
	b.Node("LayerNormalization", "ln", []string{"h", "scale", "bias"}, []string{"n"}, testmodels.AttrInt("axis", -1))
	b.Node("Softmax", "sm", []string{"n"}, []string{"y"}, testmodels.AttrInt("axis", -1))
	models["softmax_layernorm"] = b

	b = testmodels.New("activations", 17)
	b.Input("x", tensor.Float, "N", 32).Output("y", tensor.Float, "N", 32)
	b.Node("Sigmoid", "sig", []string{"x"}, []string{"s"})
	b.Node("Tanh", "tanh", []string{"x"}, []string{"th"})
	b.Node("Mul", "mul", []string{"s", "th"}, []string{"m"})
	b.Node("Erf", "erf", []string{"m"}, []string{"e"})
	b.Node("Add", "add", []string{"e", "x"}, []string{"y"})
	models["activations"] = b

	// Ops that left ONNX in opset 10 and that old exporters still write.
	b = testmodels.New("legacy_ops", 7)
	b.Input("x", tensor.Float, "N", 3, 8, 10)
	for _, o := range []string{"crop", "cropped", "tanh", "softplus", "thresholded", "nearest", "linear"} {
		b.Output(o, tensor.Float)
	}
	b.Node("ImageScaler", "scaler", []string{"x"}, []string{"scaled"}, testmodels.AttrFloat("scale", 0.5), testmodels.AttrFloats("bias", 0.1, -0.2, 0.3))
	b.Node("Crop", "crop_border", []string{"scaled"}, []string{"crop"}, testmodels.AttrInts("border", 1, 2, 1, 0))
	b.Node("Crop", "crop_scale", []string{"scaled"}, []string{"cropped"}, testmodels.AttrInts("border", 2, 1, 0, 0), testmodels.AttrInts("scale", 4, 5))
	b.Node("Affine", "affine", []string{"crop"}, []string{"affine"}, testmodels.AttrFloat("alpha", 2), testmodels.AttrFloat("beta", -1))
	b.Node("ScaledTanh", "scaled_tanh", []string{"affine"}, []string{"tanh"}, testmodels.AttrFloat("alpha", 1.5), testmodels.AttrFloat("beta", 0.7))
	b.Node("ParametricSoftplus", "psoftplus", []string{"affine"}, []string{"softplus"}, testmodels.AttrFloat("alpha", 0.8), testmodels.AttrFloat("beta", 1.3))
	b.Node("ThresholdedRelu", "thresh", []string{"affine"}, []string{"thresholded"}, testmodels.AttrFloat("alpha", 0.4))
	b.Node("Upsample", "up_nearest", []string{"x"}, []string{"nearest"}, testmodels.AttrFloats("scales", 1, 1, 2, 3))
	b.Node("Upsample", "up_linear", []string{"x"}, []string{"linear"}, testmodels.AttrFloats("scales", 1, 1, 2, 1.5), testmodels.AttrString("mode", "linear"))
	models["legacy_ops"] = b

	b = testmodels.New("upsample9", 9)
	b.Input("x", tensor.Float, "N", 3, 8, 10).Output("y", tensor.Float)
	b.Init("scales", []int64{4}, []float32{1, 1, 2.5, 2})
	b.Node("Upsample", "up", []string{"x", "scales"}, []string{"y"}, testmodels.AttrString("mode", "linear"))
	models["upsample9"] = b
	b = testmodels.New("onehot", 13)
	b.Input("i", tensor.Int64, "N", 3).Output("y", tensor.Float)
	b.InitInt64("depth", []int64{}, []int64{5}) // inputs reach 7: some are outside
	b.Init("values", []int64{2}, []float32{0.5, 2})
	b.Node("OneHot", "onehot", []string{"i", "depth", "values"}, []string{"y"}, testmodels.AttrInt("axis", 1))
	models["onehot"] = b
	for _, center := range []int64{0, 1} {
		b = testmodels.New("nms", 13)
		b.Input("boxes", tensor.Float, "N", 40, 4).Input("scores", tensor.Float, "N", 2, 40).Output("selected", tensor.Int64)
		b.InitInt64("most", []int64{1}, []int64{40})
		b.Init("iou", []int64{1}, []float32{0.3})
		b.Init("least", []int64{1}, []float32{-0.5})
		b.Node("NonMaxSuppression", "nms", []string{"boxes", "scores", "most", "iou", "least"}, []string{"selected"},
			testmodels.AttrInt("center_point_box", center))
		models[fmt.Sprintf("nms_center%d", center)] = b
	}
	// Grid coordinates in [-2, 2): half of them sample outside the image.
	for _, mode := range []string{"bilinear", "nearest", "bicubic"} {
		for _, padding := range []string{"zeros", "border", "reflection"} {
			for _, align := range []int64{0, 1} {
				b = testmodels.New("gridsample", 16)
				b.Input("x", tensor.Float, "N", 3, 6, 7).Input("grid", tensor.Float, "N", 5, 4, 2).Output("y", tensor.Float)
				b.Node("GridSample", "gs", []string{"x", "grid"}, []string{"y"}, testmodels.AttrString("mode", mode),
					testmodels.AttrString("padding_mode", padding), testmodels.AttrInt("align_corners", align))
				models[fmt.Sprintf("gridsample_%s_%s_align%d", mode, padding, align)] = b
			}
		}
	}
	// Regions inside, across and beyond the image's edges.
	rois := []float32{1, 1, 6, 5, 0, 0, 11.5, 9.5, -3, 2, 4, 7, 8, 6, 15, 14, 2.2, 3.7, 2.9, 4.1}
	for _, opset := range []int64{10, 16} {
		for _, mode := range []string{"avg", "max"} {
			for _, coord := range []string{"half_pixel", "output_half_pixel"} {
				for _, ratio := range []int64{0, 2} {
					if opset == 10 && coord == "half_pixel" {
						continue // opset 10 has output_half_pixel only
					}
					b = testmodels.New("roialign", opset)
					b.Input("x", tensor.Float, "N", 3, 10, 12).Output("y", tensor.Float)
					b.Init("rois", []int64{5, 4}, rois)
					b.InitInt64("batch", []int64{5}, []int64{0, 1, 2, 1, 0})
					attrs := []*onnxpb.AttributeProto{testmodels.AttrString("mode", mode), testmodels.AttrInt("output_height", 3),
						testmodels.AttrInt("output_width", 4), testmodels.AttrInt("sampling_ratio", ratio), testmodels.AttrFloat("spatial_scale", 0.9)}
					if opset >= 16 {
						attrs = append(attrs, testmodels.AttrString("coordinate_transformation_mode", coord))
					}
					b.Node("RoiAlign", "roi", []string{"x", "rois", "batch"}, []string{"y"}, attrs...)
					models[fmt.Sprintf("roialign%d_%s_%s_ratio%d", opset, mode, coord, ratio)] = b
				}
			}
		}
	}
	for _, dir := range []string{"forward", "reverse", "bidirectional"} {
		dirs := int64(1)
		if dir == "bidirectional" {
			dirs = 2
		}
		const hidden, in = 9, 6
		for _, v := range []struct {
			op, variant string
			gates       int64
			inputs      []string
			attrs       []*onnxpb.AttributeProto
		}{
			{"LSTM", "", 4, []string{"x", "w", "r", "b"}, nil},
			{"LSTM", "peepholes_clip", 4, []string{"x", "w", "r", "b", "", "", "", "p"}, []*onnxpb.AttributeProto{testmodels.AttrFloat("clip", 0.7)}},
			{"GRU", "", 3, []string{"x", "w", "r", "b"}, nil},
			{"GRU", "linear_before_reset_clip", 3, []string{"x", "w", "r", "b"}, []*onnxpb.AttributeProto{testmodels.AttrInt("linear_before_reset", 1), testmodels.AttrFloat("clip", 0.7)}},
		} {
			name := strings.ToLower(v.op) + "_" + dir
			if v.variant != "" {
				name += "_" + v.variant
			}
			b = testmodels.New(name, 14)
			b.Input("x", tensor.Float, 5, "N", in).Output("y", tensor.Float).Output("yh", tensor.Float)
			b.RandomInit("w", 0.5, dirs, v.gates*hidden, in).RandomInit("r", 0.5, dirs, v.gates*hidden, hidden).RandomInit("b", 0.5, dirs, 2*v.gates*hidden)
			if v.op == "LSTM" {
				b.RandomInit("p", 0.5, dirs, 3*hidden)
			}
			attrs := append([]*onnxpb.AttributeProto{testmodels.AttrInt("hidden_size", hidden), testmodels.AttrString("direction", dir)}, v.attrs...)
			b.Node(v.op, "rnn", v.inputs, []string{"y", "yh"}, attrs...)
			models[name] = b
		}
	}
	// RNN: Tanh with both biases; Relu with a clip; LeakyRelu (its alpha
	// given) from an initial state with a sequence length per batch row.
	// ONNX Runtime refuses the batch-first layout.
	for _, dir := range []string{"forward", "reverse", "bidirectional"} {
		dirs := int64(1)
		if dir == "bidirectional" {
			dirs = 2
		}
		const hidden, in = 7, 5
		for _, variant := range []string{"tanh", "relu_clip", "leakyrelu_lens_h0"} {
			name := "rnn_" + dir + "_" + variant
			b = testmodels.New(name, 14)
			b.Input("x", tensor.Float, 5, "N", in).Output("y", tensor.Float).Output("yh", tensor.Float)
			b.RandomInit("w", 0.6, dirs, hidden, in).RandomInit("r", 0.6, dirs, hidden, hidden).RandomInit("b", 0.5, dirs, 2*hidden)
			inputs := []string{"x", "w", "r", "b"}
			attrs := []*onnxpb.AttributeProto{testmodels.AttrInt("hidden_size", hidden), testmodels.AttrString("direction", dir)}
			acts := func(name string) *onnxpb.AttributeProto {
				return &onnxpb.AttributeProto{Name: proto.String("activations"), Type: onnxpb.AttributeProto_STRINGS.Enum(),
					Strings: slices.Repeat([][]byte{[]byte(name)}, int(dirs))}
			}
			switch variant {
			case "relu_clip":
				attrs = append(attrs, acts("Relu"), testmodels.AttrFloat("clip", 0.8))
			case "leakyrelu_lens_h0":
				// The batch is 3 rows at run time (randomInputs).
				b.Model.Graph.Initializer = append(b.Model.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String("lens"),
					Dims: []int64{3}, DataType: proto.Int32(int32(tensor.Int32)), Int32Data: []int32{5, 2, 3}})
				b.RandomInit("h0", 1, dirs, 3, hidden)
				inputs = append(inputs, "lens", "h0")
				attrs = append(attrs, acts("LeakyRelu"), testmodels.AttrFloats("activation_alpha", slices.Repeat([]float32{0.3}, int(dirs))...))
			}
			b.Node("RNN", "rnn", inputs, []string{"y", "yh"}, attrs...)
			models[name] = b
		}
	}
	// LRN of odd sizes (ONNX Runtime refuses even ones), with the classic
	// CNNs' beta of 0.75 and another.
	for _, size := range []int64{1, 3, 5} {
		for _, beta := range []float32{0.6, 0.75} {
			b = testmodels.New("lrn", 13)
			b.Input("x", tensor.Float, "N", 7, 5, 6).Output("y", tensor.Float)
			b.Node("LRN", "lrn", []string{"x"}, []string{"y"}, testmodels.AttrInt("size", size),
				testmodels.AttrFloat("alpha", 0.02), testmodels.AttrFloat("beta", beta), testmodels.AttrFloat("bias", 1.5))
			models[fmt.Sprintf("lrn_size%d_beta%g", size, beta)] = b
		}
	}
	// Hardmax over the 2-D coercion of opset 11 and one axis of 13;
	// MeanVarianceNormalization over its default axes and others.
	for _, opset := range []int64{11, 13} {
		b = testmodels.New("hardmax", opset)
		b.Input("x", tensor.Float, "N", 3, 4).Output("y", tensor.Float)
		b.Node("Hardmax", "hardmax", []string{"x"}, []string{"y"}, testmodels.AttrInt("axis", 1))
		models[fmt.Sprintf("hardmax%d", opset)] = b
	}
	for name, axes := range map[string][]int64{"mvn_default": nil, "mvn_axes12": {1, 2}, "mvn_axes_last": {-1}} {
		b = testmodels.New(name, 13)
		b.Input("x", tensor.Float, "N", 3, 4, 5).Output("y", tensor.Float)
		var attrs []*onnxpb.AttributeProto
		if axes != nil {
			attrs = append(attrs, testmodels.AttrInts("axes", axes...))
		}
		b.Node("MeanVarianceNormalization", "mvn", []string{"x"}, []string{"y"}, attrs...)
		models[name] = b
	}
	// Shrink, EyeLike, ReverseSequence on both axis orders and Compress
	// with and without an axis (a condition shorter than the flattened
	// input).
	b = testmodels.New("shrink", 9)
	b.Input("x", tensor.Float, "N", 16).Output("y", tensor.Float)
	b.Node("Shrink", "shrink", []string{"x"}, []string{"y"}, testmodels.AttrFloat("lambd", 0.7), testmodels.AttrFloat("bias", 0.4))
	models["shrink"] = b
	b = testmodels.New("eyelike", 9)
	b.Input("x", tensor.Float, "N", 5).Output("y", tensor.Int64)
	b.Node("EyeLike", "eye", []string{"x"}, []string{"y"}, testmodels.AttrInt("k", -1), testmodels.AttrInt("dtype", int64(tensor.Int64)))
	models["eyelike"] = b
	for _, batchAxis := range []int64{0, 1} {
		b = testmodels.New("reversesequence", 10)
		if batchAxis == 0 {
			b.Input("x", tensor.Float, "N", 5, 4)
		} else {
			b.Input("x", tensor.Float, 5, "N", 4)
		}
		b.Output("y", tensor.Float)
		b.InitInt64("lens", []int64{3}, []int64{5, 2, 1})
		b.Node("ReverseSequence", "rev", []string{"x", "lens"}, []string{"y"}, testmodels.AttrInt("batch_axis", batchAxis), testmodels.AttrInt("time_axis", 1-batchAxis))
		models[fmt.Sprintf("reversesequence_batch%d", batchAxis)] = b
	}
	b = testmodels.New("compress", 11)
	b.Input("x", tensor.Float, "N", 6, 4).Input("c", tensor.Bool, 6).Input("flat", tensor.Bool, 20).Output("y", tensor.Float).Output("yflat", tensor.Float)
	b.Node("Compress", "compress", []string{"x", "c"}, []string{"y"}, testmodels.AttrInt("axis", 1))
	b.Node("Compress", "compress_flat", []string{"x", "flat"}, []string{"yflat"})
	models["compress"] = b
	models["loop"] = testmodels.Loop()
	models["scan"] = testmodels.Scan()
	for name, b := range normModels() {
		models[name] = b
	}
	return models
}

// normModels are GroupNormalization of both definitions (scale and bias
// per group at opset 18, per channel at 21) over one group, a group per
// channel and groups between; RMSNormalization over the last axis and from
// axis 1; RotaryEmbedding of both layouts and both pairings, partial, with
// and without position_ids. The inputs are randomInputs': position_ids
// fall in [0, 8), the caches' positions. ONNX Runtime refuses an
// RMSNormalization scale smaller than the normalized shape ([5] or [4, 1]
// for rows of [4, 5]), which the op allows when it broadcasts to the rows,
// and a rank-4 RotaryEmbedding with rotary_embedding_dim but no num_heads,
// which the op does not need; the partial rank-4 models set num_heads,
// which the op ignores for rank 4.
func normModels() map[string]*testmodels.Builder {
	models := map[string]*testmodels.Builder{}
	for _, opset := range []int64{18, 21} {
		for _, v := range []struct {
			shape  []any
			groups int64
			eps    float32
		}{
			{[]any{"N", 6, 5, 4}, 3, 1e-5},
			{[]any{"N", 6, 5, 4}, 1, 1e-5},
			{[]any{"N", 6, 5, 4}, 6, 0.3},
			{[]any{"N", 4, 7}, 2, 1e-5},
		} {
			c := int64(v.shape[1].(int))
			params := c
			if opset < 21 {
				params = v.groups
			}
			b := testmodels.New("groupnorm", opset)
			b.Input("x", tensor.Float, v.shape...).Output("y", tensor.Float)
			b.RandomInit("scale", 1.5, params).RandomInit("bias", 0.5, params)
			b.Node("GroupNormalization", "gn", []string{"x", "scale", "bias"}, []string{"y"},
				testmodels.AttrInt("num_groups", v.groups), testmodels.AttrFloat("epsilon", v.eps))
			models[fmt.Sprintf("groupnorm%d_rank%d_groups%d", opset, len(v.shape), v.groups)] = b
		}
	}
	for name, v := range map[string]struct {
		shape, scale []any
		axis         int64
	}{
		"rmsnorm_last_axis":          {[]any{"N", 6, 16}, []any{16}, -1},
		"rmsnorm_axis1":              {[]any{"N", 4, 5}, []any{4, 5}, 1},
		"rmsnorm_axis1_leading_axis": {[]any{"N", 4, 5}, []any{1, 4, 5}, 1},
	} {
		b := testmodels.New(name, 23)
		b.Input("x", tensor.Float, v.shape...).Output("y", tensor.Float)
		dims := make([]int64, len(v.scale))
		for i, d := range v.scale {
			dims[i] = int64(d.(int))
		}
		b.RandomInit("scale", 1.5, dims...)
		b.Node("RMSNormalization", "rms", []string{"x", "scale"}, []string{"y"}, testmodels.AttrInt("axis", v.axis))
		models[name] = b
	}
	const heads, seq, head, positions = 3, 5, 8, 8
	for _, rank := range []int{3, 4} {
		for _, interleaved := range []int64{0, 1} {
			for _, v := range []struct {
				variant string
				dim     int64 // rotary_embedding_dim, 0: the whole head
				ids     bool
			}{{"", 0, true}, {"_partial", 4, true}, {"_no_ids", 0, false}} {
				name := fmt.Sprintf("rotary_rank%d_interleaved%d%s", rank, interleaved, v.variant)
				b := testmodels.New(name, 23)
				if rank == 4 {
					b.Input("x", tensor.Float, "N", heads, seq, head)
				} else {
					b.Input("x", tensor.Float, "N", seq, heads*head)
				}
				b.Output("y", tensor.Float)
				half := int64(head / 2)
				if v.dim != 0 {
					half = v.dim / 2
				}
				inputs := []string{"x", "cos", "sin"}
				if v.ids {
					b.Input("ids", tensor.Int64, "N", seq)
					b.RandomInit("cos", 1, positions, half).RandomInit("sin", 1, positions, half)
					inputs = append(inputs, "ids")
				} else {
					b.Input("cos", tensor.Float, "N", seq, int(half)).Input("sin", tensor.Float, "N", seq, int(half))
				}
				attrs := []*onnxpb.AttributeProto{testmodels.AttrInt("interleaved", interleaved)}
				if rank == 3 || v.dim != 0 {
					attrs = append(attrs, testmodels.AttrInt("num_heads", heads))
				}
				if v.dim != 0 {
					attrs = append(attrs, testmodels.AttrInt("rotary_embedding_dim", v.dim))
				}
				b.Node("RotaryEmbedding", "rope", inputs, []string{"y"}, attrs...)
				models[name] = b
			}
		}
	}
	return models
}

// TestParityGenerated compares the engines on generated models with random
// inputs.
func TestParityGenerated(t *testing.T) {
	l := testLibrary(t)
	models := generated()
	for _, name := range sortedKeys(models) {
		t.Run(name, func(t *testing.T) {
			m := modelOf(t, models[name])
			compareEngines(t, l, m, randomInputs(t, m, 3), SessionOptions{IntraOpThreads: 1})
		})
	}
}

// TestParityTaps compares the intermediate values the two engines hand to a
// Tap, as calibration sees them: the outputs of the compute nodes.
func TestParityTaps(t *testing.T) {
	l := testLibrary(t)
	var cases []sharedCase
	for _, c := range sharedCases(t) {
		if c.name == "digits_resnet" || c.name == "bert_encoder" {
			cases = append(cases, c)
		}
	}
	if len(cases) != 2 {
		t.Fatalf("shared models digits_resnet and bert_encoder not found")
	}
	watched := map[string]bool{"Conv": true, "Gemm": true, "MatMul": true, "Relu": true, "Add": true, "Softmax": true}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := onnxgraph.Load(c.model)
			if err != nil {
				t.Fatal(err)
			}
			var taps []string
			for _, n := range m.Graph.Nodes {
				if watched[n.OpType] {
					taps = append(taps, n.Outputs[0].Name)
				}
			}
			run := func(s runtime.Session) map[string]*tensor.Tensor {
				t.Helper()
				defer s.Close()
				vals := map[string]*tensor.Tensor{}
				_, err := s.Run(context.Background(), c.inputs, runtime.RunOptions{TapValues: taps,
					Tap: func(name string, v *tensor.Tensor) { vals[name] = v.Clone() }})
				if err != nil {
					t.Fatalf("%s: %v", s.Engine(), err)
				}
				return vals
			}
			goSess, err := runtime.Open("go", m, runtime.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			ortSess, err := l.Open(m, SessionOptions{IntraOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			got, want := run(goSess), run(ortSess)
			worst := 0.0
			for _, name := range taps {
				ref, y := want[name], got[name]
				if ref == nil || y == nil {
					t.Errorf("value %q: onnxruntime tapped %v, built-in %v", name, ref, y)
					continue
				}
				if !slices.Equal(y.Shape, ref.Shape) {
					t.Errorf("value %q: built-in shape %v, onnxruntime %v", name, y.Shape, ref.Shape)
					continue
				}
				d, scale := maxAbsDiff(asFloat64(y), asFloat64(ref))
				if d > parityTolerance*scale {
					t.Errorf("value %q: max abs error %g > %g × max |ref| %g", name, d, parityTolerance, scale)
				}
				worst = max(worst, d/max(scale, 1e-30))
			}
			t.Logf("%d tapped values, worst relative error %g", len(taps), worst)
		})
	}
}

// initializer adds t to b's graph as an initializer named name.
func initializer(t *testing.T, b *testmodels.Builder, name string, x *tensor.Tensor) {
	t.Helper()
	tp, err := tensor.ToProto(x, name)
	if err != nil {
		t.Fatal(err)
	}
	b.Model.Graph.Initializer = append(b.Model.Graph.Initializer, tp)
}

// qdqModels are quantized models of the shapes finalize writes: activation
// QuantizeLinear→DequantizeLinear pairs, per-channel int8 weights, blocked
// int4 weights (opset 21) and float8 activations (opset 19).
func qdqModels(t *testing.T) map[string]*testmodels.Builder {
	rng := rand.New(rand.NewPCG(3, 5))
	models := map[string]*testmodels.Builder{}

	b := testmodels.New("qdq_int8", 13)
	b.Input("x", tensor.Float, "N", 16).Output("y", tensor.Float, "N", 8)
	initializer(t, b, "xs", tensor.FromFloat32([]float32{0.02}))
	initializer(t, b, "xz", &tensor.Tensor{DType: tensor.Int8, Data: []int8{3}})
	w := tensor.New(tensor.Int8, 16, 8)
	for i := range w.Data.([]int8) {
		w.Data.([]int8)[i] = int8(rng.IntN(255) - 127)
	}
	initializer(t, b, "w_q", w)
	ws := tensor.New(tensor.Float, 8)
	for i := range ws.Float32s() {
		ws.Float32s()[i] = 0.001 + 0.002*float32(i)
	}
	initializer(t, b, "w_s", ws)
	initializer(t, b, "w_z", tensor.New(tensor.Int8, 8))
	initializer(t, b, "ys", tensor.FromFloat32([]float32{0.03}))
	initializer(t, b, "yz", &tensor.Tensor{DType: tensor.Uint8, Data: []uint8{128}})
	b.RandomInit("bias", 0.1, 8)
	b.Node("QuantizeLinear", "x_q", []string{"x", "xs", "xz"}, []string{"xq"})
	b.Node("DequantizeLinear", "x_dq", []string{"xq", "xs", "xz"}, []string{"xd"})
	b.Node("DequantizeLinear", "w_dq", []string{"w_q", "w_s", "w_z"}, []string{"wd"}, testmodels.AttrInt("axis", 1))
	b.Node("MatMul", "mm", []string{"xd", "wd"}, []string{"h"})
	b.Node("Add", "add", []string{"h", "bias"}, []string{"hb"})
	b.Node("QuantizeLinear", "y_q", []string{"hb", "ys", "yz"}, []string{"yq"})
	b.Node("DequantizeLinear", "y_dq", []string{"yq", "ys", "yz"}, []string{"y"})
	models["qdq_int8"] = b

	b = testmodels.New("int4_block", 21)
	b.Input("x", tensor.Float, "N", 64).Output("y", tensor.Float, "N", 8)
	w4 := tensor.New(tensor.Int4, 64, 8)
	for i := range w4.Data.([]int8) {
		w4.Data.([]int8)[i] = int8(rng.IntN(16) - 8)
	}
	initializer(t, b, "w_q", w4)
	s4 := tensor.New(tensor.Float, 2, 8) // blocks of 32 along axis 0
	for i := range s4.Float32s() {
		s4.Float32s()[i] = 0.01 + 0.005*float32(i%5)
	}
	initializer(t, b, "w_s", s4)
	b.Node("DequantizeLinear", "w_dq", []string{"w_q", "w_s"}, []string{"wd"},
		testmodels.AttrInt("axis", 0), testmodels.AttrInt("block_size", 32))
	b.Node("MatMul", "mm", []string{"x", "wd"}, []string{"y"})
	models["int4_block"] = b

	b = testmodels.New("fp8", 19)
	b.Input("x", tensor.Float, "N", 32).Output("y", tensor.Float, "N", 32)
	initializer(t, b, "s", tensor.FromFloat32([]float32{2.0 / 448}))
	initializer(t, b, "z", &tensor.Tensor{DType: tensor.Float8E4M3FN, Data: []uint8{0}})
	b.Node("QuantizeLinear", "q", []string{"x", "s", "z"}, []string{"xq"})
	b.Node("DequantizeLinear", "dq", []string{"xq", "s", "z"}, []string{"xd"})
	b.Node("Relu", "relu", []string{"xd"}, []string{"y"})
	models["fp8"] = b
	return models
}

// exactQDQ asks ONNX Runtime to compute in float32 where it would
// otherwise fuse DequantizeLinear of 4-bit weights and MatMul into
// MatMulNBits with int8 activations (accuracy level 4, its default), which
// is an approximation of the model, off by about 0.3% on int4_block.
var exactQDQ = SessionOptions{IntraOpThreads: 1, Config: []ConfigEntry{{"session.qdq_matmulnbits_accuracy_level", "0"}}}

// TestParityQDQ checks the built-in engine's QDQ simulation against ONNX
// Runtime on quantized models: ONNX Runtime is the runtime the quantized
// models are written for.
func TestParityQDQ(t *testing.T) {
	l := testLibrary(t)
	models := qdqModels(t)
	for _, name := range sortedKeys(models) {
		t.Run(name, func(t *testing.T) {
			m := modelOf(t, models[name])
			compareEngines(t, l, m, randomInputs(t, m, 4), exactQDQ)
		})
	}
}

// TestORTNeedsWeightZeroPoint pins an ONNX Runtime 1.23 behaviour that the
// quantized models we write must avoid: a per-channel DequantizeLinear
// without a zero point, feeding MatMul+Add, is fused into a QGemm that then
// fails at run time, so finalize must write weight zero points.
func TestORTNeedsWeightZeroPoint(t *testing.T) {
	l := testLibrary(t)
	b := qdqModels(t)["qdq_int8"]
	for _, n := range b.Model.Graph.Node {
		if n.GetName() == "w_dq" {
			n.Input = n.Input[:2]
		}
	}
	m := modelOf(t, b)
	e, err := l.Open(m, SessionOptions{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Run(context.Background(), randomInputs(t, m, 2), runtime.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "QGemm") {
		t.Fatalf("err = %v; ONNX Runtime now runs per-channel weights without zero points", err)
	}
	// Without graph optimizations there is no fusion and the model runs.
	e2, err := l.Open(m, SessionOptions{IntraOpThreads: 1, Optimization: OptimizeNone})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if _, err := e2.Run(context.Background(), randomInputs(t, m, 2), runtime.RunOptions{}); err != nil {
		t.Fatal(err)
	}
}

// attentionModel is one Attention node (opset 23) named by its variant:
// Q, K, V of rank 3 or 4 with batch 2, query length 4 and kvSeq new keys,
// heads q/kv of 8 values (V: 6), optional mask (its shape, bool or
// float), past keys and values of length past, attributes attrs, and the
// outputs listed (y first).
type attentionModel struct {
	rank, qHeads, kvHeads, kvSeq, past int
	mask                               []any
	boolMask                           bool
	attrs                              []*onnxpb.AttributeProto
	outputs                            []string
}

// attentionModels are the Attention variants ONNX Runtime 1.23's CPU
// provider agrees on. Left out: softcap together with a mask, and
// qk_matmul_output_mode 1, and 2 with softcap. ONNX Runtime 1.23 follows
// the first text of the op, mask before softcap (mode 1: scores plus
// mask; 2: softcap of that); the op's corrected definition and ONNX's
// reference put softcap first (mode 1: softcapped scores; 2: plus mask),
// as the engine does.
func attentionModels() map[string]attentionModel {
	i := testmodels.AttrInt
	f := testmodels.AttrFloat
	y := []string{"y"}
	all := []string{"y", "present_key", "present_value"}
	qk := []string{"y", "", "", "qk"}
	return map[string]attentionModel{
		"attention_4d":            {rank: 4, qHeads: 3, kvHeads: 3, kvSeq: 5, outputs: y},
		"attention_3d":            {rank: 3, qHeads: 2, kvHeads: 2, kvSeq: 5, outputs: y},
		"attention_4d_gqa":        {rank: 4, qHeads: 6, kvHeads: 2, kvSeq: 5, outputs: y},
		"attention_3d_gqa":        {rank: 3, qHeads: 4, kvHeads: 2, kvSeq: 5, outputs: y},
		"attention_bool_mask_2d":  {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, mask: []any{4, 5}, boolMask: true, outputs: y},
		"attention_float_mask_4d": {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, mask: []any{2, 1, 4, 5}, outputs: y},
		"attention_float_mask_2d": {rank: 3, qHeads: 2, kvHeads: 1, kvSeq: 5, mask: []any{4, 5}, outputs: y},
		"attention_causal":        {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 4, attrs: []*onnxpb.AttributeProto{i("is_causal", 1)}, outputs: y},
		"attention_causal_past":   {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 4, past: 3, attrs: []*onnxpb.AttributeProto{i("is_causal", 1)}, outputs: all},
		"attention_past_3d_gqa":   {rank: 3, qHeads: 4, kvHeads: 2, kvSeq: 4, past: 3, outputs: all},
		"attention_causal_mask":   {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 4, mask: []any{4, 4}, boolMask: true, attrs: []*onnxpb.AttributeProto{i("is_causal", 1)}, outputs: y},
		"attention_scale":         {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, attrs: []*onnxpb.AttributeProto{f("scale", 0.9)}, outputs: y},
		"attention_softcap":       {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, attrs: []*onnxpb.AttributeProto{f("softcap", 1.5)}, outputs: y},
		"attention_qk_mode0":      {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, mask: []any{4, 5}, outputs: qk},
		"attention_qk_mode2":      {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, mask: []any{4, 5}, attrs: []*onnxpb.AttributeProto{i("qk_matmul_output_mode", 2)}, outputs: qk},
		"attention_qk_mode3":      {rank: 4, qHeads: 2, kvHeads: 2, kvSeq: 5, mask: []any{4, 5}, attrs: []*onnxpb.AttributeProto{i("qk_matmul_output_mode", 3)}, outputs: qk},
	}
}

// TestParityAttention compares the engines on the Attention variants with
// random inputs; a bool mask lets every query see its first key, so that
// no row is fully masked (the reference gives NaN there, ONNX Runtime
// does not).
func TestParityAttention(t *testing.T) {
	l := testLibrary(t)
	models := attentionModels()
	for _, name := range sortedKeys(models) {
		t.Run(name, func(t *testing.T) {
			v := models[name]
			const batch, qSeq, head, vHead = 2, 4, 8, 6
			b := testmodels.New(name, 23)
			if v.rank == 4 {
				b.Input("q", tensor.Float, batch, v.qHeads, qSeq, head)
				b.Input("k", tensor.Float, batch, v.kvHeads, v.kvSeq, head)
				b.Input("v", tensor.Float, batch, v.kvHeads, v.kvSeq, vHead)
			} else {
				b.Input("q", tensor.Float, batch, qSeq, v.qHeads*head)
				b.Input("k", tensor.Float, batch, v.kvSeq, v.kvHeads*head)
				b.Input("v", tensor.Float, batch, v.kvSeq, v.kvHeads*vHead)
			}
			inputs := []string{"q", "k", "v", "", "", ""}
			if v.mask != nil {
				dt := tensor.Float
				if v.boolMask {
					dt = tensor.Bool
				}
				b.Input("mask", dt, v.mask...)
				inputs[3] = "mask"
			}
			if v.past > 0 {
				b.Input("past_key", tensor.Float, batch, v.kvHeads, v.past, head)
				b.Input("past_value", tensor.Float, batch, v.kvHeads, v.past, vHead)
				inputs[4], inputs[5] = "past_key", "past_value"
			}
			for inputs[len(inputs)-1] == "" {
				inputs = inputs[:len(inputs)-1]
			}
			attrs := v.attrs
			if v.rank == 3 {
				attrs = append(slices.Clone(attrs), testmodels.AttrInt("q_num_heads", int64(v.qHeads)), testmodels.AttrInt("kv_num_heads", int64(v.kvHeads)))
			}
			for _, o := range v.outputs {
				if o != "" {
					b.Output(o, tensor.Float)
				}
			}
			b.Node("Attention", "attn", inputs, v.outputs, attrs...)
			m := modelOf(t, b)
			in := randomInputs(t, m, batch)
			if mk, ok := in["mask"]; ok && v.boolMask {
				keys := mk.Shape[len(mk.Shape)-1]
				for r, bs := 0, mk.Data.([]bool); r < len(bs); r += keys {
					bs[r] = true
				}
			}
			compareEngines(t, l, m, in, SessionOptions{IntraOpThreads: 1})
		})
	}
}

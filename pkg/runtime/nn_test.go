package runtime

import (
	"fmt"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// runOneNode runs a model made of one op node at opset, its inputs the
// graph inputs fed with ins in order, and returns its one output, of
// declared type out.
func runOneNode(t *testing.T, opset int64, op string, out tensor.DType, ins []*tensor.Tensor, attrs ...*onnxpb.AttributeProto) *tensor.Tensor {
	t.Helper()
	b, feed := oneNodeModel(opset, op, out, ins, attrs...)
	return runModel(t, b, 2, feed)["y"]
}

// feedInputs declares graph inputs in0, in1, ... of b for ins (a nil one
// is an omitted optional input, named "") and returns the node's input
// names and the feed.
func feedInputs(b *testmodels.Builder, ins []*tensor.Tensor) (names []string, feed map[string]*tensor.Tensor) {
	feed = map[string]*tensor.Tensor{}
	for i, x := range ins {
		if x == nil {
			names = append(names, "")
			continue
		}
		name := fmt.Sprintf("in%d", i)
		dims := make([]any, len(x.Shape))
		for j, d := range x.Shape {
			dims[j] = d
		}
		b.Input(name, x.DType, dims...)
		feed[name] = x
		names = append(names, name)
	}
	return names, feed
}

// oneNodeModel is the model runOneNode runs, with its feed: a node named
// op reading graph inputs in0, in1, ... (ins in order; a nil one is an
// omitted optional input) and writing graph output y.
func oneNodeModel(opset int64, op string, out tensor.DType, ins []*tensor.Tensor, attrs ...*onnxpb.AttributeProto) (*testmodels.Builder, map[string]*tensor.Tensor) {
	b := testmodels.New(op, opset)
	names, feed := feedInputs(b, ins)
	b.Output("y", out)
	b.Node(op, op, names, []string{"y"}, attrs...)
	return b, feed
}

// TestLRN checks LRN of even sizes, whose window reaches one more channel
// above than below, and of beta 0.75, which takes square roots, against
// the formula worked out by hand. In each batch entry the channels hold
// 1, 2, 3, 4 at the first position and 4, 3, 2, 1 at the second, so a
// window turned the wrong way shows.
func TestLRN(t *testing.T) {
	x := tensor.FromFloat32([]float32{1, 4, 2, 3, 3, 2, 4, 1, -1, -4, -2, -3, -3, -2, -4, -1}, 2, 4, 1, 2)
	sqrt := math.Sqrt
	own := func(x float64) float64 { return x / math.Pow(7+x*x, 0.75) }
	tests := []struct {
		size              int64
		alpha, beta, bias float32
		want              []float64 // the first batch entry; the second is its negation
	}{
		// Window c..c+1, alpha/size 0.5: y = x / (1 + 0.5·Σx²).
		{2, 1, 1, 1, []float64{1 / 3.5, 4 / 13.5, 2 / 7.5, 3 / 7.5, 3 / 13.5, 2 / 3.5, 4.0 / 9, 1 / 1.5}},
		// Window c−1..c+2, alpha/size 1: y = x / √(2 + Σx²).
		{4, 4, 0.5, 2, []float64{1.0 / 4, 4 / sqrt(31), 2 / sqrt(32), 3 / sqrt(32), 3 / sqrt(31), 2.0 / 4, 4 / sqrt(27), 1 / sqrt(7)}},
		// Window c alone, alpha/size 1: y = x / (7 + x²)^0.75.
		{1, 1, 0.75, 7, []float64{own(1), own(4), own(2), own(3), own(3), own(2), own(4), own(1)}},
	}
	for _, tc := range tests {
		got := runOneNode(t, 13, "LRN", tensor.Float, []*tensor.Tensor{x}, testmodels.AttrInt("size", tc.size),
			testmodels.AttrFloat("alpha", tc.alpha), testmodels.AttrFloat("beta", tc.beta), testmodels.AttrFloat("bias", tc.bias))
		want := append([]float64(nil), tc.want...)
		for _, v := range tc.want {
			want = append(want, -v)
		}
		closeTo(t, fmt.Sprintf("LRN size %d", tc.size), got, x.Shape, want)
	}
}

// TestHardmax checks Hardmax on ties (the first maximum wins), a NaN (it
// wins, as in NumPy's argmax), and the 2-D coercion of opsets before 13
// against one axis from 13 on the same input.
func TestHardmax(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name  string
		opset int64
		axis  int64 // -2: no attribute
		x     *tensor.Tensor
		want  []float32
	}{
		{"ties_axis0", 13, 0, tensor.FromFloat32([]float32{1, 5, 3, 5, 3, 2}, 3, 2), []float32{0, 1, 1, 0, 0, 0}},
		{"flattened_at_axis1", 11, 1, tensor.FromFloat32([]float32{1, 4, 4, 2, 0, 0, 0, 0}, 2, 2, 2), []float32{0, 1, 0, 0, 1, 0, 0, 0}},
		{"along_axis1", 13, 1, tensor.FromFloat32([]float32{1, 4, 4, 2, 0, 0, 0, 0}, 2, 2, 2), []float32{0, 1, 1, 0, 1, 1, 0, 0}},
		{"nan", 13, -2, tensor.FromFloat32([]float32{1, nan, 5}, 1, 3), []float32{0, 1, 0}},
		{"all_equal_default_axis", 11, -2, tensor.FromFloat32([]float32{2, 2, 1, -1, -1, -1}, 2, 3), []float32{1, 0, 0, 1, 0, 0}},
	}
	for _, tc := range tests {
		var attrs []*onnxpb.AttributeProto
		if tc.axis != -2 {
			attrs = append(attrs, testmodels.AttrInt("axis", tc.axis))
		}
		got := runOneNode(t, tc.opset, "Hardmax", tensor.Float, []*tensor.Tensor{tc.x}, attrs...)
		checkBits(t, tc.name, got, tc.x.Shape, tc.want)
	}
}

// TestMVNAxes checks MeanVarianceNormalization over axes other than the
// default, a group of equal values (0, the epsilon keeping it from 0/0),
// and the default axes at opset 9.
func TestMVNAxes(t *testing.T) {
	s := math.Sqrt(1.5) // (x − 2)/std of 1, 2, 3, whose variance is 2/3
	rows := tensor.FromFloat32([]float32{1, 2, 3, 5, 5, 5}, 2, 3)
	want := []float64{-s, 0, s, 0, 0, 0}
	for _, axis := range []int64{1, -1} {
		got := runOneNode(t, 13, "MeanVarianceNormalization", tensor.Float, []*tensor.Tensor{rows}, testmodels.AttrInts("axes", axis))
		closeTo(t, fmt.Sprintf("axes [%d]", axis), got, rows.Shape, want)
	}
	// Per channel over the batch: channel 0 holds 1 and 3, channel 1 holds 2 and 6.
	nchw := tensor.FromFloat32([]float32{1, 2, 3, 6}, 2, 2, 1, 1)
	got := runOneNode(t, 9, "MeanVarianceNormalization", tensor.Float, []*tensor.Tensor{nchw})
	closeTo(t, "default axes", got, nchw.Shape, []float64{-1, -1, 1, 1})
}

// TestLRNThreads checks that LRN's channel planes split over threads give
// the bits of one thread, on planes enough for several chunks.
func TestLRNThreads(t *testing.T) {
	x := randomInput(4, 2, 24, 30, 30)
	b := testmodels.New("lrn", 13)
	b.Input("x", tensor.Float, 2, 24, 30, 30).Output("y", tensor.Float)
	b.Node("LRN", "lrn", []string{"x"}, []string{"y"}, testmodels.AttrInt("size", 5))
	one := runModel(t, b, 1, map[string]*tensor.Tensor{"x": x})["y"]
	many := runModel(t, b, 4, map[string]*tensor.Tensor{"x": x})["y"]
	checkBits(t, "4 threads", many, one.Shape, one.Float32s())
}

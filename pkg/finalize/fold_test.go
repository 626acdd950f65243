package finalize

import (
	"context"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// convBN builds input → Conv(bias?) → BatchNormalization → Relu, plus, when
// shared, a second BatchNormalization on the same Conv output (not
// foldable).
func convBN(t *testing.T, withBias, shared bool) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("convbn", 17)
	b.Input("x", tensor.Float, "N", 2, 5, 5).Output("y", tensor.Float, "N", 3, 5, 5)
	b.RandomInit("w", 0.5, 3, 2, 3, 3)
	conv := []string{"x", "w"}
	if withBias {
		b.RandomInit("cb", 0.2, 3)
		conv = append(conv, "cb")
	}
	b.Init("g", []int64{3}, []float32{1.5, 0.5, -0.7}).Init("beta", []int64{3}, []float32{0.1, -0.2, 0.3})
	b.Init("mean", []int64{3}, []float32{0.05, -0.4, 0.2}).Init("var", []int64{3}, []float32{0.8, 1.7, 0.02})
	n := b.Node("Conv", "/conv/Conv", conv, []string{"c"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	testmodels.Meta(n, "pkg.torch.onnx.name_scopes", "['', 'conv']")
	b.Node("BatchNormalization", "/bn/BatchNormalization", []string{"c", "g", "beta", "mean", "var"}, []string{"bn"}, testmodels.AttrFloat("epsilon", 1e-3))
	b.Node("Relu", "/relu/Relu", []string{"bn"}, []string{"y"})
	if shared {
		b.Init("g2", []int64{3}, []float32{1, 1, 1}).Init("beta2", []int64{3}, []float32{0, 0, 0})
		b.Init("mean2", []int64{3}, []float32{0, 0, 0}).Init("var2", []int64{3}, []float32{1, 1, 1})
		b.Output("z", tensor.Float, "N", 3, 5, 5)
		b.Node("BatchNormalization", "/bn2/BatchNormalization", []string{"c", "g2", "beta2", "mean2", "var2"}, []string{"z"})
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func runGo(t *testing.T, m *onnxgraph.Model, x *tensor.Tensor) map[string][]float32 {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][]float32{}
	for k, v := range out {
		res[k] = v.Float32s()
	}
	return res
}

func TestFoldBatchNorm(t *testing.T) {
	x := tensor.New(tensor.Float, 2, 2, 5, 5)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(math.Sin(float64(i) * 0.37))
	}
	for _, tc := range []struct {
		name             string
		withBias, shared bool
		folds            int
	}{
		{"no bias", false, false, 1},
		{"bias", true, false, 1},
		{"conv output read twice", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := convBN(t, tc.withBias, tc.shared)
			fm, notes, err := FoldBatchNorm(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(notes) != tc.folds {
				t.Fatalf("%d folds (%v), want %d", len(notes), notes, tc.folds)
			}
			bns := 0
			for _, n := range fm.Graph.Nodes {
				if n.OpType == "BatchNormalization" {
					bns++
				}
				if n.OpType == "Conv" {
					if v, ok := n.Metadata("pkg.torch.onnx.name_scopes"); !ok || v != "['', 'conv']" {
						t.Errorf("Conv lost its metadata: %q %v", v, ok)
					}
				}
			}
			if want := 1 - tc.folds; !tc.shared && bns != want {
				t.Errorf("%d BatchNormalization nodes left, want %d", bns, want)
			}
			ref, got := runGo(t, m, x), runGo(t, fm, x)
			for name, r := range ref {
				for i := range r {
					if d := math.Abs(float64(r[i] - got[name][i])); d > 1e-5*(1+math.Abs(float64(r[i]))) {
						t.Fatalf("output %q[%d]: folded %g, original %g", name, i, got[name][i], r[i])
					}
				}
			}
			if tc.folds == 0 && fm != m {
				t.Error("nothing folds but the model was copied")
			}
		})
	}
}

// convTransposeAddBN builds x [N,4,3,3] → ConvTranspose (2×2, stride 2,
// group groups, no bias) → Add of a constant with shape addDims (none when
// nil) → BatchNormalization (when bn) → y [N,6,6,6]: PaddlePaddle writes its
// ConvTranspose bias as such an Add.
func convTransposeAddBN(t *testing.T, groups int64, addDims []int64, bn bool) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("deconv", 17)
	b.Input("x", tensor.Float, "N", 4, 3, 3).Output("y", tensor.Float, "N", 6, 6, 6)
	b.RandomInit("w", 0.5, 4, 6/groups, 2, 2)
	last := func(out string, final bool) string {
		if final {
			return "y"
		}
		return out
	}
	v := last("d", addDims == nil && !bn)
	b.Node("ConvTranspose", "deconv", []string{"x", "w"}, []string{v},
		testmodels.AttrInts("kernel_shape", 2, 2), testmodels.AttrInts("strides", 2, 2), testmodels.AttrInt("group", groups))
	if addDims != nil {
		n := int64(1)
		for _, d := range addDims {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = 0.3*float32(i) - 0.7
		}
		b.Init("c", addDims, vals)
		a := last("a", !bn)
		b.Node("Add", "bias", []string{v, "c"}, []string{a})
		v = a
	}
	if bn {
		b.Init("g", []int64{6}, []float32{1.5, 0.5, -0.7, 1, 2, 0.3}).Init("beta", []int64{6}, []float32{0.1, -0.2, 0.3, 0, 1, -1})
		b.Init("mean", []int64{6}, []float32{0.05, -0.4, 0.2, 0, 0.1, 0.3}).Init("var", []int64{6}, []float32{0.8, 1.7, 0.02, 1, 0.5, 2})
		b.Node("BatchNormalization", "bn", []string{v, "g", "beta", "mean", "var"}, []string{"y"})
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFoldIntoConvTranspose folds a bias Add and a BatchNormalization into
// the ConvTranspose before them, per group (FoldIntoLayers; FoldBatchNorm
// leaves them), and checks that the built-in engine gives the outputs of
// the model as written.
func TestFoldIntoConvTranspose(t *testing.T) {
	x := tensor.New(tensor.Float, 2, 4, 3, 3)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(math.Sin(float64(i) * 0.37))
	}
	for _, tc := range []struct {
		name    string
		groups  int64
		addDims []int64
		bn      bool
		folds   int
		left    []string // op types left besides the ConvTranspose
	}{
		{"add per channel then bn", 1, []int64{1, 6, 1, 1}, true, 2, nil},
		{"add per channel, groups", 2, []int64{6, 1, 1}, false, 1, nil},
		{"bn, groups", 2, nil, true, 1, nil},
		{"scalar add", 1, []int64{}, false, 1, nil},
		{"add per row does not fold", 1, []int64{1, 1, 6, 1}, false, 0, []string{"Add"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := convTransposeAddBN(t, tc.groups, tc.addDims, tc.bn)
			if _, notes, err := FoldBatchNorm(m); err != nil || len(notes) != 0 {
				t.Fatalf("FoldBatchNorm folds %v (%v): it keeps coreai-opt's Conv-only folding", notes, err)
			}
			fm, notes, err := FoldIntoLayers(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(notes) != tc.folds {
				t.Fatalf("%d folds (%v), want %d", len(notes), notes, tc.folds)
			}
			var left []string
			for _, n := range fm.Graph.Nodes {
				if n.OpType != "ConvTranspose" {
					left = append(left, n.OpType)
				}
			}
			if len(left) != len(tc.left) {
				t.Errorf("nodes left besides the ConvTranspose: %v, want %v", left, tc.left)
			}
			ref, got := runGo(t, m, x), runGo(t, fm, x)
			for name, r := range ref {
				for i := range r {
					if d := math.Abs(float64(r[i] - got[name][i])); d > 1e-5*(1+math.Abs(float64(r[i]))) {
						t.Fatalf("output %q[%d]: folded %g, original %g", name, i, got[name][i], r[i])
					}
				}
			}
		})
	}
}

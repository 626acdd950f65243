package finalize

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// randomInputs fills every float input of m (static shape; symbolic dims
// take batch) with values in [-4, 4).
func randomInputs(t *testing.T, m *onnxgraph.Model, batch int, seed uint64) map[string]*tensor.Tensor {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	in := map[string]*tensor.Tensor{}
	for _, v := range m.Graph.Inputs {
		if v.IsInitializer {
			continue
		}
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
		x := tensor.New(tensor.Float, shape...)
		for i := range x.Float32s() {
			x.Float32s()[i] = rng.Float32()*8 - 4
		}
		in[v.Name] = x
	}
	return in
}

// sameOutputs requires bit-identical float outputs (tol 0) or outputs
// within tol relative to the largest magnitude.
func sameOutputs(t *testing.T, want, got map[string]*tensor.Tensor, tol float64) {
	t.Helper()
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		w, g := want[n], got[n]
		if g == nil {
			t.Errorf("output %q missing after the raise", n)
			continue
		}
		if !slices.Equal(w.Shape, g.Shape) {
			t.Errorf("output %q: shape %v, want %v", n, g.Shape, w.Shape)
			continue
		}
		wf, err1 := w.AsFloat32()
		gf, err2 := g.AsFloat32()
		if err1 != nil || err2 != nil {
			t.Fatalf("output %q: %v %v", n, err1, err2)
		}
		scale := 0.0
		for _, v := range wf {
			scale = max(scale, math.Abs(float64(v)))
		}
		bad := 0
		for i := range wf {
			same := math.Float32bits(wf[i]) == math.Float32bits(gf[i])
			if tol > 0 {
				same = math.Abs(float64(wf[i])-float64(gf[i])) <= tol*scale
			}
			if !same {
				if bad == 0 {
					t.Errorf("output %q[%d] = %g after the raise, %g before", n, i, gf[i], wf[i])
				}
				bad++
			}
		}
		if bad > 1 {
			t.Errorf("output %q: %d of %d elements differ", n, bad, len(wf))
		}
	}
}

// nodeByName finds a node of the main graph.
func nodeByName(m *onnxgraph.Model, name string) *onnxpb.NodeProto {
	for _, n := range m.Proto.GetGraph().GetNode() {
		if n.GetName() == name {
			return n
		}
	}
	return nil
}

// TestRaiseOpsetAdapters checks each version adapter on a hand-built
// model: the raised model keeps the adapted node's name and metadata,
// drops the old attributes, and the built-in engine computes the same
// outputs (bit for bit) at both opsets on random inputs.
func TestRaiseOpsetAdapters(t *testing.T) {
	type build func(b *testmodels.Builder) *onnxpb.NodeProto
	tests := []struct {
		name     string
		from, to int64
		build    build
		// oldAttrs must be gone from node "n" after the raise; nodes is
		// the number of nodes after it.
		oldAttrs []string
		nodes    int
		wantErr  string
		// noRun: the built-in engine cannot run the old form; the moved
		// attribute is checked instead.
		noRun bool
	}{
		{"dropout 7 to 13", 7, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
			return b.Node("Dropout", "n", []string{"x"}, []string{"y", "mask"}, testmodels.AttrFloat("ratio", 0.3))
		}, []string{"ratio"}, 1, "", false},
		{"dropout 7 read mask", 7, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3).Output("mask", tensor.Float, 2, 3)
			return b.Node("Dropout", "n", []string{"x"}, []string{"y", "mask"})
		}, nil, 0, `node "n" (Dropout): mask output "mask" is read`, false},
		{"softmax 11 coerced", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 2, 3, 4)
			return b.Node("Softmax", "n", []string{"x"}, []string{"y"})
		}, nil, 4, "", false},
		{"logsoftmax 7 coerced axis 0 symbolic", 7, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, "N", 3, 4).Output("y", tensor.Float, "N", 3, 4)
			return b.Node("LogSoftmax", "n", []string{"x"}, []string{"y"}, testmodels.AttrInt("axis", 0))
		}, nil, 4, "", false},
		{"softmax 7 trailing ones", 7, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, "N", 5, 1, 1).Output("y", tensor.Float, "N", 5, 1, 1)
			return b.Node("Softmax", "n", []string{"x"}, []string{"y"})
		}, nil, 1, "", false},
		{"softmax 11 after global pooling", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 5, 3, 3).Output("y", tensor.Float, 2, 5, 1, 1)
			b.Node("GlobalAveragePool", "gap", []string{"x"}, []string{"p"})
			n := b.Node("Softmax", "n", []string{"p"}, []string{"s"})
			b.Node("Relu", "r", []string{"s"}, []string{"y"})
			return n
		}, nil, 3, "", false},
		{"softmax 11 last axis", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 2, 3, 4)
			return b.Node("Softmax", "n", []string{"x"}, []string{"y"}, testmodels.AttrInt("axis", -1))
		}, nil, 1, "", false},
		{"hardmax 11 coerced", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 2, 3, 4)
			return b.Node("Hardmax", "n", []string{"x"}, []string{"y"})
		}, nil, 4, "", false},
		{"hardmax 7 trailing ones", 7, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, "N", 5, 1, 1).Output("y", tensor.Float, "N", 5, 1, 1)
			return b.Node("Hardmax", "n", []string{"x"}, []string{"y"})
		}, nil, 1, "", false},
		{"lrn 1 to 13 unchanged", 1, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 5, 3, 3).Output("y", tensor.Float, 2, 5, 3, 3)
			return b.Node("LRN", "n", []string{"x"}, []string{"y"}, testmodels.AttrInt("size", 3))
		}, nil, 1, "", false},
		{"rnn 7 to 14 unchanged", 7, 14, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 4, 2, 3).Output("y", tensor.Float, 4, 1, 2, 5)
			b.RandomInit("w", 0.5, 1, 5, 3).RandomInit("r", 0.5, 1, 5, 5)
			return b.Node("RNN", "n", []string{"x", "w", "r"}, []string{"y"}, testmodels.AttrInt("hidden_size", 5))
		}, nil, 1, "", false},
		{"groupnorm 18 to 21 per channel", 18, 21, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 6, 3, 3).Output("y", tensor.Float, 2, 6, 3, 3)
			b.Init("scale", []int64{3}, []float32{0.5, -2, 1.25}).Init("bias", []int64{3}, []float32{0.1, 0, -3})
			return b.Node("GroupNormalization", "n", []string{"x", "scale", "bias"}, []string{"y"}, testmodels.AttrInt("num_groups", 3))
		}, nil, 1, "", false},
		{"groupnorm 18 computed scale", 18, 21, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 6, 3, 3).Input("scale", tensor.Float, 3).Output("y", tensor.Float, 2, 6, 3, 3)
			b.Init("bias", []int64{3}, []float32{0.1, 0, -3})
			return b.Node("GroupNormalization", "n", []string{"x", "scale", "bias"}, []string{"y"}, testmodels.AttrInt("num_groups", 3))
		}, nil, 0, `scale "scale" is not a constant of the graph`, false},
		{"roialign 10 to 16 keeps its coordinates", 10, 16, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 2, 8, 8).Output("y", tensor.Float, 3, 2, 2, 2)
			b.Init("rois", []int64{3, 4}, []float32{0, 0, 4, 4, 1.5, 2.5, 7, 6, 3, 1, 5.5, 7.5})
			b.InitInt64("idx", []int64{3}, []int64{0, 0, 0})
			return b.Node("RoiAlign", "n", []string{"x", "rois", "idx"}, []string{"y"},
				testmodels.AttrInt("output_height", 2), testmodels.AttrInt("output_width", 2), testmodels.AttrInt("sampling_ratio", 2))
		}, nil, 1, "", false},
		{"upsample 7 nearest to 13", 7, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 2, 3, 4).Output("y", tensor.Float, 1, 2, 6, 8)
			return b.Node("Upsample", "n", []string{"x"}, []string{"y"}, testmodels.AttrFloats("scales", 1, 1, 2, 2))
		}, []string{"scales"}, 1, "", false},
		{"upsample 9 linear to 13", 9, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 2, 3, 4).Output("y", tensor.Float, 1, 2, 6, 12)
			b.Init("s", []int64{4}, []float32{1, 1, 2, 3})
			return b.Node("Upsample", "n", []string{"x", "s"}, []string{"y"}, testmodels.AttrString("mode", "linear"))
		}, nil, 1, "", false},
		{"upsample 9 to 10", 9, 10, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 2, 3, 4).Output("y", tensor.Float, 1, 2, 6, 8)
			b.Init("s", []int64{4}, []float32{1, 1, 2, 2})
			return b.Node("Upsample", "n", []string{"x", "s"}, []string{"y"})
		}, nil, 1, "", false},
		{"resize 10 nearest to 13", 10, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 2, 3, 5).Output("y", tensor.Float, 1, 2, 4, 8)
			b.Init("s", []int64{4}, []float32{1, 1, 1.5, 1.7})
			return b.Node("Resize", "n", []string{"x", "s"}, []string{"y"})
		}, nil, 1, "", false},
		{"resize 10 linear to 19", 10, 19, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 2, 3, 5).Output("y", tensor.Float, 1, 2, 6, 10)
			b.Init("s", []int64{4}, []float32{1, 1, 2, 2})
			return b.Node("Resize", "n", []string{"x", "s"}, []string{"y"}, testmodels.AttrString("mode", "linear"))
		}, nil, 1, "", false},
		{"clip 6 to 13", 6, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 8).Output("y", tensor.Float, 2, 8)
			return b.Node("Clip", "n", []string{"x"}, []string{"y"}, testmodels.AttrFloat("min", -1), testmodels.AttrFloat("max", 2.5))
		}, []string{"min", "max"}, 1, "", false},
		{"clip 6 max only", 6, 11, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 8).Output("y", tensor.Float, 2, 8)
			b.Node("Relu", "r", []string{"x"}, []string{"r"})
			return b.Node("Clip", "n", []string{"r"}, []string{"y"}, testmodels.AttrFloat("max", 1.5))
		}, []string{"max"}, 2, "", false},
		{"unsqueeze squeeze 11 to 13", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
			b.Node("Unsqueeze", "u", []string{"x"}, []string{"u"}, testmodels.AttrInts("axes", 0, 3))
			return b.Node("Squeeze", "n", []string{"u"}, []string{"y"}, testmodels.AttrInts("axes", -1, 0))
		}, []string{"axes"}, 2, "", false},
		{"reducesum 11 to 13", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 3)
			return b.Node("ReduceSum", "n", []string{"x"}, []string{"y"}, testmodels.AttrInts("axes", 0, 2), testmodels.AttrInt("keepdims", 0))
		}, []string{"axes"}, 1, "", false},
		{"reducemean 13 to 18", 13, 18, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 2, 1, 1)
			return b.Node("ReduceMean", "n", []string{"x"}, []string{"y"}, testmodels.AttrInts("axes", -1, 1))
		}, []string{"axes"}, 1, "", false},
		{"reducemax 13 to 18 all axes", 13, 18, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 1, 1, 1)
			return b.Node("ReduceMax", "n", []string{"x"}, []string{"y"})
		}, nil, 1, "", false},
		{"split 11 to 13", 11, 13, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 6).Output("a", tensor.Float, 2, 2).Output("c", tensor.Float, 2, 4)
			return b.Node("Split", "n", []string{"x"}, []string{"a", "c"}, testmodels.AttrInt("axis", 1), testmodels.AttrInts("split", 2, 4))
		}, []string{"split"}, 1, "", false},
		{"pad 7 to 11", 7, 11, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 3, 6)
			return b.Node("Pad", "n", []string{"x"}, []string{"y"}, testmodels.AttrInts("pads", 0, 1, 1, 2), testmodels.AttrFloat("value", 0.75))
		}, []string{"pads", "value"}, 1, "", false},
		{"slice 7 to 10", 7, 10, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 4, 6).Output("y", tensor.Float, 2, 3)
			return b.Node("Slice", "n", []string{"x"}, []string{"y"}, testmodels.AttrInts("starts", 1, 2), testmodels.AttrInts("ends", 3, 100), testmodels.AttrInts("axes", 0, 1))
		}, []string{"starts", "ends", "axes"}, 1, "", false},
		{"reshape 4 to 5", 4, 5, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 6).Output("y", tensor.Float, 3, 4)
			return b.Node("Reshape", "n", []string{"x"}, []string{"y"}, testmodels.AttrInts("shape", 3, -1))
		}, []string{"shape"}, 1, "", true},
		{"topk 7 to 10", 7, 10, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 6).Output("v", tensor.Float, 2, 3)
			return b.Node("TopK", "n", []string{"x"}, []string{"v", "i"}, testmodels.AttrInt("k", 3))
		}, []string{"k"}, 1, "", false},
		{"batchnorm 7 to 9", 7, 9, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3, 2, 2).Output("y", tensor.Float, 2, 3, 2, 2)
			b.Init("s", []int64{3}, []float32{1, 2, 0.5}).Init("b", []int64{3}, []float32{0, 1, -1})
			b.Init("m", []int64{3}, []float32{0.1, 0.2, 0.3}).Init("v", []int64{3}, []float32{1, 4, 0.25})
			return b.Node("BatchNormalization", "n", []string{"x", "s", "b", "m", "v"}, []string{"y"}, testmodels.AttrInt("spatial", 1))
		}, []string{"spatial"}, 1, "", false},
		{"batchnorm spatial 0", 7, 9, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
			b.Init("s", []int64{3}, []float32{1, 2, 0.5}).Init("b", []int64{3}, []float32{0, 1, -1})
			b.Init("m", []int64{3}, []float32{0.1, 0.2, 0.3}).Init("v", []int64{3}, []float32{1, 4, 0.25})
			return b.Node("BatchNormalization", "n", []string{"x", "s", "b", "m", "v"}, []string{"y"}, testmodels.AttrInt("spatial", 0))
		}, nil, 0, "spatial=0", false},
		{"add 6 same shapes", 6, 7, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Input("z", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
			return b.Node("Add", "n", []string{"x", "z"}, []string{"y"})
		}, nil, 1, "", false},
		{"add 6 legacy broadcast", 6, 7, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 2, 3).Input("z", tensor.Float, 3).Output("y", tensor.Float, 2, 3)
			return b.Node("Add", "n", []string{"x", "z"}, []string{"y"}, testmodels.AttrInt("broadcast", 1))
		}, nil, 0, "broadcast=1", false},
		{"upsample 1 has no rewrite", 6, 10, func(b *testmodels.Builder) *onnxpb.NodeProto {
			b.Input("x", tensor.Float, 1, 1, 2, 2).Output("y", tensor.Float, 1, 1, 4, 4)
			return b.Node("Upsample", "n", []string{"x"}, []string{"y"}, testmodels.AttrFloat("height_scale", 2), testmodels.AttrFloat("width_scale", 2))
		}, nil, 0, "height_scale and width_scale", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testmodels.New("m", tt.from)
			n := tt.build(b)
			testmodels.Meta(n, "pkg.torch.onnx.name_scopes", "['', 'head']")
			m, err := onnxgraph.LoadBytes(b.Bytes(), "")
			if err != nil {
				t.Fatal(err)
			}
			before := m.Proto.String()
			r, notes, err := RaiseOpset(m, tt.to)
			if m.Proto.String() != before {
				t.Error("RaiseOpset changed its input")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Opset("") != tt.to || r.Proto.GetIrVersion() < irForOpset(tt.to) {
				t.Errorf("opset %d IR %d, want %d and at least %d", r.Opset(""), r.Proto.GetIrVersion(), tt.to, irForOpset(tt.to))
			}
			if got := len(r.Proto.GetGraph().GetNode()); got != tt.nodes {
				t.Errorf("%d nodes after the raise, want %d", got, tt.nodes)
			}
			rn := nodeByName(r, "n")
			want := n.GetOpType()
			if want == "Upsample" {
				want = "Resize" // its replacement from opset 10
			}
			if rn == nil || rn.GetOpType() != want {
				t.Fatalf("node %q (%s) not kept as %s", "n", n.GetOpType(), want)
			}
			if len(rn.GetMetadataProps()) != 1 || rn.GetMetadataProps()[0].GetValue() != "['', 'head']" {
				t.Errorf("metadata_props %v not kept", rn.GetMetadataProps())
			}
			for _, a := range rn.GetAttribute() {
				if slices.Contains(tt.oldAttrs, a.GetName()) {
					t.Errorf("attribute %q left on the node", a.GetName())
				}
			}
			for _, h := range r.Proto.GetGraph().GetNode() {
				if h != rn && h.GetName() != "r" && h.GetName() != "u" && h.GetName() != "gap" && len(h.GetMetadataProps()) != 1 {
					t.Errorf("inserted node %q has no metadata_props", h.GetName())
				}
			}
			if len(notes) == 0 && tt.nodes > 1 {
				t.Error("no note for the rewrite")
			}
			if tt.noRun {
				c := r.Graph.Value(rn.GetInput()[1])
				var got []int64
				if c != nil && c.Const != nil {
					if x, err := tensor.FromProto(c.Const, r); err == nil && x.DType == tensor.Int64 {
						got = x.Data.([]int64)
					}
				}
				if !slices.Equal(got, n.GetAttribute()[0].GetInts()) {
					t.Errorf("input 1 %q does not hold the attribute %v", rn.GetInput()[1], n.GetAttribute()[0].GetInts())
				}
				return
			}
			in := randomInputs(t, m, 3, 1)
			sameOutputs(t, enginetest.Run(t, m, in), enginetest.Run(t, r, in), 0)
		})
	}
}

// TestRaiseOpsetHardmax checks the Hardmax rewrite's shape: the ops around
// it and its axis on the flattened input (TestRaiseOpsetAdapters runs it).
// TestRaiseOpsetGridSampleModes: opset 20 renamed GridSample's bilinear
// and bicubic modes; a raise from 16 writes the new names, and the built-in
// engine computes the same bits at both opsets.
func TestRaiseOpsetGridSampleModes(t *testing.T) {
	for _, c := range []struct{ from, to string }{{"bilinear", "linear"}, {"bicubic", "cubic"}, {"nearest", "nearest"}} {
		b := testmodels.New("grid", 16)
		b.Input("x", tensor.Float, 1, 2, 5, 6).Input("grid", tensor.Float, 1, 3, 4, 2).Output("y", tensor.Float, 1, 2, 3, 4)
		b.Node("GridSample", "n", []string{"x", "grid"}, []string{"y"}, testmodels.AttrString("mode", c.from))
		m, err := onnxgraph.LoadBytes(b.Bytes(), "")
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := RaiseOpset(m, 20)
		if err != nil {
			t.Fatalf("%s: %v", c.from, err)
		}
		var mode string
		for _, n := range r.Graph.Nodes {
			if a := n.Attr("mode"); a != nil {
				mode = string(a.GetS())
			}
		}
		if mode != c.to {
			t.Errorf("mode %s raised to opset 20 reads %q, want %q", c.from, mode, c.to)
		}
		in := randomInputs(t, m, 1, 5)
		for i, v := range in["grid"].Float32s() {
			in["grid"].Float32s()[i] = v / 4 // inside [−1, 1]
		}
		sameOutputs(t, enginetest.Run(t, m, in), enginetest.Run(t, r, in), 0)
	}
}

func TestRaiseOpsetHardmax(t *testing.T) {
	b := testmodels.New("m", 11)
	b.Input("x", tensor.Float, 2, 3, 4).Output("y", tensor.Float, 2, 3, 4)
	b.Node("Hardmax", "n", []string{"x"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := RaiseOpset(m, 13)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, n := range r.Graph.Nodes {
		ops = append(ops, n.OpType)
	}
	if want := []string{"Flatten", "Hardmax", "Reshape", "Shape"}; !slices.Equal(sorted(ops), want) {
		t.Errorf("ops %v, want %v", ops, want)
	}
	if a := r.Graph.Node("n").Attr("axis"); a == nil || a.GetI() != 1 {
		t.Errorf("Hardmax axis %v, want 1 on the flattened input", a)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRaiseOpsetSharedModels raises the old-opset shared models to the
// opsets the presets need and runs both versions on calibration samples:
// the outputs must be bit-identical.
func TestRaiseOpsetSharedModels(t *testing.T) {
	root := testutil.SharedModels(t)
	tests := []struct {
		model, input string
		batch        int
		to           []int64
	}{
		{"squeezenet1.0-fp32", "data_0", 2, []int64{13, 21}},
		{"mnist-cntk-op8", "Input3", 1, []int64{13, 23}},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			dir := filepath.Join(root, tt.model)
			m, err := onnxgraph.Load(filepath.Join(dir, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			x, err := npy.ReadNPYFile(filepath.Join(dir, "calib_"+tt.input+".npy"))
			if err != nil {
				t.Fatal(err)
			}
			per := tensor.NumElements(x.Shape[1:])
			shape := append([]int{tt.batch}, x.Shape[1:]...)
			in := map[string]*tensor.Tensor{tt.input: tensor.FromFloat32(slices.Clone(x.Float32s()[:tt.batch*per]), shape...)}
			want := enginetest.Run(t, m, in)
			for _, to := range tt.to {
				r, notes, err := RaiseOpset(m, to)
				if err != nil {
					t.Fatalf("opset %d: %v", to, err)
				}
				t.Logf("opset %d: %q", to, notes)
				sameOutputs(t, want, enginetest.Run(t, r, in), 0)
			}
		})
	}
}

package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestConvPatches: each group's weight rows times ConvPatches' rows of
// that group give the engine's Conv output at every position, for
// strides, dilations, explicit and automatic padding, groups and depthwise,
// in 1-D and 2-D.
func TestConvPatches(t *testing.T) {
	cases := []struct {
		name   string
		in, w  []int
		attrs  []*onnxpb.AttributeProto
		groups int
	}{
		{"3x3 pad 1", []int{2, 4, 7, 6}, []int{5, 4, 3, 3}, []*onnxpb.AttributeProto{testmodels.AttrInts("pads", 1, 1, 1, 1)}, 1},
		{"stride 2 dilation 2 uneven pads", []int{1, 3, 11, 9}, []int{4, 3, 3, 2},
			[]*onnxpb.AttributeProto{testmodels.AttrInts("strides", 2, 2), testmodels.AttrInts("dilations", 2, 2), testmodels.AttrInts("pads", 1, 0, 2, 1)}, 1},
		{"SAME_UPPER", []int{2, 2, 8, 8}, []int{3, 2, 3, 3}, []*onnxpb.AttributeProto{testmodels.AttrString("auto_pad", "SAME_UPPER"), testmodels.AttrInts("strides", 2, 2)}, 1},
		{"groups", []int{2, 6, 5, 5}, []int{4, 3, 3, 3}, []*onnxpb.AttributeProto{testmodels.AttrInt("group", 2), testmodels.AttrInts("pads", 1, 1, 1, 1)}, 2},
		{"depthwise", []int{1, 5, 6, 6}, []int{5, 1, 3, 3}, []*onnxpb.AttributeProto{testmodels.AttrInt("group", 5), testmodels.AttrInts("strides", 2, 2)}, 5},
		{"1-D", []int{3, 4, 10}, []int{2, 4, 3}, []*onnxpb.AttributeProto{testmodels.AttrInts("pads", 2, 0)}, 1},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := testmodels.New("conv", 17)
			b.Input("x", tensor.Float, anyDims(c.in)...)
			b.Output("y", tensor.Float)
			wd := make([]int64, len(c.w))
			for i, d := range c.w {
				wd[i] = int64(d)
			}
			b.RandomInit("w", 1, wd...)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"y"}, c.attrs...)
			x := tensor.New(tensor.Float, c.in...)
			for i := range x.Float32s() {
				x.Float32s()[i] = float32(rng.NormFloat64())
			}
			y := runModel(t, b, 2, map[string]*tensor.Tensor{"x": x})["y"]
			m, err := onnxgraph.LoadBytes(b.Bytes(), "")
			if err != nil {
				t.Fatal(err)
			}
			p, err := ConvPatches(m.Graph.Nodes[0], x, c.w, 2)
			if err != nil {
				t.Fatal(err)
			}
			w, _, err := constOf(m, "w")
			if err != nil {
				t.Fatal(err)
			}
			n, out := c.in[0], c.w[0]
			kg := tensor.NumElements(c.w[1:])
			positions := tensor.NumElements(y.Shape[2:])
			if want := append([]int{n, c.groups * kg}, y.Shape[2:]...); fmt.Sprint(p.Shape) != fmt.Sprint(want) {
				t.Fatalf("patches of shape %v, want %v", p.Shape, want)
			}
			ng := out / c.groups
			pd, yd := p.Float32s(), y.Float32s()
			for i := range n {
				for o := range out {
					g := o / ng
					for pos := range positions {
						var sum float64
						for k := range kg {
							sum += float64(w[o*kg+k]) * float64(pd[((i*c.groups+g)*kg+k)*positions+pos])
						}
						if got := float64(yd[(i*out+o)*positions+pos]); math.Abs(got-sum) > 1e-4*(1+math.Abs(sum)) {
							t.Fatalf("image %d, output %d, position %d: Conv gives %g, weights × patches %g", i, o, pos, got, sum)
						}
					}
				}
			}
		})
	}
}

func anyDims(d []int) []any {
	out := make([]any, len(d))
	for i, v := range d {
		out[i] = v
	}
	return out
}

// constOf reads an initializer of m as float32.
func constOf(m *onnxgraph.Model, name string) ([]float32, []int, error) {
	t, err := tensor.FromProto(m.Graph.Value(name).Const, m)
	if err != nil {
		return nil, nil, err
	}
	return t.Float32s(), t.Shape, nil
}

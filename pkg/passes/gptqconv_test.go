package passes

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// convGeometry is what the test's own patch builder needs of a Conv:
// everything the engine reads from the node, written out again here.
type convGeometry struct {
	group                    int
	strides, dilations, pads []int // pads: begins then ends
}

// convGPTQLayers are the Convs of convGPTQModel with their geometry.
var convGPTQLayers = []struct {
	node, weight, input string
	geom                convGeometry
}{
	{"convA", "wA", "x", convGeometry{1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}}},
	{"convB", "wB", "rA", convGeometry{2, []int{2, 2}, []int{1, 1}, []int{0, 1, 1, 0}}},
	{"convC", "wC", "rB", convGeometry{8, []int{1, 1}, []int{2, 2}, []int{2, 2, 2, 2}}},
}

// convGPTQModel is x [n, 4, 10, 10] → Conv 4→8 3×3 (pads 1) → Relu →
// Conv 8→8 3×3 in 2 groups (strides 2, asymmetric pads) → Relu → depthwise
// Conv 8 3×3 (dilations 2, pads 2) → y [n, 8, 5, 5]: a plain, a grouped
// and a depthwise convolution, each with a geometry of its own.
func convGPTQModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(31, 32))
	normal := normalDraws(rng)
	b := testmodels.New("convs", 17)
	b.Input("x", tensor.Float, "n", 4, 10, 10).Output("y", tensor.Float, "n", 8, 5, 5)
	b.Init("wA", []int64{8, 4, 3, 3}, normal(8*4*9, 0.3))
	b.Init("bA", []int64{8}, normal(8, 0.1))
	b.Init("wB", []int64{8, 4, 3, 3}, normal(8*4*9, 0.3))
	b.Init("wC", []int64{8, 1, 3, 3}, normal(8*9, 0.5))
	b.Init("bC", []int64{8}, normal(8, 0.1))
	for _, l := range convGPTQLayers {
		ins := []string{l.input, l.weight}
		if l.weight != "wB" {
			ins = append(ins, "b"+l.weight[1:])
		}
		out := map[string]string{"convA": "hA", "convB": "hB", "convC": "y"}[l.node]
		b.Node("Conv", l.node, ins, []string{out}, testmodels.AttrInt("group", int64(l.geom.group)),
			testmodels.AttrInts("strides", toInt64s(l.geom.strides)...), testmodels.AttrInts("dilations", toInt64s(l.geom.dilations)...),
			testmodels.AttrInts("pads", toInt64s(l.geom.pads)...))
	}
	b.Node("Relu", "reluA", []string{"hA"}, []string{"rA"})
	b.Node("Relu", "reluB", []string{"hB"}, []string{"rB"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func toInt64s(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// naivePatches returns, for each group, the patch rows of the image x
// [c, spatial...] under the geometry: one row per output position, the
// features ordered (channel of the group, kernel position), zero in the
// padding. Written from the ONNX Conv definition, position by position.
func naivePatches(x []float32, c int, in, kernel []int, geom convGeometry) [][][]float64 {
	rank := len(in)
	out := make([]int, rank)
	for d := range rank {
		eff := geom.dilations[d]*(kernel[d]-1) + 1
		out[d] = (in[d]+geom.pads[d]+geom.pads[rank+d]-eff)/geom.strides[d] + 1
	}
	cg := c / geom.group
	ks := tensor.NumElements(kernel)
	groups := make([][][]float64, geom.group)
	for p := range tensor.NumElements(out) {
		pos := unflatten(p, out)
		for g := range geom.group {
			row := make([]float64, cg*ks)
			for ci := range cg {
				for kp := range ks {
					kpos := unflatten(kp, kernel)
					idx, inside := 0, true
					for d := range rank {
						v := pos[d]*geom.strides[d] - geom.pads[d] + kpos[d]*geom.dilations[d]
						if v < 0 || v >= in[d] {
							inside = false
							break
						}
						idx = idx*in[d] + v
					}
					if inside {
						row[ci*ks+kp] = float64(x[(g*cg+ci)*tensor.NumElements(in)+idx])
					}
				}
			}
			groups[g] = append(groups[g], row)
		}
	}
	return groups
}

// unflatten is the row-major multi-index of flat index i in shape.
func unflatten(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
	return idx
}

// TestGPTQConvPatchGram checks the XᵀX GPTQ sums for each group of a
// Conv from the engine's patches against the sum computed here from the
// ONNX definition of a convolution, for a plain, a grouped (strided,
// asymmetric pads) and a depthwise (dilated) 2-D Conv and a 1-D one, over
// two batches.
func TestGPTQConvPatchGram(t *testing.T) {
	m := convGPTQModel(t)
	type layer struct {
		node  *onnxgraph.Node
		shape []int
		geom  convGeometry
		in    []int // input [c, spatial...]
	}
	// Each reads 24×24 images here (more columns than one float32 chunk
	// sums, in one image and across images): the gram depends on the geometry,
	// not on the size the model gives the input.
	channels := map[string]int{"x": 4, "rA": 8, "rB": 8}
	var layers []layer
	for _, l := range convGPTQLayers {
		w := m.Graph.Value(l.weight)
		layers = append(layers, layer{m.Graph.Value(l.input).Consumers[0], intShape(w.Const.GetDims()), l.geom, []int{channels[l.input], 24, 24}})
	}
	b := testmodels.New("conv1d", 17)
	b.Input("s", tensor.Float, "n", 6, 17).Output("z", tensor.Float, "n", 4, 6)
	b.Init("w1", []int64{4, 3, 5}, make([]float32, 4*3*5))
	geom1 := convGeometry{2, []int{3}, []int{1}, []int{2, 1}}
	b.Node("Conv", "conv1d", []string{"s", "w1"}, []string{"z"}, testmodels.AttrInt("group", 2),
		testmodels.AttrInts("strides", 3), testmodels.AttrInts("pads", 2, 1))
	m1, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	layers = append(layers, layer{m1.Graph.Value("s").Consumers[0], []int{4, 3, 5}, geom1, []int{6, 17}})
	rng := rand.New(rand.NewPCG(5, 6))
	for _, l := range layers {
		t.Run(l.node.Name, func(t *testing.T) {
			k := tensor.NumElements(l.shape[1:])
			per := l.shape[0] / l.geom.group
			gl := &gptqLayer{node: l.node, shape: l.shape}
			want := make([][]float64, l.geom.group)
			for g := range l.geom.group {
				gl.groups = append(gl.groups, &gptqLayer{k: k, n: per, transposed: true, offset: g * per * k,
					xtx: &gramAccumulator{value: "x", k: k, sum: make([]float64, k*k), threads: 2}})
				want[g] = make([]float64, k*k)
			}
			for _, batch := range []int{5, 2} {
				img := tensor.NumElements(l.in)
				x := make([]float32, batch*img)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				if err := gl.addPatches(tensor.FromFloat32(x, append([]int{batch}, l.in...)...), 2); err != nil {
					t.Fatal(err)
				}
				for i := range batch {
					for g, rows := range naivePatches(x[i*img:(i+1)*img], l.in[0], l.in[1:], l.shape[2:], l.geom) {
						for _, r := range rows {
							for a := range k {
								for c := a; c < k; c++ {
									want[g][a*k+c] += r[a] * r[c]
								}
							}
						}
					}
				}
			}
			for g, v := range gl.groups {
				for a := range k {
					for c := a; c < k; c++ {
						got, w := v.xtx.sum[a*k+c], want[g][a*k+c]
						if math.Abs(got-w) > 1e-4*(1+math.Abs(w)) {
							t.Fatalf("group %d: XᵀX[%d,%d] = %g, want %g", g, a, c, got, w)
						}
					}
				}
			}
		})
	}
}

// TestGPTQConvLowersReconstructionError checks on convGPTQModel (fixed
// seeds), for int4 weights per channel, per block along the input
// channels and uint4 asymmetric, that every Conv's GPTQ rounding has a
// lower reconstruction error ‖X(W − Ŵ)‖², summed over its groups, than
// round-to-nearest, X being the layer's patches (built here from the
// ONNX definition) on its input in the model with the layers before it
// rounded, which is what GPTQ fits; that the written weights are codes of
// prepare's qparams; and that the report agrees.
func TestGPTQConvLowersReconstructionError(t *testing.T) {
	cases := []struct{ name, weight string }{
		{"int4 per channel", "{dtype: int4, qscheme: symmetric, granularity: {type: per_channel}}"},
		{"int4 per block 2", "{dtype: int4, qscheme: symmetric, granularity: {type: per_block, block_size: 2}}"},
		{"uint4 asymmetric per channel", "{dtype: uint4, qscheme: asymmetric, granularity: {type: per_channel}}"},
	}
	src := newSampleSource(41, 24, 4, 10, 10)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := "quantization_config:\n  global_config:\n    op_input_spec: null\n    op_output_spec: null\n    op_state_spec:\n      weight: " + c.weight + "\n"
			cfg, err := config.Parse([]byte(text), "weights.yaml")
			if err != nil {
				t.Fatal(err)
			}
			float := convGPTQModel(t)
			plain := quantizeWith(t, convGPTQModel(t), "", nil, src, cfg.Quant)
			u := quantizeWith(t, float, "", algorithms(t, "algorithms:\n  gptq: {samples: 24}\n"), src, cfg.Quant)
			reported := map[string]LayerReport{}
			for _, l := range u.Layers {
				if l.Algorithm == gptqAlgorithmName {
					reported[l.Node] = l
				}
			}
			inputs := runValues(t, u.Model, src, "rA", "rB")
			inputs["x"] = tensor.FromFloat32(src.x, append([]int{src.n}, src.shape...)...)
			orig := convGPTQModel(t)
			for _, layer := range convGPTQLayers {
				w, got, shape, tp := roundedWeight(t, orig, u, plain, layer.weight)
				flat := []int{shape[0], tensor.NumElements(shape[1:])}
				if tp.BlockSize == 0 {
					checkOnGrid(t, layer.weight, got, flat, tp)
				}
				rtn, err := finalize.FakeQuantize(w, shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
				if err != nil {
					t.Fatal(err)
				}
				if again, err := finalize.FakeQuantize(got, shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params); err != nil || !slices.Equal(again, got) {
					t.Fatalf("%s: the rounded weight is not on its grid (%v)", layer.weight, err)
				}
				x := inputs[layer.input]
				in := x.Shape[1:]
				img := tensor.NumElements(in)
				k, per := flat[1], shape[0]/layer.geom.group
				var errRTN, errGPTQ float64
				xs := x.Float32s()
				for i := range x.Shape[0] {
					for g, rows := range naivePatches(xs[i*img:(i+1)*img], in[0], in[1:], shape[2:], layer.geom) {
						at := func(kk, o int) int { return (g*per+o)*k + kk }
						errRTN += reconstructionError(rows, w, rtn, per, at)
						errGPTQ += reconstructionError(rows, w, got, per, at)
					}
				}
				checkGPTQGain(t, layer.node, errRTN, errGPTQ, reported)
			}
		})
	}
}

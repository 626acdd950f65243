package passes

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// adaroundModel has one layer of every kind AdaRound rounds: x [n,3,8,8]
// → Conv 3→8 (3×3) → Relu → grouped Conv 8→8 (group 2) → Relu →
// ConvTranspose 8→6 (2×2, stride 2, group 2) → Relu → GlobalAveragePool
// → Flatten → Gemm (transB, 6→5) → Relu → MatMul 5→4 → y.
func adaroundModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(31, 32))
	normal := normalDraws(rng)
	b := testmodels.New("adaround", 17)
	b.Input("x", tensor.Float, "n", 3, 8, 8).Output("y", tensor.Float, "n", 4)
	scaledConv(b, rng, "w1", 8, 3, 3)
	b.Init("w2", []int64{8, 4, 3, 3}, normal(8*4*9, 0.3))
	b.Init("w2_b", []int64{8}, normal(8, 0.1))
	b.Init("w3", []int64{8, 3, 2, 2}, normal(8*3*4, 0.3))
	b.Init("w3_b", []int64{6}, normal(6, 0.1))
	b.Init("w4", []int64{5, 6}, normal(30, 0.5))
	b.Init("w4_b", []int64{5}, normal(5, 0.1))
	b.Init("w5", []int64{5, 4}, normal(20, 0.5))
	pads := testmodels.AttrInts("pads", 1, 1, 1, 1)
	b.Node("Conv", "conv", []string{"x", "w1", "w1_b"}, []string{"c1"}, pads)
	b.Node("Relu", "relu1", []string{"c1"}, []string{"r1"})
	b.Node("Conv", "grouped", []string{"r1", "w2", "w2_b"}, []string{"c2"}, pads, testmodels.AttrInt("group", 2))
	b.Node("Relu", "relu2", []string{"c2"}, []string{"r2"})
	b.Node("ConvTranspose", "up", []string{"r2", "w3", "w3_b"}, []string{"c3"},
		testmodels.AttrInts("strides", 2, 2), testmodels.AttrInt("group", 2))
	b.Node("Relu", "relu3", []string{"c3"}, []string{"r3"})
	b.Node("GlobalAveragePool", "gap", []string{"r3"}, []string{"p"})
	b.Node("Flatten", "flatten", []string{"p"}, []string{"f"})
	b.Node("Gemm", "fc", []string{"f", "w4", "w4_b"}, []string{"g"}, testmodels.AttrInt("transB", 1))
	b.Node("Relu", "relu4", []string{"g"}, []string{"r4"})
	b.Node("MatMul", "proj", []string{"r4", "w5"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// adaroundConfig quantizes activations to uint8 and weights to int4 per
// channel: coarse weights, so that the rounding direction matters.
const adaroundConfig = `quantization_spec:
  activation: &a {dtype: uint8, qscheme: asymmetric, granularity: {type: per_tensor}, qparam_calculator: global_minmax}
  weight: &w {dtype: int4, qscheme: symmetric, granularity: {type: per_channel}, qparam_calculator: static}
quantization_config:
  global_config:
    op_input_spec: {"*": *a}
    op_output_spec: {"*": *a}
    op_state_spec: {weight: *w}
`

func quantizeAdaRound(t *testing.T, algorithmsText string, threads int) *Unit {
	t.Helper()
	cfg, err := config.Parse([]byte(adaroundConfig+algorithmsText), "adaround.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: adaroundModel(t), Config: cfg.Quant, Algorithms: cfg.Algorithms,
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			return observe(t, m, plan), nil
		},
		Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: newSampleSource(41, 24, 3, 8, 8), BatchSize: 5}}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

// runValues runs m on the whole source and returns the named values.
func runValues(t *testing.T, m *onnxgraph.Model, src *sampleSource, names ...string) map[string]*tensor.Tensor {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, _ := src.Batch(0, src.n)
	out, err := runKeeping(context.Background(), s, in, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if out[n] == nil {
			t.Fatalf("value %q not computed", n)
		}
	}
	return out
}

// layerSquaredError runs the node alone (its attributes, weight w and its
// bias) on x and returns Σ (y − want)² and Σ want².
func layerSquaredError(t *testing.T, m *onnxgraph.Model, n *onnxgraph.Node, x *tensor.Tensor, w []float32, want *tensor.Tensor) (float64, float64) {
	t.Helper()
	g := &onnxpb.GraphProto{Name: proto.String("layer")}
	_, shape, err := constFloats(m, n.Inputs[1])
	if err != nil {
		t.Fatal(err)
	}
	wp, err := tensor.ToProto(tensor.FromFloat32(w, shape...), "w")
	if err != nil {
		t.Fatal(err)
	}
	g.Initializer = append(g.Initializer, wp)
	inputs := []string{"x", "w"}
	if len(n.Inputs) > 2 && n.Inputs[2] != nil {
		bp := proto.CloneOf(n.Inputs[2].Const)
		bp.Name = proto.String("b")
		g.Initializer = append(g.Initializer, bp)
		inputs = append(inputs, "b")
	}
	g.Input = append(g.Input, floatValueInfo("x"))
	g.Output = append(g.Output, floatValueInfo("y"))
	np := proto.CloneOf(n.Proto)
	np.Input, np.Output = inputs, []string{"y"}
	g.Node = append(g.Node, np)
	lm, err := onnxgraph.FromProto(&onnxpb.ModelProto{IrVersion: m.Proto.IrVersion, OpsetImport: m.Proto.GetOpsetImport(), Graph: g}, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.NewGoSession(lm, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := out["y"].AsFloat32()
	ref, _ := want.AsFloat32()
	var e, sig float64
	for i := range y {
		d := float64(y[i]) - float64(ref[i])
		e += d * d
		sig += float64(ref[i]) * float64(ref[i])
	}
	return e, sig
}

// TestAdaRoundNeverRaisesReconstructionError checks, layer by layer, with
// the layer's input taken from the written quantized model and its target
// from the float model, both computed here by running the layer alone,
// that AdaRound's weights reconstruct the float output at least as well
// as round-to-nearest's (within float32 summation noise), strictly better
// on the model as a whole, that every rounded weight is a code of the
// plan's qparams (finalize's round trip leaves it unchanged), and that the report's figures agree.
func TestAdaRoundNeverRaisesReconstructionError(t *testing.T) {
	// Every row: the guarantee is then exact.
	u := quantizeAdaRound(t, "algorithms:\n  adaround: {rows: 100000, iterations: 200}\n", 1)
	float := adaroundModel(t)
	src := newSampleSource(41, 24, 3, 8, 8)
	reported := map[string]LayerReport{}
	for _, l := range u.Layers {
		if l.Algorithm == adaroundAlgorithmName {
			reported[l.Node] = l
		}
	}
	var totalRTN, totalAda float64
	for _, name := range []string{"conv", "grouped", "up", "fc", "proj"} {
		var n *onnxgraph.Node
		for _, c := range float.Graph.Nodes {
			if c.Name == name {
				n = c
			}
		}
		in := quantizedInput(u.Result.Model, n)
		x := runValues(t, u.Result.Model, src, in)[in]
		want := runValues(t, float, src, n.Outputs[0].Name)[n.Outputs[0].Name]
		w, shape, err := constFloats(float, n.Inputs[1])
		if err != nil {
			t.Fatal(err)
		}
		tp := u.Plan.Tensor(n.Inputs[1].Name)
		rtn, err := finalize.FakeQuantize(w, shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := constFloats(u.Model, u.Model.Graph.Value(n.Inputs[1].Name))
		if err != nil {
			t.Fatal(err)
		}
		// What finalize writes: the weight's quantize-dequantize round trip,
		// which leaves a rounded weight unchanged (its values are codes).
		written, err := finalize.FakeQuantize(got, shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
		if err != nil {
			t.Fatal(err)
		}
		if u.roundedWeights[n.Inputs[1].Name] != nil {
			for i := range got {
				if got[i] != written[i] {
					t.Fatalf("%s[%d] = %g is not a code of the plan's qparams (%g)", n.Inputs[1].Name, i, got[i], written[i])
				}
			}
		}
		got = written
		errRTN, signal := layerSquaredError(t, float, n, x, rtn, want)
		errAda, _ := layerSquaredError(t, float, n, x, got, want)
		if errAda > errRTN*(1+1e-4) {
			t.Errorf("%s: reconstruction error %g with AdaRound, %g with round-to-nearest", name, errAda, errRTN)
		}
		totalRTN += errRTN
		totalAda += errAda
		r, ok := reported[name]
		if !ok || r.Skipped != "" {
			t.Fatalf("%s: report %+v", name, r)
		}
		before, after := 10*math.Log10(signal/errRTN), 10*math.Log10(signal/errAda)
		if math.Abs(float64(r.Before)-before) > 0.05 || math.Abs(float64(r.After)-after) > 0.05 {
			t.Errorf("%s: reported %.3f → %.3f dB, measured %.3f → %.3f dB", name, float64(r.Before), float64(r.After), before, after)
		}
		t.Logf("%s: %.3f → %.3f dB (%s)", name, before, after, r.Note)
	}
	if !(totalAda < totalRTN) {
		t.Errorf("AdaRound lowered no error: %g against round-to-nearest's %g", totalAda, totalRTN)
	}
}

// TestAdaRoundDeterministic checks byte-identical models across runs and
// thread counts.
func TestAdaRoundDeterministic(t *testing.T) {
	sameModelAcrossThreads(t, func(threads int) *Unit {
		return quantizeAdaRound(t, "algorithms:\n  adaround: {iterations: 50}\n", threads)
	})
}

// TestAdaRoundForms checks the two forms of a layer's quadratic form
// XᵀX: held as rows (when they are fewer than half the features) and as
// the sum, built batch by batch, give D·XᵀX within float32 summation
// noise of a float64 reference, and AdaRound's rounding learned with
// either is the same up to a few near-ties; allocStats picks the rows
// form exactly when a half's rows are fewer than half of kg.
func TestAdaRoundForms(t *testing.T) {
	const ng, kg, rows = 6, 96, 40
	x := correlatedRows(5, rows, kg)
	rng := rand.New(rand.NewPCG(8, 9))
	normal := normalDraws(rng)
	forms := []*adaForm{{kg: kg, gram: make([]float32, kg*kg)}, {kg: kg, byRows: true}}
	for _, f := range forms {
		for r0 := 0; r0 < rows; r0 += 16 {
			f.add(2, x[r0*kg:min(r0+16, rows)*kg])
		}
	}
	d := normal(ng*kg, 1)
	want := make([]float64, ng*kg)
	for o := range ng {
		for k := range kg {
			var s float64
			for r := range rows {
				var dx float64
				for j := range kg {
					dx += float64(d[o*kg+j]) * float64(x[r*kg+j])
				}
				s += dx * float64(x[r*kg+k])
			}
			want[o*kg+k] = s
		}
	}
	var norm float64
	for _, v := range want {
		norm = max(norm, math.Abs(v))
	}
	for _, f := range forms {
		got := make([]float32, ng*kg)
		f.mul(2, ng, d, got)
		for i := range got {
			if math.Abs(float64(got[i])-want[i]) > 1e-5*norm {
				t.Fatalf("byRows %v: (D·XᵀX)[%d] = %g, want %g", f.byRows, i, got[i], want[i])
			}
		}
	}
	// One rounding problem: 4-bit codes of weights whose target is the
	// float product on the rows.
	p := &adaGroup{ng: ng, kg: kg}
	n := ng * kg
	p.w = normal(n, 0.3)
	p.scale, p.floor, p.lo, p.hi, p.rtn = make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		p.scale[i] = 0.1
		p.floor[i] = float32(math.Floor(float64(p.w[i] / p.scale[i])))
		p.lo[i], p.hi[i] = -8, 7
		p.rtn[i] = float32(math.Max(-8, math.Min(7, math.RoundToEven(float64(p.w[i]/p.scale[i])))))
	}
	g := make([]float32, n) // targets equal to the float product: gₒ = 0
	cfg := &config.AdaRound{Iterations: 200, LearningRate: 0.05, Regularization: 0.01, Warmup: 0.2, BetaStart: 20, BetaEnd: 2}
	var codes [2][]float32
	var errs [2]float64
	for i, f := range forms {
		var rtn float64
		for _, e := range p.extra(f, g, p.rtn, 2) {
			rtn += e
		}
		codes[i] = p.learn(cfg, f, g, rtn, 2)
		for _, e := range p.extra(f, g, codes[i], 2) {
			errs[i] += e
		}
		if !(errs[i] < rtn) {
			t.Errorf("byRows %v: learned rounding's error %g, round-to-nearest's %g", f.byRows, errs[i], rtn)
		}
	}
	differ := 0
	for i := range codes[0] {
		if codes[0][i] != codes[1][i] {
			differ++
		}
	}
	if differ > n/50 || math.Abs(errs[0]-errs[1]) > 0.02*errs[0] {
		t.Errorf("the forms learned different roundings: %d of %d codes differ, errors %g and %g", differ, n, errs[0], errs[1])
	}
	for _, c := range []struct {
		kept int
		want bool
	}{{40, true}, {94, true}, {95, false}, {96, false}, {2048, false}} {
		l := &adaLayer{groups: 1, ng: ng, kg: kg}
		l.allocStats(c.kept)
		if got := l.halves[0].form[0].byRows; got != c.want || l.halves[1].form[0].byRows != c.want {
			t.Errorf("%d rows kept, kg %d: rows form %v, want %v", c.kept, kg, got, c.want)
		}
	}
}

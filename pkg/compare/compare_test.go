package compare

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func TestRunModelWithItself(t *testing.T) {
	m := load(t, testmodels.CNN().Model)
	data := randomBatches(3, 4, 1)
	// Labels = the model's own predictions: both accuracies must be 100%.
	var labels []int64
	s := open(t, m)
	for _, b := range data {
		out, err := s.Run(context.Background(), b, runtime.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		x := out["logits"].Float32s()
		for r := range 4 {
			labels = append(labels, int64(argmax(x[r*10:(r+1)*10])))
		}
	}
	pairing := PairActivations(m, m)
	r, err := Run(context.Background(), s, open(t, m), seq(data), Options{Layers: &pairing, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples != 12 || r.Batches != 3 || len(r.Outputs) != 1 {
		t.Fatalf("samples %d batches %d outputs %d, want 12 3 1", r.Samples, r.Batches, len(r.Outputs))
	}
	o := r.Outputs[0]
	if !math.IsInf(float64(o.SQNR), 1) || o.Cosine != 1 || o.MaxAbsError != 0 {
		t.Errorf("SQNR %v cosine %v max err %v, want inf 1 0", o.SQNR, o.Cosine, o.MaxAbsError)
	}
	for name, p := range map[string]*float64{"top-1": o.Top1Agreement, "top-5": o.Top5Agreement, "reference accuracy": o.ReferenceAccuracy, "candidate accuracy": o.CandidateAccuracy} {
		if p == nil || *p != 100 {
			t.Errorf("%s = %v, want 100%%", name, p)
		}
	}
	if len(r.Layers) != 0 || len(r.Unpaired) != 0 {
		t.Errorf("a float model has no quantized activations: %d layers, %d unpaired", len(r.Layers), len(r.Unpaired))
	}
	var js strings.Builder
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"sqnr_db": "inf"`) || !strings.Contains(js.String(), `"top1_agreement": 100`) {
		t.Errorf("JSON lacks the inf SQNR or the agreement:\n%s", js.String())
	}
	vs, err := r.Check(Gates{MinSQNR: ptr(200.0), MinTop1Agreement: ptr(100.0)})
	if err != nil || len(vs) != 0 {
		t.Errorf("identical models fail gates: %v %v", vs, err)
	}
}

// noisyLogits returns the CNN with a constant vector added to its logits.
func noisyLogits(noise []float32) *onnxpb.ModelProto {
	mp := proto.Clone(testmodels.CNN().Model).(*onnxpb.ModelProto)
	g := mp.Graph
	for _, n := range g.Node {
		for i, o := range n.Output {
			if o == "logits" {
				n.Output[i] = "logits_clean"
			}
		}
	}
	g.Initializer = append(g.Initializer, testmodels.Float32Tensor("noise", []int64{1, int64(len(noise))}, noise))
	g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Add"), Name: proto.String("perturb"),
		Input: []string{"logits_clean", "noise"}, Output: []string{"logits"}})
	return mp
}

// TestRunKnownPerturbation adds a known vector n to every row of the logits:
// the error energy is rows·Σn², so the expected SQNR follows from the
// reference outputs alone.
func TestRunKnownPerturbation(t *testing.T) {
	ref := load(t, testmodels.CNN().Model)
	refSess := open(t, ref)
	data := randomBatches(4, 5, 2)
	var sumRef2 float64
	refRows := logitRows(t, refSess, data)
	for _, row := range refRows {
		for _, v := range row {
			sumRef2 += float64(v) * float64(v)
		}
	}
	cases := []struct {
		name  string
		scale float64
	}{{"small", 0.001}, {"medium", 0.05}, {"large", 1}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(9, 9))
			noise := make([]float32, 10)
			var sumN2 float64
			for i := range noise {
				noise[i] = float32(rng.NormFloat64() * c.scale)
				sumN2 += float64(noise[i]) * float64(noise[i])
			}
			cand := load(t, noisyLogits(noise))
			r, err := Run(context.Background(), refSess, open(t, cand), seq(data), Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := 10 * math.Log10(sumRef2/(float64(len(refRows))*sumN2))
			o := r.Outputs[0]
			if math.Abs(float64(o.SQNR)-want) > 0.01 {
				t.Errorf("SQNR = %v dB, want %.3f dB", o.SQNR, want)
			}
			var agree, agree5 int
			maxN := 0.0
			for _, v := range noise {
				maxN = math.Max(maxN, math.Abs(float64(v)))
			}
			for _, row := range refRows {
				noisy := make([]float32, 10)
				for i := range row {
					noisy[i] = row[i] + noise[i]
				}
				if argmax(row) == argmax(noisy) {
					agree++
				}
				// Rank of the reference class among the noisy logits.
				idx := make([]int, 10)
				for i := range idx {
					idx[i] = i
				}
				sort.SliceStable(idx, func(a, b int) bool { return noisy[idx[a]] > noisy[idx[b]] })
				if slices.Index(idx[:5], argmax(row)) >= 0 {
					agree5++
				}
			}
			if want := 100 * float64(agree) / float64(len(refRows)); *o.Top1Agreement != want {
				t.Errorf("top-1 agreement %v%%, want %v%%", *o.Top1Agreement, want)
			}
			if want := 100 * float64(agree5) / float64(len(refRows)); *o.Top5Agreement != want {
				t.Errorf("top-5 agreement %v%%, want %v%%", *o.Top5Agreement, want)
			}
			if math.Abs(o.MaxAbsError-maxN) > 1e-6*math.Max(1, maxN) {
				t.Errorf("max abs error %v, want %v", o.MaxAbsError, maxN)
			}
		})
	}
}

func TestPerLayerCoversEveryQuantizedActivation(t *testing.T) {
	ref := load(t, testmodels.CNN().Model)
	data := randomBatches(3, 4, 3)
	cand, quantized := qdqModel(t, ref, data, "conv1.weight", "fc.weight")
	if len(quantized) < 8 {
		t.Fatalf("test model has only %d quantized activations", len(quantized))
	}
	pairing := PairActivations(ref, cand)
	if len(pairing.Unpaired) != 0 {
		t.Fatalf("unpaired: %+v", pairing.Unpaired)
	}
	if pairing.Weights != 2 {
		t.Errorf("weight dequantizers = %d, want 2", pairing.Weights)
	}
	r, err := Run(context.Background(), open(t, ref), open(t, cand), seq(data), Options{Layers: &pairing})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range r.Layers {
		got = append(got, l.Tensor)
	}
	sort.Strings(got)
	want := slices.Clone(quantized)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("per-layer tensors\n got %q\nwant %q", got, want)
	}
	if len(r.Unpaired) != 0 {
		t.Errorf("unpaired after run: %+v", r.Unpaired)
	}
	finiteLocal := 0
	for i, l := range r.Layers {
		if i > 0 && r.Layers[i-1].SQNR > l.SQNR {
			t.Errorf("not worst first: %s (%v) after %s (%v)", l.Tensor, l.SQNR, r.Layers[i-1].Tensor, r.Layers[i-1].SQNR)
		}
		// int8 with absmax/127 scaling: ~40 dB for spread-out data, +inf
		// where the input is already on the same grid (Relu, MaxPool and
		// Reshape of a dequantized value with the same absmax).
		if l.LocalSQNR < 25 {
			t.Errorf("%s: local SQNR %v, want above 25 dB", l.Tensor, l.LocalSQNR)
		}
		if !math.IsInf(float64(l.LocalSQNR), 1) {
			finiteLocal++
		}
		// On this model the upstream error only adds to this quantizer's.
		if l.SQNR > l.LocalSQNR+1e-9 {
			t.Errorf("%s: accumulated SQNR %v above local %v", l.Tensor, l.SQNR, l.LocalSQNR)
		}
		if !strings.HasPrefix(l.Rule, "test.yaml:") {
			t.Errorf("%s: rule %q, want the recorded test.yaml:N", l.Tensor, l.Rule)
		}
		if l.ClipMin == nil || l.ClipMax == nil || *l.ClipMax <= 0 || math.Abs(*l.ClipMin/(*l.ClipMax)+128.0/127) > 1e-6 {
			t.Errorf("%s: clip range %v..%v, want [−128s, 127s]", l.Tensor, l.ClipMin, l.ClipMax)
		}
		if l.DType != "int8" {
			t.Errorf("%s: dtype %q, want int8", l.Tensor, l.DType)
		}
		if l.Histogram == nil || l.Histogram.Count == 0 {
			t.Errorf("%s: no histogram", l.Tensor)
		}
	}
	if finiteLocal < 4 {
		t.Errorf("only %d quantizers add error: the test model should quantize with loss", finiteLocal)
	}
	// The graph input has no producer; convolutions carry their module.
	byTensor := map[string]LayerReport{}
	for _, l := range r.Layers {
		byTensor[l.Tensor] = l
	}
	if in := byTensor["input"]; in.OpType != "graph input" || in.Node != "" || in.Histogram.Count != 3*4*64 {
		t.Errorf("input: %+v, histogram count %d", in.Pair, in.Histogram.Count)
	}
	if c := byTensor["/layer1/layer1.0/conv1/Conv_output_0"]; c.Node != "/layer1/layer1.0/conv1/Conv" || c.OpType != "Conv" || c.Module != "layer1.0.conv1" {
		t.Errorf("conv: %+v", c.Pair)
	}
	o := r.Outputs[0]
	if o.SQNR < 15 || math.IsInf(float64(o.SQNR), 0) {
		t.Errorf("output SQNR of the int8 model = %v, want finite and above 15 dB", o.SQNR)
	}
}

func TestPairActivationsUnpaired(t *testing.T) {
	ref := load(t, testmodels.CNN().Model)
	cand, quantized := qdqModel(t, ref, randomBatches(1, 2, 4))
	// Pair against a reference that lacks most of the quantized tensors:
	// the MLP shares only the names "input" and "/relu/Relu_output_0".
	other := load(t, testmodels.MLP().Model)
	p := PairActivations(other, cand)
	var paired []string
	for _, pr := range p.Pairs {
		paired = append(paired, pr.Tensor)
	}
	sort.Strings(paired)
	if want := []string{"/relu/Relu_output_0", "input"}; !slices.Equal(paired, want) {
		t.Errorf("paired %q, want %q", paired, want)
	}
	if len(p.Pairs)+len(p.Unpaired) != len(quantized) {
		t.Errorf("%d pairs and %d unpaired for %d quantized activations", len(p.Pairs), len(p.Unpaired), len(quantized))
	}
	for _, u := range p.Unpaired {
		if !strings.Contains(u.Reason, "is a computed value of the reference") || !strings.HasSuffix(u.Value, "_dequantized") {
			t.Errorf("unpaired %+v", u)
		}
	}
}

// TestPairActivationsInSubgraph: a Q/DQ pair inside a Loop body is listed
// as not compared, with the reason, not paired or dropped.
func TestPairActivationsInSubgraph(t *testing.T) {
	ref := load(t, testmodels.QuantLoop().Model)
	b := testmodels.QuantLoop()
	body := b.Model.Graph.Node[len(b.Model.Graph.Node)-1].Attribute[0].G
	body.Initializer = append(body.Initializer, testmodels.Float32Tensor("s", nil, []float32{0.01}))
	body.Node[0].Output[0] = "b_mm_q_in" // the MatMul now feeds Q → DQ → b_mm
	body.Node = append(body.Node,
		&onnxpb.NodeProto{OpType: proto.String("QuantizeLinear"), Input: []string{"b_mm_q_in", "s"}, Output: []string{"b_mm_q"}},
		&onnxpb.NodeProto{OpType: proto.String("DequantizeLinear"), Input: []string{"b_mm_q", "s"}, Output: []string{"b_mm"}})
	cand := load(t, b.Model)
	p := PairActivations(ref, cand)
	if len(p.Pairs) != 0 || len(p.Unpaired) != 1 || p.Unpaired[0].Value != "b_mm" || !strings.Contains(p.Unpaired[0].Reason, `inside the subgraph of node "loop" (Loop)`) {
		t.Errorf("pairs %+v, unpaired %+v", p.Pairs, p.Unpaired)
	}
}

func TestRunErrors(t *testing.T) {
	ref := load(t, testmodels.CNN().Model)
	mlp := load(t, testmodels.MLP().Model)
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"no data", func() error {
			_, err := Run(context.Background(), open(t, ref), open(t, ref), seq(nil), Options{})
			return err
		}, "no data"},
		{"too few labels", func() error {
			_, err := Run(context.Background(), open(t, ref), open(t, ref), seq(randomBatches(2, 2, 1)), Options{Labels: []int64{1, 2, 3}})
			return err
		}, "one label per sample"},
		{"too many labels", func() error {
			_, err := Run(context.Background(), open(t, ref), open(t, ref), seq(randomBatches(1, 2, 1)), Options{Labels: []int64{1, 2, 3}})
			return err
		}, "3 labels for 2 samples"},
		{"output shapes differ", func() error {
			_, err := Run(context.Background(), open(t, ref), open(t, mlp), seq(randomBatches(1, 2, 1)), Options{})
			return err
		}, "candidate model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestCheckGates(t *testing.T) {
	top1 := 97.5
	r := &Report{Outputs: []OutputReport{
		{Name: "logits", SQNR: 21.5, Top1Agreement: &top1},
		{Name: "features", SQNR: DB(math.Inf(1))},
	}}
	cases := []struct {
		name    string
		gates   Gates
		metrics []string
		err     error
	}{
		{"none", Gates{}, nil, nil},
		{"sqnr passes", Gates{MinSQNR: ptr(20.0)}, nil, nil},
		{"sqnr fails", Gates{MinSQNR: ptr(22.0)}, []string{"logits/sqnr_db"}, nil},
		{"top1 fails", Gates{MinTop1Agreement: ptr(99.0)}, []string{"logits/top1_agreement"}, nil},
		{"both fail", Gates{MinSQNR: ptr(30.0), MinTop1Agreement: ptr(98.0)}, []string{"logits/sqnr_db", "logits/top1_agreement"}, nil},
		{"top1 passes at equality", Gates{MinTop1Agreement: ptr(97.5)}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs, err := r.Check(c.gates)
			if err != c.err {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			var got []string
			for _, v := range vs {
				got = append(got, v.Output+"/"+v.Metric)
			}
			if !slices.Equal(got, c.metrics) {
				t.Errorf("violations %v, want %v", got, c.metrics)
			}
			if len(vs) > 0 {
				msg := GateError(vs).Error()
				if !strings.Contains(msg, `output "logits"`) {
					t.Errorf("message %q does not name the output", msg)
				}
			}
		})
	}
	noLogits := &Report{Outputs: []OutputReport{{Name: "features", SQNR: 10}}}
	if _, err := noLogits.Check(Gates{MinTop1Agreement: ptr(99.0)}); err != ErrNoLogits {
		t.Errorf("top-1 gate without logits: %v, want ErrNoLogits", err)
	}
	nan := &Report{Outputs: []OutputReport{{Name: "y", SQNR: DB(math.NaN())}}}
	if vs, _ := nan.Check(Gates{MinSQNR: ptr(0.0)}); len(vs) != 1 {
		t.Errorf("NaN SQNR passes the gate")
	}
}

func ptr[T any](v T) *T { return &v }

// TestPerLayerOnQuantizedModel quantizes test models with the project's own
// pipeline and checks that the per-layer report covers every quantized
// activation of the plan.
func TestPerLayerOnQuantizedModel(t *testing.T) {
	for _, name := range []string{"cnn.onnx", "mlp.onnx", "dynamo.onnx"} {
		for _, preset := range []string{"w8a8", "ort-x86"} {
			t.Run(name+"/"+preset, func(t *testing.T) {
				ref := load(t, testmodels.Catalog[name]().Model)
				data := batchesFor(t, ref, 3, 4)
				cand, pl := quantizeWithPipeline(t, ref, preset, data)
				var want []string
				for _, tp := range pl.Tensors {
					if tp.Role == plan.Activation {
						want = append(want, tp.Value)
					}
				}
				if len(want) == 0 {
					t.Fatal("the plan quantizes no activation")
				}
				pairing := PairActivations(ref, cand)
				if len(pairing.Unpaired) != 0 {
					t.Errorf("unpaired: %+v", pairing.Unpaired)
				}
				r, err := Run(context.Background(), open(t, ref), open(t, cand), seq(data), Options{Layers: &pairing})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, l := range r.Layers {
					got = append(got, l.Tensor)
					if math.IsNaN(float64(l.SQNR)) || l.SQNR < 10 {
						t.Errorf("%s: SQNR %v dB, want above 10", l.Tensor, l.SQNR)
					}
				}
				sort.Strings(got)
				sort.Strings(want)
				if !slices.Equal(got, want) {
					t.Errorf("per-layer tensors\n got %q\nwant %q", got, want)
				}
				if len(r.Unpaired) != 0 {
					t.Errorf("unpaired after run: %+v", r.Unpaired)
				}
			})
		}
	}
}

func TestLogitsShape(t *testing.T) {
	cases := []struct {
		shape         []int
		rows, classes int
		ok            bool
	}{
		{[]int{8, 10}, 8, 10, true},
		{[]int{2, 1000, 1, 1}, 2, 1000, true},
		{[]int{1, 10, 1}, 1, 10, true},
		{[]int{8, 1}, 0, 0, false},
		{[]int{8}, 0, 0, false},
		{[]int{2, 128, 256}, 0, 0, false},
		{[]int{2, 10, 1, 3}, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.shape), func(t *testing.T) {
			rows, classes, ok := logitsShape(c.shape)
			if rows != c.rows || classes != c.classes || ok != c.ok {
				t.Errorf("logitsShape(%v) = %d, %d, %v; want %d, %d, %v", c.shape, rows, classes, ok, c.rows, c.classes, c.ok)
			}
		})
	}
}

// TestPerLayerMaskedValues: a −Inf attention mask saturates in
// QuantizeLinear. The layer reports the element pairs that are infinite on
// one side and an SQNR over the others (not −Inf), the table marks it, and
// the model output, where infinities are not expected, keeps the strict
// rule.
func TestPerLayerMaskedValues(t *testing.T) {
	build := func(quantized bool) *onnxgraph.Model {
		b := testmodels.New("masked", 13)
		b.Input("x", tensor.Float, "N", 4).Output("y", tensor.Float, "N", 4)
		b.Init("mask", []int64{1, 4}, []float32{0, float32(math.Inf(-1)), 0, 0})
		b.Node("Add", "add", []string{"x", "mask"}, []string{"scores"})
		probs := "scores"
		if quantized {
			b.Init("s", nil, []float32{2.0 / 127})
			b.Model.Graph.Initializer = append(b.Model.Graph.Initializer,
				&onnxpb.TensorProto{Name: proto.String("z"), DataType: proto.Int32(int32(tensor.Int8)), RawData: []byte{0}})
			b.Node("QuantizeLinear", "scores_QuantizeLinear", []string{"scores", "s", "z"}, []string{"scores_quantized"})
			b.Node("DequantizeLinear", "scores_DequantizeLinear", []string{"scores_quantized", "s", "z"}, []string{"scores_dequantized"})
			probs = "scores_dequantized"
		}
		b.Node("Softmax", "softmax", []string{probs}, []string{"y"}, testmodels.AttrInt("axis", -1))
		return load(t, b.Model)
	}
	ref, cand := build(false), build(true)
	rng := rand.New(rand.NewPCG(4, 4))
	x := make([]float32, 8*4)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	pairing := PairActivations(ref, cand)
	r, err := Run(context.Background(), open(t, ref), open(t, cand), seq([]Batch{{"x": tensor.FromFloat32(x, 8, 4)}}), Options{Layers: &pairing})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Layers) != 1 {
		t.Fatalf("%d layers, want 1", len(r.Layers))
	}
	l := r.Layers[0]
	if l.Tensor != "scores" || l.NonFinite != 8 || l.LocalNonFinite != 8 {
		t.Errorf("layer %q: %d and %d non-finite pairs, want scores with 8 and 8", l.Tensor, l.NonFinite, l.LocalNonFinite)
	}
	if s := float64(l.SQNR); math.IsInf(s, 0) || s < 30 {
		t.Errorf("layer SQNR %v dB, want the finite values' figure (int8 steps of 1/63.5 on [-1, 1])", s)
	}
	if o := r.Outputs[0]; o.NonFinite != 0 || math.IsInf(float64(o.SQNR), 0) {
		t.Errorf("output y: SQNR %v, %d non-finite pairs; the softmax is finite on both sides", o.SQNR, o.NonFinite)
	}
	var b strings.Builder
	if err := r.WriteLayers(&b, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), l.SQNR.String()+"*") || !strings.Contains(b.String(), "* scores: 8 element pairs are NaN or infinite on one side only") {
		t.Errorf("the table does not mark the layer:\n%s", b.String())
	}
}

// TestPerLayerFoldedFactor: under ort-x86 a Div by 6 before a
// QuantizeLinear is folded into its scale, so the QuantizeLinear reads
// six times the value its DequantizeLinear gives back; per-layer pairs
// the DequantizeLinear with the value it holds and measures the
// quantizer's own error with the factor applied.
func TestPerLayerFoldedFactor(t *testing.T) {
	b := testmodels.New("factor", 13)
	b.Input("x", tensor.Float, "N", 16).Output("y", tensor.Float, "N", 4)
	b.RandomInit("fc1.weight", 0.25, 16, 8).RandomInit("fc2.weight", 0.25, 8, 4).Init("six", nil, []float32{6})
	b.Node("MatMul", "fc1", []string{"x", "fc1.weight"}, []string{"h"})
	b.Node("Erf", "erf", []string{"h"}, []string{"e"})
	b.Node("Mul", "mul", []string{"e", "h"}, []string{"m"})
	b.Node("Div", "div6", []string{"m", "six"}, []string{"d"})
	b.Node("MatMul", "fc2", []string{"d", "fc2.weight"}, []string{"y"})
	ref := load(t, b.Model)
	target := config.Targets["ort-x86"]
	cfg, err := target.Config()
	if err != nil {
		t.Fatal(err)
	}
	data := batchesFor(t, ref, 3, 8)
	cand, _ := quantizeFor(t, ref, cfg, target, data)
	if cand.Graph.Node("div6") != nil {
		t.Fatal("the Div by 6 was not folded into a scale")
	}
	pairing := PairActivations(ref, cand)
	var folded *Pair
	for i, p := range pairing.Pairs {
		if p.Tensor == "d" {
			folded = &pairing.Pairs[i]
		}
	}
	if folded == nil {
		t.Fatalf("no pair for the folded value d: %+v", pairing.Pairs)
	}
	if math.Abs(folded.Factor-1.0/6) > 1e-6 {
		t.Errorf("factor %v, want 1/6", folded.Factor)
	}
	r, err := Run(context.Background(), open(t, ref), open(t, cand), seq(data), Options{Layers: &pairing})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Layers {
		if l.LocalSQNR < 30 {
			t.Errorf("%s: local SQNR %v, want above 30 dB", l.Tensor, l.LocalSQNR)
		}
	}
}

// TestPerLayerUndoesRescale: cross-layer equalization divides the
// channels between two Convs by factors up to 10³ (their weights were
// scaled that far apart), which the second Conv undoes; the quantized
// model records the factors on the Relu output's QuantizeLinear, and
// per-layer sets that output against the float one with them undone.
// Read without them, the same tensor compares at about 0 dB.
func TestPerLayerUndoesRescale(t *testing.T) {
	b := testmodels.New("rescale", 13)
	b.Input("x", tensor.Float, "N", 3, 6, 6).Output("y", tensor.Float, "N", 4, 6, 6)
	rng := rand.New(rand.NewPCG(3, 4))
	w1 := make([]float32, 8*3)
	for i := range w1 {
		w1[i] = float32(rng.NormFloat64()) * float32(math.Pow(10, float64(i/3%4)))
	}
	b.Init("w1", []int64{8, 3, 1, 1}, w1).RandomInit("w2", 0.5, 4, 8, 1, 1)
	b.Node("Conv", "conv1", []string{"x", "w1"}, []string{"c1"})
	b.Node("Relu", "relu1", []string{"c1"}, []string{"r1"})
	b.Node("Conv", "conv2", []string{"r1", "w2"}, []string{"y"})
	ref := load(t, b.Model)
	cfg, err := config.Preset("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	data := batchesFor(t, ref, 3, 4)
	cand, _ := quantizeWithAlgorithms(t, ref, cfg, nil, &config.Algorithms{CrossLayerEqualization: &config.CrossLayerEqualization{Iterations: 20}}, data)
	pairing := PairActivations(ref, cand)
	run := func(p *Pairing) map[string]LayerReport { return layersByTensor(t, ref, cand, data, p) }
	with := run(&pairing)
	if l := with["r1"]; !l.IsRescaled || l.SQNR < 25 {
		t.Errorf("r1: rescaled %v, SQNR %.2f dB, want the recorded rescale undone and above 25 dB", l.IsRescaled, l.SQNR)
	}
	plain := Pairing{Pairs: slices.Clone(pairing.Pairs)}
	for i := range plain.Pairs {
		plain.Pairs[i].Rescaled, plain.Pairs[i].IsRescaled = nil, false
	}
	if l := run(&plain)["r1"]; l.SQNR > 10 {
		t.Errorf("r1 read as written: %.2f dB, want below 10 (the test's rescale is too mild to tell)", l.SQNR)
	}
}

// TestPerLayerFlooredSiLUInput: a Conv's output that reaches far below
// where the SiLU after it leaves 0 is quantized from that floor, and the
// inputs clipped there do not reach the SiLU's output. Per-layer sets the
// SiLU's input against float values clamped at the grid's lowest value,
// so it measures what reaches the SiLU (within a few dB of the SiLU's own
// output); read as an ordinary value, the clipped inputs count and it
// measures far less.
func TestPerLayerFlooredSiLUInput(t *testing.T) {
	b := testmodels.New("silu_floor", 13)
	b.Input("x", tensor.Float, "N", 3, 6, 6).Output("y", tensor.Float, "N", 8, 6, 6)
	rng := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, 8*3)
	for i := range w {
		w[i] = float32(rng.NormFloat64()) * 20
	}
	bias := make([]float32, 8) // half the channels far below the SiLU's floor
	for i := 0; i < len(bias); i += 2 {
		bias[i] = -200
	}
	b.Init("w", []int64{8, 3, 1, 1}, w).Init("b", []int64{8}, bias)
	b.Node("Conv", "conv", []string{"x", "w", "b"}, []string{"c"})
	b.Node("Sigmoid", "sig", []string{"c"}, []string{"s"})
	b.Node("Mul", "silu", []string{"c", "s"}, []string{"y"})
	ref := load(t, b.Model)
	data := batchesFor(t, ref, 3, 4)
	// accurate's uint8 asymmetric grid starts at the floor (a symmetric
	// one can only shrink to the positive side's reach).
	cfg, err := config.Preset("accurate")
	if err != nil {
		t.Fatal(err)
	}
	cand, _ := quantizeWithAlgorithms(t, ref, cfg, nil, nil, data)
	pairing := PairActivations(ref, cand)
	run := func(p *Pairing) map[string]LayerReport { return layersByTensor(t, ref, cand, data, p) }
	with := run(&pairing)
	c, y := with["c"], with["y"]
	if !c.Floored || float64(c.SQNR) < float64(y.SQNR)-3 {
		t.Errorf("c floored %v, SQNR %.2f dB (local %.2f), want it marked and within 3 dB of the SiLU output's %.2f", c.Floored, c.SQNR, c.LocalSQNR, y.SQNR)
	}
	plain := Pairing{Pairs: slices.Clone(pairing.Pairs)}
	for i := range plain.Pairs {
		plain.Pairs[i].Floored = false
	}
	if l := run(&plain)["c"]; float64(l.SQNR) > float64(c.SQNR)-6 || float64(l.LocalSQNR) > float64(c.LocalSQNR)-6 {
		t.Errorf("c read as an ordinary value: %.2f dB (local %.2f) against %.2f (%.2f) clamped, want 6 dB less", l.SQNR, l.LocalSQNR, c.SQNR, c.LocalSQNR)
	}
}

// layersByTensor runs the per-layer comparison of cand against ref on
// data with pairing p and returns its rows by reference tensor.
func layersByTensor(t *testing.T, ref, cand *onnxgraph.Model, data []Batch, p *Pairing) map[string]LayerReport {
	t.Helper()
	r, err := Run(context.Background(), open(t, ref), open(t, cand), seq(data), Options{Layers: p})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]LayerReport{}
	for _, l := range r.Layers {
		out[l.Tensor] = l
	}
	return out
}

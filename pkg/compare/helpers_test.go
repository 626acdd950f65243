package compare

import (
	"context"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// randomBatches makes n batches of rows random images for the CNN test
// model ([rows, 1, 8, 8], uniform in [-1, 1]).
func randomBatches(n, rows int, seed uint64) []Batch {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]Batch, n)
	for i := range out {
		x := make([]float32, rows*64)
		for j := range x {
			x[j] = rng.Float32()*2 - 1
		}
		out[i] = Batch{"input": tensor.FromFloat32(x, rows, 1, 8, 8)}
	}
	return out
}

func seq(bs []Batch) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		for _, b := range bs {
			if !yield(b, nil) {
				return
			}
		}
	}
}

func load(t testing.TB, mp *onnxpb.ModelProto) *onnxgraph.Model {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnxgraph.LoadBytes(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func open(t testing.TB, m *onnxgraph.Model) runtime.Session {
	t.Helper()
	s, err := runtime.Open("go", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// qdqModel is a hand-built QDQ version of ref, written the way a QDQ
// quantizer writes one: every computed float activation X that some node
// reads (graph inputs included, graph outputs and constants not) becomes
// X → QuantizeLinear → DequantizeLinear → consumers, with a symmetric int8
// scale absmax/127 measured on calib; each QuantizeLinear records a rule;
// the weights named in weights are stored as int8 + DequantizeLinear. It
// returns the model and the list of quantized activations.
func qdqModel(t testing.TB, ref *onnxgraph.Model, calib []Batch, weights ...string) (*onnxgraph.Model, []string) {
	t.Helper()
	absmax := map[string]float64{}
	sess := open(t, ref)
	for _, b := range calib {
		_, err := sess.Run(context.Background(), b, runtime.RunOptions{Tap: func(name string, v *tensor.Tensor) {
			x, err := v.AsFloat32()
			if err != nil || v.DType != tensor.Float {
				return
			}
			for _, f := range x {
				absmax[name] = math.Max(absmax[name], math.Abs(float64(f)))
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	mp := proto.Clone(ref.Proto).(*onnxpb.ModelProto)
	g := mp.Graph
	var quantized []string
	rename := map[string]string{}
	var extra []*onnxpb.NodeProto
	for _, v := range ref.Graph.Values() {
		if v.IsConst() || v.IsGraphOutput || len(v.Consumers) == 0 {
			continue
		}
		if _, ok := absmax[v.Name]; !ok {
			continue
		}
		s := float32(absmax[v.Name] / 127)
		g.Initializer = append(g.Initializer,
			testmodels.Float32Tensor(v.Name+"_scale", nil, []float32{s}),
			&onnxpb.TensorProto{Name: proto.String(v.Name + "_zp"), DataType: proto.Int32(int32(tensor.Int8)), RawData: []byte{0}})
		q := &onnxpb.NodeProto{OpType: proto.String("QuantizeLinear"), Name: proto.String(v.Name + "_QuantizeLinear"),
			Input: []string{v.Name, v.Name + "_scale", v.Name + "_zp"}, Output: []string{v.Name + "_quantized"}}
		testmodels.Meta(q, RuleMetadataKey, fmt.Sprintf("test.yaml:%d", len(quantized)+1))
		dq := &onnxpb.NodeProto{OpType: proto.String("DequantizeLinear"), Name: proto.String(v.Name + "_DequantizeLinear"),
			Input: []string{v.Name + "_quantized", v.Name + "_scale", v.Name + "_zp"}, Output: []string{v.Name + "_dequantized"}}
		extra = append(extra, q, dq)
		rename[v.Name] = v.Name + "_dequantized"
		quantized = append(quantized, v.Name)
	}
	for _, w := range weights {
		var init *onnxpb.TensorProto
		for _, it := range g.Initializer {
			if it.GetName() == w {
				init = it
			}
		}
		ft, err := tensor.FromProto(init, nil)
		if err != nil {
			t.Fatal(err)
		}
		x := ft.Float32s()
		var am float64
		for _, f := range x {
			am = math.Max(am, math.Abs(float64(f)))
		}
		s := float32(am / 127)
		raw := make([]byte, len(x))
		for i, f := range x {
			raw[i] = byte(int8(math.RoundToEven(float64(f / s))))
		}
		init.Name = proto.String(w + "_int8")
		init.DataType = proto.Int32(int32(tensor.Int8))
		init.RawData = raw
		init.FloatData = nil
		g.Initializer = append(g.Initializer, testmodels.Float32Tensor(w+"_wscale", nil, []float32{s}))
		extra = append(extra, &onnxpb.NodeProto{OpType: proto.String("DequantizeLinear"), Name: proto.String(w + "_DequantizeLinear"),
			Input: []string{w + "_int8", w + "_wscale"}, Output: []string{w}})
	}
	for _, n := range g.Node {
		for i, in := range n.Input {
			if r, ok := rename[in]; ok {
				n.Input[i] = r
			}
		}
	}
	g.Node = append(g.Node, extra...)
	return load(t, mp), quantized
}

// batchesFor draws n batches of rows random samples in [-1, 1] for every
// input of m (symbolic dimensions other than the batch set to 2).
func batchesFor(t testing.TB, m *onnxgraph.Model, n, rows int) []Batch {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(rows)))
	out := make([]Batch, n)
	for i := range out {
		b := Batch{}
		for _, v := range m.Graph.Inputs {
			dims, ok := v.Shape()
			if !ok || v.DType() != tensor.Float {
				t.Fatalf("input %q: want a float tensor of known rank", v.Name)
			}
			shape := make([]int, len(dims))
			for j, d := range dims {
				shape[j] = int(d.Size)
				if d.Size < 0 {
					shape[j] = 2
					if j == 0 {
						shape[j] = rows
					}
				}
			}
			x := make([]float32, tensor.NumElements(shape))
			for j := range x {
				x[j] = rng.Float32()*2 - 1
			}
			b[v.Name] = tensor.FromFloat32(x, shape...)
		}
		out[i] = b
	}
	return out
}

// quantizeWithPipeline quantizes m with a preset through the project's
// pipeline, calibrating min/max on data.
func quantizeWithPipeline(t testing.TB, m *onnxgraph.Model, preset string, data []Batch) (*onnxgraph.Model, *passes.Plan) {
	t.Helper()
	cfg, err := config.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	return quantizeFor(t, m, cfg, nil, data)
}

// quantizeFor quantizes m with cfg for target (nil: generic) through the
// project's pipeline, calibrating min/max on data.
func quantizeFor(t testing.TB, m *onnxgraph.Model, cfg *config.QuantizerConfig, target *config.Target, data []Batch) (*onnxgraph.Model, *passes.Plan) {
	t.Helper()
	return quantizeWithAlgorithms(t, m, cfg, target, nil, data)
}

// quantizeWithAlgorithms is quantizeFor with data-free algorithms.
func quantizeWithAlgorithms(t testing.TB, m *onnxgraph.Model, cfg *config.QuantizerConfig, target *config.Target, alg *config.Algorithms, data []Batch) (*onnxgraph.Model, *passes.Plan) {
	t.Helper()
	calib := func(_ context.Context, m *onnxgraph.Model, pl *passes.Plan) (passes.Stats, error) {
		stats := passes.RangeStats{}
		var names []string
		for _, tp := range pl.Observed() {
			names = append(names, tp.Value)
		}
		sess := open(t, m)
		tap := func(name string, x *tensor.Tensor) {
			f, err := x.AsFloat32()
			if err != nil {
				return
			}
			r, ok := stats[name]
			for _, v := range f {
				if !ok {
					r, ok = plan.Range{Min: v, Max: v}, true
				}
				r.Min, r.Max = min(r.Min, v), max(r.Max, v)
			}
			stats[name] = r
		}
		for _, b := range data {
			if _, err := sess.Run(context.Background(), b, runtime.RunOptions{Tap: tap, TapValues: names}); err != nil {
				return nil, err
			}
		}
		return stats, nil
	}
	u := &passes.Unit{Model: m, Config: cfg, Algorithms: alg, Calibrate: calib, Prepare: passes.PrepareOptions{Target: target}}
	if _, err := passes.Run(context.Background(), u, passes.RunOptions{}); err != nil {
		t.Fatalf("quantize: %v", err)
	}
	// Round-trip through bytes as the CLI would read the written file.
	return load(t, u.Result.Model.Proto), u.Plan
}

// logitRows runs s on every batch and returns the rows of its 10-class
// "logits" output, in data order.
func logitRows(t testing.TB, s runtime.Session, data []Batch) [][]float32 {
	t.Helper()
	var rows [][]float32
	for _, b := range data {
		out, err := s.Run(context.Background(), b, runtime.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		x := out["logits"].Float32s()
		for r := 0; r < len(x); r += 10 {
			rows = append(rows, slices.Clone(x[r:r+10]))
		}
	}
	return rows
}

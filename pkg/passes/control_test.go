package passes

import (
	"bytes"
	"context"
	"math"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// controlCase is a model with quantizable nodes inside If/Loop/Scan
// subgraphs, the tensors the plan must hold from inside them, and where
// the written Q/DQ must land.
type controlCase struct {
	name  string
	model func() *testmodels.Builder
	// planned are values defined inside subgraphs that must be quantized.
	planned []string
	// qdqIn are the subgraph attributes that must hold Q/DQ nodes after
	// writing, as "<owner>/<attribute>".
	qdqIn []string
}

var controlCases = []controlCase{
	{"if", testmodels.QuantIf, []string{"Wt", "e_mm", "t_out", "h"}, []string{"branch/then_branch", "branch/else_branch"}},
	{"loop", testmodels.QuantLoop, []string{"Wb", "b_mm", "b_add", "acc"}, []string{"loop/body"}},
	{"scan", testmodels.QuantScan, []string{"Wx", "xw", "sw", "xt", "s"}, []string{"scan/body"}},
}

func loadControl(t *testing.T, c controlCase) *onnxgraph.Model {
	t.Helper()
	m, err := onnxgraph.LoadBytes(c.model().Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// signSource is calibration data: four batches of randomInputs whose sign
// alternates (batches 2k and 2k+1 are opposites), so that the If model
// takes both branches.
type signSource struct{ m *onnxgraph.Model }

func (s signSource) Samples() int { return 4 }
func (s signSource) Random() bool { return true }
func (s signSource) Close() error { return nil }
func (s signSource) Batch(start, _ int) (map[string]*tensor.Tensor, error) {
	in := randomInputs(s.m, uint64(start/2))
	if start%2 == 1 {
		for _, x := range in {
			for i, v := range x.Float32s() {
				x.Float32s()[i] = -v
			}
		}
	}
	return in, nil
}

// quantizeControl runs the pipeline with a preset, calibrating (and
// feeding the preset's algorithms) with the built-in engine through
// EngineCalibrator.
func quantizeControl(t *testing.T, m *onnxgraph.Model, preset string, src calibrate.Source) *Unit {
	t.Helper()
	pc, err := config.PresetConfig(preset)
	if err != nil {
		t.Fatal(err)
	}
	ropts := runtime.Options{Threads: 1}
	u := &Unit{Model: m, Config: pc.Quant, Algorithms: pc.Algorithms, Calibrate: EngineCalibrator("go", ropts, src, calibrate.Options{BatchSize: 1}, nil)}
	if pc.Algorithms.Any() {
		u.Data = &AlgorithmData{Engine: "go", Runtime: ropts, Source: src, BatchSize: 1}
	}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatalf("%s: %v", preset, err)
	}
	return u
}

// TestQuantizeControlFlow quantizes the nodes inside If, Loop and Scan
// subgraphs: the plan holds their weights and activations, the written
// subgraphs hold their Q/DQ (and their weights, as integers), and the
// built-in engine runs the result within the w8a8 error of the float model.
func TestQuantizeControlFlow(t *testing.T) {
	for _, c := range controlCases {
		t.Run(c.name, func(t *testing.T) {
			m := loadControl(t, c)
			u := quantizeControl(t, m, "w8a8", signSource{m})
			for _, v := range c.planned {
				if u.Plan.Tensor(v) == nil {
					t.Errorf("value %q inside a subgraph is not in the plan", v)
				}
			}
			for _, s := range u.Plan.Skipped {
				if strings.Contains(s.Node, "/") && strings.Contains(s.Reason, "subgraph") {
					t.Errorf("subgraph node %s skipped: %s", s.Node, s.Reason)
				}
			}
			qm := u.Result.Model
			for _, where := range c.qdqIn {
				owner, attr, _ := strings.Cut(where, "/")
				n := qm.Graph.Node(owner)
				if n == nil || n.Subgraphs[attr] == nil {
					t.Fatalf("written model has no subgraph %s", where)
				}
				ops := map[string]int{}
				for _, sn := range n.Subgraphs[attr].Nodes {
					ops[sn.OpType]++
				}
				if ops["QuantizeLinear"] == 0 || ops["DequantizeLinear"] == 0 {
					t.Errorf("subgraph %s has no Q/DQ: %v", where, ops)
				}
			}
			// A subgraph's weight is an integer initializer of that subgraph.
			for _, g := range qm.Graph.Graphs()[1:] {
				for _, init := range g.Initializers {
					if dt := init.DType(); dt == tensor.Float && len(init.Const.GetDims()) == 2 {
						t.Errorf("subgraph %s keeps the float weight %q", g.Name, init.Name)
					}
				}
			}
			ref, got := runModel(t, m, 0), runModel(t, qm, 0)
			names := make([]string, 0, len(ref))
			for n := range ref {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				s := sqnr(ref[n], got[n])
				t.Logf("%s: SQNR %.1f dB", n, s)
				if s < 25 || math.IsInf(s, 1) {
					t.Errorf("output %q: SQNR %.1f dB, want ≥ 25 dB and quantized", n, s)
				}
			}
		})
	}
}

// TestControlFlowNames checks how config keys reach a node inside a Loop
// body: op_name_config by its path (plain or regex) or by its name inside
// the body, op_type_config by its type (TestSubgraphModules covers the
// module a body node belongs to). A null entry keeps the node in float
// and leaves its neighbour quantized.
func TestControlFlowNames(t *testing.T) {
	m := loadControl(t, controlCases[1])
	tests := []struct{ name, cfg, off, on string }{
		{"path", "  global_config:\n    op_name_config: {loop/body/mm: null}\n", "loop/body/mm", "loop/body/add"},
		{"name in the body", "  global_config:\n    op_name_config: {mm: null}\n", "loop/body/mm", "loop/body/add"},
		{"op type", "  global_config:\n    op_type_config: {Tanh: null}\n", "loop/body/tanh", "loop/body/add"},
		{"regex", "  global_config:\n    op_name_config: {\"loop/body/t.*\": null}\n", "loop/body/tanh", "loop/body/mm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte("quantization_config:\n"+tt.cfg), "q.yaml")
			if err != nil {
				t.Fatal(err)
			}
			res, err := config.Resolve(cfg.Quant, m.Graph)
			if err != nil {
				t.Fatal(err)
			}
			if nr := res.Node(tt.off); nr == nil || len(nr.Quantized()) != 0 {
				t.Errorf("%s is not resolved, or quantized despite the null entry", tt.off)
			}
			if nr := res.Node(tt.on); nr == nil || len(nr.Quantized()) == 0 {
				t.Errorf("%s is not quantized", tt.on)
			}
			if len(res.Warnings) != 0 {
				t.Errorf("warnings: %v", res.Warnings)
			}
		})
	}
}

// TestCalibrateControlFlowNeverRun: a value in a branch no batch takes
// has no statistics, and calibration says which and why.
func TestCalibrateControlFlowNeverRun(t *testing.T) {
	m := loadControl(t, controlCases[0])
	pc, err := config.PresetConfig("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: m, Config: pc.Quant, Calibrate: EngineCalibrator("go", runtime.Options{Threads: 1}, positiveSource{m}, calibrate.Options{BatchSize: 1}, nil)}
	_, err = Run(context.Background(), u, RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "never ran") || !strings.Contains(err.Error(), `"e_`) {
		t.Fatalf("err = %v, want the else branch's tensors named as never computed", err)
	}
}

// positiveSource is randomInputs shifted so that every mean is positive.
type positiveSource struct{ m *onnxgraph.Model }

func (s positiveSource) Samples() int { return 2 }
func (s positiveSource) Random() bool { return true }
func (s positiveSource) Close() error { return nil }
func (s positiveSource) Batch(start, _ int) (map[string]*tensor.Tensor, error) {
	in := randomInputs(s.m, uint64(start))
	for _, x := range in {
		for i, v := range x.Float32s() {
			x.Float32s()[i] = v + 2
		}
	}
	return in, nil
}

// TestControlFlowReusedName: an If whose branches both define "t_out"
// leaves that value in float, with a note, and quantizes the rest.
func TestControlFlowReusedName(t *testing.T) {
	b := testmodels.QuantIf()
	for _, a := range b.Model.Graph.Node[len(b.Model.Graph.Node)-1].Attribute {
		if a.GetName() != "else_branch" {
			continue
		}
		a.G.Node[len(a.G.Node)-1].Output[0] = "t_out"
		*a.G.Output[0].Name = "t_out"
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	u := quantizeControl(t, m, "w8a8", signSource{m})
	if u.Plan.Tensor("t_out") != nil {
		t.Error("t_out, defined in both branches, is quantized")
	}
	if u.Plan.Tensor("e_mm") == nil || u.Plan.Tensor("Wt") == nil {
		t.Error("the other subgraph values are not quantized")
	}
	if !slicesContain(u.Plan.Notes, `value "t_out": left in float: several subgraphs define a value of that name, and Q/DQ are placed by name`) {
		t.Errorf("no note for t_out; notes: %q", u.Plan.Notes)
	}
	runModel(t, u.Result.Model, 0)
}

// TestCalibrateControlFlowShard: one shard may not run a branch that
// another does, so a shard leaves the branch's observers empty for the
// merge instead of failing.
func TestCalibrateControlFlowShard(t *testing.T) {
	m := loadControl(t, controlCases[0])
	minmax := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric, Calculator: spec.Calculator{Type: spec.GlobalMinMax}}
	tensors := markConditional(m, []calibrate.TensorToObserve{{Name: "e_mm", Spec: minmax}})
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := calibrate.Calibrate(context.Background(), s, tensors, positiveSource{m}, calibrate.Options{Shard: 0, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if o := st.Tensor("e_mm"); o == nil || o.Count != 0 {
		t.Errorf("e_mm observer %+v, want an empty one", o)
	}
	// Without shards, the same data is an error (TestCalibrateControlFlowNeverRun).
	if _, err := calibrate.Calibrate(context.Background(), s, tensors, positiveSource{m}, calibrate.Options{}); err == nil {
		t.Error("a branch no batch runs is accepted without shards")
	}
}

// TestQuantizeControlFlowDeterministic: two runs write the same bytes.
func TestQuantizeControlFlowDeterministic(t *testing.T) {
	for _, c := range controlCases {
		t.Run(c.name, func(t *testing.T) {
			var outs [][]byte
			for range 2 {
				m := loadControl(t, c)
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(quantizeControl(t, m, "w8a8", signSource{m}).Result.Model.Proto)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, b)
			}
			if !bytes.Equal(outs[0], outs[1]) {
				t.Fatalf("two runs wrote different models (%d and %d bytes)", len(outs[0]), len(outs[1]))
			}
		})
	}
}

// TestAlgorithmsReportSubgraphLayers: GPTQ works on main-graph layers and
// lists a layer inside a Loop body as skipped, with the reason.
func TestAlgorithmsReportSubgraphLayers(t *testing.T) {
	m := loadControl(t, controlCases[1])
	u := quantizeControl(t, m, "w4-accurate", signSource{m})
	var got []string
	for _, l := range u.Layers {
		if l.Algorithm == gptqAlgorithmName {
			got = append(got, l.Node+": "+l.Skipped)
		}
	}
	want := []string{`loop/body/mm: inside the subgraph of node "loop" (Loop): gptq works on the main graph's layers only`, "mm0: "}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("gptq layers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

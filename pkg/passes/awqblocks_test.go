package passes

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testmodels/llama"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// awqChainModel is x [n, 32] → LayerNorm → fc1 + b1 → fc2 + b2 → fc3,
// the weights with a few input features far larger than the rest: the
// block runner cuts after each MatMul (its output alone carries on), so
// the sites of fc2 and fc3 fold 1/s into the MatMul and bias of the block
// before theirs, whose held output must be divided too.
func awqChainModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	k := awqFeatures
	matrix := func(cols int) []float32 {
		v := make([]float32, k*cols)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.3)
			if (i%cols)%7 == 3 {
				v[i] *= 12 // output features with outliers: the next site's
			}
		}
		return v
	}
	vector := func(s float64) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	b := testmodels.New("awq_chain", 17)
	b.Input("x", tensor.Float, "n", k)
	b.Output("y", tensor.Float, "n", 8)
	b.Init("gamma", []int64{int64(k)}, vector(1))
	b.Init("beta", []int64{int64(k)}, vector(0.1))
	b.Init("w1", []int64{int64(k), int64(k)}, matrix(k))
	b.Init("b1", []int64{int64(k)}, vector(0.1))
	b.Init("w2", []int64{int64(k), int64(k)}, matrix(k))
	b.Init("b2", []int64{int64(k)}, vector(0.1))
	b.Init("w3", []int64{int64(k), 8}, matrix(8))
	b.Node("LayerNormalization", "ln", []string{"x", "gamma", "beta"}, []string{"h"})
	b.Node("MatMul", "fc1", []string{"h", "w1"}, []string{"m1"})
	b.Node("Add", "bias1", []string{"m1", "b1"}, []string{"h1"})
	b.Node("MatMul", "fc2", []string{"h1", "w2"}, []string{"m2"})
	b.Node("Add", "bias2", []string{"m2", "b2"}, []string{"h2"})
	b.Node("MatMul", "fc3", []string{"h2", "w3"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// awqBlockCase is a model AWQ runs on block by block: how to make it and
// its data, how many blocks and sites it has.
type awqBlockCase struct {
	name   string
	model  func(t *testing.T) *onnxgraph.Model
	source func() calibrate.Source
	quant  string
	blocks int
	// layers are the nodes AWQ scales (not skipped).
	layers int
}

var awqBlockCases = []awqBlockCase{
	{"llama", func(t *testing.T) *onnxgraph.Model { return tinyDecoder(t, llama.Tiny()) },
		func() calibrate.Source { return newTokenSource(9, 12, 16, llama.Tiny().Vocab) },
		awqQuantizedLayerNorm, 5, 11},
	{"chain", awqChainModel, func() calibrate.Source { return newSampleSource(81, 48, awqFeatures) }, awqConfig, 3, 3},
}

// quantizeAWQBlocks runs AWQ (int4 blocks of 16) on the case's model,
// block by block or with the whole model, and returns the unit, the
// block progress it reported and the most block sessions alive at once.
func quantizeAWQBlocks(t *testing.T, c awqBlockCase, threads int, whole bool, scratch *onnxgraph.Scratch) (*Unit, []BlockProgress, int) {
	t.Helper()
	cfg, err := config.Parse([]byte(c.quant+"algorithms:\n  awq: true\n"), "awq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var events []BlockProgress
	maxOpen := 0
	var runners []*blockRunner
	blockRunnerMade = func(r *blockRunner) { runners = append(runners, r) }
	awqWholeModel = whole
	defer func() { blockRunnerMade, awqWholeModel = nil, false }()
	u := &Unit{Model: c.model(t), Config: cfg.Quant, Algorithms: cfg.Algorithms, Write: finalize.Options{Scratch: scratch},
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			return observe(t, m, plan), nil
		},
		Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: c.source(), BatchSize: 5,
			Progress: func(e BlockProgress) { events = append(events, e) }}}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range runners {
		maxOpen = max(maxOpen, r.maxOpen)
	}
	return u, events, maxOpen
}

// awqReports are the AWQ layer reports by node, the skipped ones left out.
func awqReports(u *Unit) map[string]LayerReport {
	out := map[string]LayerReport{}
	for _, l := range u.Layers {
		if l.Algorithm == awqAlgorithmName && l.Skipped == "" {
			out[l.Node] = l
		}
	}
	return out
}

// outputsOn runs m's outputs on the first n samples of src.
func outputsOn(t *testing.T, m *onnxgraph.Model, src calibrate.Source, n int) map[string][]float32 {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, err := src.Batch(0, n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(context.Background(), in, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float32{}
	for name, v := range out {
		f, err := v.AsFloat32()
		if err != nil {
			t.Fatal(err)
		}
		got[name] = f
	}
	return got
}

// TestAWQBlocksMatchWholeModel checks block-by-block AWQ against the
// whole-model path on the generated decoder (12 sequences of 16 random
// tokens) and on a chain of linear layers whose folds reach into the
// block before (48 random samples): the note says block by block, the
// same layers are scaled with the same reported errors (within 0.01 dB)
// and the same exponent, every weight equal within float rounding, the
// float outputs those of the original model, one block session alive at
// a time, and one progress record per block.
func TestAWQBlocksMatchWholeModel(t *testing.T) {
	for _, c := range awqBlockCases {
		t.Run(c.name, func(t *testing.T) {
			blocked, events, maxOpen := quantizeAWQBlocks(t, c, 2, false, nil)
			whole, _, _ := quantizeAWQBlocks(t, c, 2, true, nil)
			rb, rw := awqReports(blocked), awqReports(whole)
			if len(rb) != c.layers || len(rw) != c.layers {
				t.Fatalf("%d layers scaled block by block, %d with the whole model, want %d", len(rb), len(rw), c.layers)
			}
			prefix := fmt.Sprintf("awq: block by block (%d blocks)", c.blocks)
			noted := false
			for _, n := range blocked.Plan.Notes {
				noted = noted || strings.HasPrefix(n, prefix)
			}
			if !noted {
				t.Errorf("notes %q do not say %q", blocked.Plan.Notes, prefix)
			}
			if maxOpen != 1 {
				t.Errorf("%d block sessions alive at once, want 1", maxOpen)
			}
			if len(events) != c.blocks {
				t.Fatalf("%d progress records, want %d", len(events), c.blocks)
			}
			for i, e := range events {
				if e.Algorithm != awqAlgorithmName || e.Block != i+1 || e.Blocks != c.blocks || len(e.Layers) == 0 {
					t.Errorf("progress record %d: %+v", i, e)
				}
			}
			folded := 0
			for node, b := range rb {
				w := rw[node]
				if math.Abs(float64(b.Before-w.Before)) > 0.01 || math.Abs(float64(b.After-w.After)) > 0.01 {
					t.Errorf("%s: %.3f → %.3f dB block by block, %.3f → %.3f with the whole model", node, float64(b.Before), float64(b.After), float64(w.Before), float64(w.After))
				}
				alpha := func(note string) string { return strings.SplitN(note, ",", 2)[0] }
				if alpha(b.Note) != alpha(w.Note) {
					t.Errorf("%s: %q block by block, %q with the whole model", node, b.Note, w.Note)
				}
				if strings.HasPrefix(b.Note, "alpha") {
					folded++
				}
			}
			if folded == 0 {
				t.Errorf("no site scaled: nothing compared")
			}
			for _, v := range blocked.Model.Graph.Values() {
				if !v.IsInitializer || tensor.DType(v.Const.GetDataType()) != tensor.Float {
					continue
				}
				a, _, err := constFloats(blocked.Model, v)
				if err != nil {
					t.Fatal(err)
				}
				b, _, err := constFloats(whole.Model, whole.Model.Graph.Value(v.Name))
				if err != nil {
					t.Fatal(err)
				}
				for i := range a {
					if math.Abs(float64(a[i]-b[i])) > 1e-5*(1+math.Abs(float64(b[i]))) {
						t.Fatalf("%s[%d] = %g block by block, %g with the whole model", v.Name, i, a[i], b[i])
					}
				}
			}
			src := c.source()
			want := outputsOn(t, c.model(t), src, 4)
			got := outputsOn(t, blocked.Model, src, 4)
			for name, w := range want {
				var scale, diff float64
				for i := range w {
					scale = max(scale, math.Abs(float64(w[i])))
					diff = max(diff, math.Abs(float64(w[i]-got[name][i])))
				}
				if diff > 1e-4*scale {
					t.Errorf("%s: AWQ changed the float output by %g (magnitude %g)", name, diff, scale)
				}
			}
		})
	}
}

// TestAWQBlocksDeterministic checks that block-by-block AWQ writes
// byte-identical models across thread counts, and with the scaled weights
// moved to a scratch file as they are made (a decoder of width 128, whose
// weights are large enough to move).
func TestAWQBlocksDeterministic(t *testing.T) {
	c := awqBlockCases[0]
	lc := llama.Tiny()
	lc.Hidden, lc.Intermediate = 128, 256
	c.model = func(t *testing.T) *onnxgraph.Model { return tinyDecoder(t, lc) }
	moved := sameModelWithScratch(t, func(threads int, scratch *onnxgraph.Scratch) *Unit {
		u, _, _ := quantizeAWQBlocks(t, c, threads, false, scratch)
		return u
	}, func(u *Unit) []string {
		var scaled []string
		for node, r := range awqReports(u) {
			if strings.HasPrefix(r.Note, "alpha") {
				scaled = append(scaled, node)
			}
		}
		return scaled
	})
	if moved == 0 {
		t.Error("no scaled weight moved to the scratch file: nothing checked")
	}
}

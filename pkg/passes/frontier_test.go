package passes

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// branchyModel has a residual Add, a side branch no target needs (the
// Sigmoid) and a value read far from where it is computed (r1, by the last
// Concat).
func branchyModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	normal := normalDraws(rng)
	b := testmodels.New("branchy", 17)
	b.Input("x", tensor.Float, "n", 3, 6, 6).Output("y", tensor.Float, "n", 8, 6, 6).Output("side", tensor.Float, "n", 4, 6, 6)
	b.Init("w1", []int64{4, 3, 3, 3}, normal(4*27, 0.3))
	b.Init("w2", []int64{4, 4, 3, 3}, normal(4*36, 0.3))
	b.Init("w3", []int64{4, 4, 1, 1}, normal(16, 0.3))
	pads := testmodels.AttrInts("pads", 1, 1, 1, 1)
	b.Node("Conv", "c1", []string{"x", "w1"}, []string{"a1"}, pads)
	b.Node("Relu", "r1", []string{"a1"}, []string{"r1"})
	b.Node("Sigmoid", "sig", []string{"r1"}, []string{"side"})
	b.Node("Conv", "c2", []string{"r1", "w2"}, []string{"a2"}, pads)
	b.Node("Add", "add", []string{"a2", "r1"}, []string{"s"})
	b.Node("Relu", "r2", []string{"s"}, []string{"r2"})
	b.Node("Conv", "c3", []string{"r2", "w3"}, []string{"a3"})
	b.Node("Concat", "cat", []string{"a3", "r1"}, []string{"y"}, testmodels.AttrInt("axis", 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFrontier asks a frontier for values step by step, as AdaRound's
// waves do, and checks each against a whole run of the model (bit for
// bit), that no node runs in two steps, that a value asked for again
// comes from what is held, that nothing the steps still need is let go
// and nothing they no longer need is kept, that a step asking for a value
// let go runs the whole model, and that a frontier over its budget gives
// the same values from whole runs, as one for another engine than the
// built-in one does from the start.
func TestFrontier(t *testing.T) {
	m := branchyModel(t)
	src := newSampleSource(17, 7, 3, 6, 6)
	// The last step asks for a value let go: the frontier gives up holding
	// and runs the whole model.
	steps := [][]string{{"r1"}, {"a2", "r1"}, {"r2"}, {"a3"}, {"y"}, {"a1"}}
	var targets []string
	for _, s := range steps {
		targets = append(targets, s...)
	}
	whole := runValues(t, m, src, "a1", "r1", "a2", "r2", "a3", "y")
	if f, err := newFrontier(&AlgorithmData{Engine: "ort", Source: src}, 0, m, targets); err != nil || !f.off {
		t.Errorf("a frontier for ONNX Runtime holds values (err %v): its cut-out parts would not compute as the whole model", err)
	}
	defer func(b int64) { frontierBudget = b }(frontierBudget)
	for _, budget := range []int64{1 << 30, 0} {
		frontierBudget = budget
		d := &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 2}, Source: src, BatchSize: 3}
		f, err := newFrontier(d, 0, m, targets)
		if err != nil {
			t.Fatal(err)
		}
		if f.off != (budget == 0) {
			t.Fatalf("budget %d: off = %v", budget, f.off)
		}
		ran := map[string]int{}
		for i, want := range steps {
			st, err := f.step(m, want)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range st.ran {
				ran[n.Name]++
			}
			for b, span := range f.batches {
				got, err := st.run(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range want {
					all := whole[name].Float32s()
					per := len(all) / src.n
					ref := all[span[0]*per : span[1]*per]
					g := got[name].Float32s()
					if len(g) != len(ref) {
						t.Fatalf("budget %d, step %d, batch %d: %s has %d values, want %d", budget, i, b, name, len(g), len(ref))
					}
					for k := range g {
						if math.Float32bits(g[k]) != math.Float32bits(ref[k]) {
							t.Fatalf("budget %d, step %d, batch %d: %s[%d] = %g, a whole run gives %g", budget, i, b, name, k, g[k], ref[k])
						}
					}
				}
			}
			st.close()
			if i == 4 && budget > 0 {
				for b, held := range f.held {
					if len(held) != 0 || f.bytes != 0 {
						t.Errorf("batch %d still holds %d values (%d bytes in all) after the last target", b, len(held), f.bytes)
					}
				}
			}
		}
		if !f.off {
			t.Errorf("budget %d: still holding after a step asked for a value let go", budget)
		}
		if budget == 0 {
			continue
		}
		for name, c := range ran {
			if c > 1 {
				t.Errorf("node %s ran in %d steps", name, c)
			}
		}
		if ran["sig"] != 0 {
			t.Error("the side branch no target needs ran")
		}
		want := []string{"add", "c1", "c2", "c3", "cat", "r1", "r2"}
		if got := slices.Sorted(func(yield func(string) bool) {
			for k := range ran {
				if !yield(k) {
					return
				}
			}
		}); !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
	}
}

// TestAdaRoundFrontierOff checks that AdaRound writes the same model when
// its frontiers hold nothing (over budget: every wave runs the whole
// models) as when they hold the waves' frontier.
func TestAdaRoundFrontierOff(t *testing.T) {
	defer func(b int64) { frontierBudget = b }(frontierBudget)
	var outs [][]byte
	for _, budget := range []int64{1 << 30, 0} {
		frontierBudget = budget
		outs = append(outs, writtenBytes(t, quantizeAdaRound(t, "algorithms:\n  adaround: {iterations: 50}\n", 2)))
	}
	sameWithAndWithoutHolding(t, outs)
}

// writtenBytes is the model u wrote, serialized.
func writtenBytes(t *testing.T, u *Unit) []byte {
	t.Helper()
	b, err := u.Result.Model.Marshal(u.Result.Model.Proto)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameWithAndWithoutHolding fails the test when the models written with
// the frontiers holding and without (outs[0], outs[1]) differ.
func sameWithAndWithoutHolding(t *testing.T, outs [][]byte) {
	t.Helper()
	if !slices.Equal(outs[0], outs[1]) {
		t.Fatal("AdaRound wrote different models with and without its frontiers")
	}
}

// TestAdaRoundControlFlow runs AdaRound on models whose If and Loop
// subgraphs read main-graph values beside main-graph layers (the Scan
// model has none outside its body): the frontier's cut-out steps carry
// the subgraphs and the values they read, it keeps holding to the end,
// and the written model is the one whole runs give.
func TestAdaRoundControlFlow(t *testing.T) {
	defer func(b int64) { frontierBudget = b }(frontierBudget)
	var made []*frontier
	frontierMade = func(f *frontier) { made = append(made, f) }
	defer func() { frontierMade = nil }()
	pc, err := config.PresetConfig("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	algs, err := config.Parse([]byte("algorithms:\n  adaround: {iterations: 20}\n"), "adaround.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range controlCases[:2] {
		t.Run(c.name, func(t *testing.T) {
			var outs [][]byte
			for _, budget := range []int64{1 << 30, 0} {
				frontierBudget = budget
				made = nil
				m := loadControl(t, c)
				src := signSource{m}
				ropts := runtime.Options{Threads: 1}
				u := &Unit{Model: m, Config: pc.Quant, Algorithms: algs.Algorithms,
					Calibrate: EngineCalibrator("go", ropts, src, calibrate.Options{BatchSize: 1}, nil),
					Data:      &AlgorithmData{Engine: "go", Runtime: ropts, Source: src, BatchSize: 1}}
				if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
					t.Fatal(err)
				}
				rounded := 0
				for _, l := range u.Layers {
					if l.Algorithm == adaroundAlgorithmName && l.Skipped == "" {
						rounded++
					}
				}
				if rounded == 0 {
					t.Fatal("AdaRound rounded no layer")
				}
				if len(made) != 2 {
					t.Fatalf("%d frontiers made, want the float and the quantized model's", len(made))
				}
				for _, f := range made {
					if f.off != (budget == 0) {
						t.Errorf("budget %d: a frontier's holding is %v at the end", budget, !f.off)
					}
				}
				outs = append(outs, writtenBytes(t, u))
			}
			sameWithAndWithoutHolding(t, outs)
		})
	}
}

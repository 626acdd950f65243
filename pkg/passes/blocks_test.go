package passes

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels/llama"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// tokenSource is n sequences of length tokens of random ids below vocab
// (seeded), as the input "input_ids".
type tokenSource struct {
	ids           []int64
	n, seq, vocab int
}

func newTokenSource(seed uint64, n, seq, vocab int) *tokenSource {
	rng := rand.New(rand.NewPCG(seed, 5))
	ids := make([]int64, n*seq)
	for i := range ids {
		ids[i] = int64(rng.IntN(vocab))
	}
	return &tokenSource{ids: ids, n: n, seq: seq, vocab: vocab}
}

func (s *tokenSource) Samples() int { return s.n }
func (s *tokenSource) Random() bool { return false }
func (s *tokenSource) Close() error { return nil }
func (s *tokenSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	ids := append([]int64(nil), s.ids[start*s.seq:end*s.seq]...)
	return map[string]*tensor.Tensor{"input_ids": tensor.FromInt64(ids, end-start, s.seq)}, nil
}

func tinyDecoder(t *testing.T, c llama.Config) *onnxgraph.Model {
	t.Helper()
	b, err := llama.Bytes(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnxgraph.LoadBytes(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// isProjection marks the decoder's MatMuls with an initializer weight.
func isProjection(n *onnxgraph.Node) bool {
	return n.OpType == "MatMul" && len(n.Inputs) == 2 && n.Inputs[1] != nil && n.Inputs[1].IsInitializer
}

// TestPlanBlocks checks the cuts planBlocks finds in generated decoders:
// one block per attention half and per MLP half of every decoder layer,
// then the head, each holding its layers, and each passing on one value
// computed from the layers (the residual stream) besides values computed
// from the inputs alone.
func TestPlanBlocks(t *testing.T) {
	for _, layers := range []int{1, 3} {
		c := llama.Tiny()
		c.Layers = layers
		m := tinyDecoder(t, c)
		blocks, why := planBlocks(m.Graph, isProjection)
		if blocks == nil {
			t.Fatalf("%d layers: no blocks: %s", layers, why)
		}
		var got, want []string
		for range layers {
			want = append(want, "q_proj k_proj v_proj o_proj", "gate_proj up_proj down_proj")
		}
		want = append(want, "lm_head")
		for _, b := range blocks {
			var names []string
			for _, n := range b.layers {
				parts := strings.Split(n.Name, "/") // "/model/layers.0/mlp/up_proj/MatMul"
				names = append(names, parts[len(parts)-2])
			}
			got = append(got, strings.Join(names, " "))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%d layers: blocks hold\n%q\nwant\n%q", layers, got, want)
		}
	}
	// A single layer gives no blocks, and says why.
	m := linearModel(t)
	if blocks, why := planBlocks(m.Graph, func(n *onnxgraph.Node) bool { return n.Name == "fc1" }); blocks != nil || why == "" {
		t.Fatalf("one layer: %d blocks (%q), want none and a reason", len(blocks), why)
	}
}

// TestBlockRunnerMatchesWholeModel runs the 2-layer generated decoder
// block by block, moving the cut to the end, and checks that the values
// each block reads are those of the whole model run on the same batches
// within float rounding, that one block session is alive at a time, and
// that each cut holds only what later blocks read.
func TestBlockRunnerMatchesWholeModel(t *testing.T) { checkBlockRunner(t, "go") }

// checkBlockRunner is TestBlockRunnerMatchesWholeModel on an engine.
func checkBlockRunner(t *testing.T, engine string) {
	m := tinyDecoder(t, llama.Tiny())
	blocks, why := planBlocks(m.Graph, isProjection)
	if blocks == nil {
		t.Fatal(why)
	}
	src := newTokenSource(3, 7, 12, llama.Tiny().Vocab)
	u := &Unit{Model: m, Data: &AlgorithmData{Engine: engine, Runtime: runtime.Options{Threads: 2}, Source: src, BatchSize: 3}}
	var taps []string
	for _, b := range blocks {
		for _, n := range b.layers {
			taps = append(taps, n.Inputs[0].Name)
		}
	}
	collect := func(into map[string][]float32) runtime.Tap {
		return func(name string, x *tensor.Tensor) {
			f, err := x.AsFloat32()
			if err != nil {
				t.Fatal(err)
			}
			into[name] = append(into[name], f...)
		}
	}
	whole := map[string][]float32{}
	if err := u.Data.forEachBatch(context.Background(), m, 0, taps, collect(whole), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	r, err := newBlockRunner(u, blocks, 0)
	if err != nil {
		t.Fatal(err)
	}
	byBlock := map[string][]float32{}
	for _, b := range blocks {
		var bt []string
		for _, n := range b.layers {
			bt = append(bt, n.Inputs[0].Name)
		}
		if err := r.run(context.Background(), b, bt, collect(byBlock), nil, true); err != nil {
			t.Fatal(err)
		}
		// Held now: what later blocks read from this block or before.
		want := map[string]bool{}
		for _, later := range blocks[b.index+1:] {
			for _, v := range later.inputs {
				if v.Producer == nil || blockIndex(blocks, v.Producer) <= b.index {
					want[v.Name] = true
				}
			}
		}
		for i, held := range r.held {
			if len(held) != len(want) {
				t.Fatalf("after block %d, batch %d: holds %q, want %d values", b.index, i, keys(held), len(want))
			}
			for name := range held {
				if !want[name] {
					t.Fatalf("after block %d, batch %d: holds %q, which no later block reads", b.index, i, name)
				}
			}
		}
	}
	if r.maxOpen != 1 {
		t.Errorf("%d block sessions alive at once, want 1", r.maxOpen)
	}
	for _, name := range taps {
		a, b := whole[name], byBlock[name]
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%s: %d values block by block, %d from the whole model", name, len(b), len(a))
		}
		for i := range a {
			if d := math.Abs(float64(a[i] - b[i])); d > 1e-5*(1+math.Abs(float64(a[i]))) {
				t.Fatalf("%s[%d] = %g block by block, %g from the whole model", name, i, b[i], a[i])
			}
		}
	}
}

func blockIndex(blocks []*graphBlock, n *onnxgraph.Node) int {
	for _, b := range blocks {
		for _, bn := range b.nodes {
			if bn == n {
				return b.index
			}
		}
	}
	return -1
}

func keys(m map[string]*tensor.Tensor) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// gptqDecoder quantizes the generated decoder's projections to int4 per
// block of 16 with GPTQ on 12 sequences of 16 random tokens (fixed seeds).
func gptqDecoder(t *testing.T, c llama.Config, threads int, scratch *onnxgraph.Scratch, progress func(BlockProgress)) *Unit {
	t.Helper()
	text := "quantization_config:\n  global_config:\n    op_input_spec: null\n    op_output_spec: null\n    op_state_spec:\n      weight: {dtype: int4, qscheme: symmetric, granularity: {type: per_block, block_size: 16}}\nalgorithms:\n  gptq: true\n"
	cfg, err := config.Parse([]byte(text), "w4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &Unit{Model: tinyDecoder(t, c), Config: cfg.Quant, Algorithms: cfg.Algorithms, Write: finalize.Options{Scratch: scratch},
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			return observe(t, m, plan), nil
		},
		Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: threads}, Source: newTokenSource(9, 12, 16, c.Vocab), BatchSize: 5, Progress: progress}}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

// gptqReports are the GPTQ layer reports by node.
func gptqReports(u *Unit) map[string]LayerReport {
	out := map[string]LayerReport{}
	for _, l := range u.Layers {
		if l.Algorithm == gptqAlgorithmName && l.Skipped == "" {
			out[l.Node] = l
		}
	}
	return out
}

// TestGPTQBlocksMatchWholeModelSequential checks block-by-block GPTQ on
// the generated decoder against the same sequential scheme run with the
// whole model for every block: the same layers, one progress record per
// block, every one at least as good as round-to-nearest, the same reported errors within float
// rounding and all but a few codes equal.
func TestGPTQBlocksMatchWholeModelSequential(t *testing.T) {
	var events []BlockProgress
	blocked := gptqDecoder(t, llama.Tiny(), 2, nil, func(e BlockProgress) { events = append(events, e) })
	gptqWholeModelBlocks = true
	whole := gptqDecoder(t, llama.Tiny(), 2, nil, nil)
	gptqWholeModelBlocks = false
	rb, rw := gptqReports(blocked), gptqReports(whole)
	if len(rb) != 15 || len(rb) != len(rw) {
		t.Fatalf("%d layers block by block, %d with the whole model, want 15", len(rb), len(rw))
	}
	noted := false
	for _, n := range blocked.Plan.Notes {
		noted = noted || strings.HasPrefix(n, "gptq: block by block (5 blocks)")
	}
	if !noted {
		t.Errorf("notes %q do not say block by block in 5 blocks", blocked.Plan.Notes)
	}
	if len(events) != 5 || events[4].Block != 5 || events[4].Blocks != 5 || events[4].Algorithm != gptqAlgorithmName || len(events[0].Layers) != 4 {
		t.Errorf("progress records %+v, want one per block of 5, the first with its 4 layers", events)
	}
	var differ, total int
	for node, b := range rb {
		w := rw[node]
		if b.After < b.Before {
			t.Errorf("%s: %.2f dB after GPTQ, %.2f with round-to-nearest", node, float64(b.After), float64(b.Before))
		}
		if math.Abs(float64(b.Before-w.Before)) > 0.01 || math.Abs(float64(b.After-w.After)) > 0.05 {
			t.Errorf("%s: %.3f → %.3f dB block by block, %.3f → %.3f with the whole model", node, float64(b.Before), float64(b.After), float64(w.Before), float64(w.After))
		}
		wv := blocked.Model.Graph.Node(node).Inputs[1]
		gb, _, err := constFloats(blocked.Model, wv)
		if err != nil {
			t.Fatal(err)
		}
		gw, _, err := constFloats(whole.Model, whole.Model.Graph.Value(wv.Name))
		if err != nil {
			t.Fatal(err)
		}
		for i := range gb {
			if gb[i] != gw[i] {
				differ++
			}
		}
		total += len(gb)
	}
	t.Logf("%d of %d weights differ", differ, total)
	if differ > total/200 {
		t.Errorf("%d of %d weights differ between block by block and the whole model", differ, total)
	}
}

// TestGPTQBlocksDeterministic checks that block-by-block GPTQ writes
// byte-identical models across thread counts, and with the rounded
// weights moved to a scratch file as they are made (a decoder of width
// 128, whose weights are large enough to move).
func TestGPTQBlocksDeterministic(t *testing.T) {
	c := llama.Tiny()
	c.Hidden, c.Intermediate = 128, 256
	sameModelWithScratch(t, func(threads int, scratch *onnxgraph.Scratch) *Unit {
		return gptqDecoder(t, c, threads, scratch, nil)
	}, func(u *Unit) []string {
		var nodes []string
		for node := range gptqReports(u) {
			nodes = append(nodes, node)
		}
		return nodes
	})
}

// sameModelWithScratch fails unless quantize writes byte-identical models
// at 1, 2 and 3 threads and at 2 threads with a scratch file; on the
// scratch run, every weight of the nodes rewritten(u) names that is
// 64 KiB or more must wait in the scratch file and every smaller one in
// memory. It returns how many weights the scratch file held.
func sameModelWithScratch(t *testing.T, quantize func(threads int, scratch *onnxgraph.Scratch) *Unit, rewritten func(u *Unit) []string) int {
	t.Helper()
	var outs [][]byte
	moved := 0
	for _, run := range []struct {
		threads int
		scratch bool
	}{{1, false}, {2, false}, {3, false}, {2, true}} {
		var scratch *onnxgraph.Scratch
		if run.scratch {
			s, err := onnxgraph.NewScratch(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			scratch = s
		}
		u := quantize(run.threads, scratch)
		if run.scratch {
			for _, node := range rewritten(u) {
				w := u.Model.Graph.Node(node).Inputs[1]
				large := 4*tensor.NumElements(intShape(w.Const.GetDims())) >= 64<<10
				if u.Model.InStore(w.Const) != large {
					t.Errorf("%s: weight %q of %v in the scratch file: %v", node, w.Name, w.Const.GetDims(), !large)
				}
				if large {
					moved++
				}
			}
		}
		b, err := u.Result.Model.Marshal(u.Result.Model.Proto)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
	}
	for i := 1; i < len(outs); i++ {
		if !bytes.Equal(outs[0], outs[i]) {
			t.Fatalf("run %d wrote a different model", i)
		}
	}
	return moved
}

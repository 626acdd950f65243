package passes

import (
	"context"
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// frontierBudget bounds the bytes a frontier holds (every batch's values
// crossing its cut); past it, the frontier lets go of them and each later
// step runs its whole model from the graph inputs.
var frontierBudget int64 = 1 << 30

// A frontier runs a model on the algorithm data in steps, each step asking
// for some values and computing only what they need beyond what the steps
// before computed: it holds, for every calibration batch, the values
// computed so far that nodes still to run read. A layer-by-layer
// algorithm whose model changes only where no step has looked yet
// (AdaRound: a wave of layers is rounded after its inputs were read, and
// nothing read before depends on it) so runs each node once per batch
// instead of once per wave. A step may give a new instance of the model
// (rewritten weights, the same graph): nodes and values are known by
// their names. Only the values that lead to targets (the values any step
// will ask for) are held.
type frontier struct {
	d       *AlgorithmData
	batches [][2]int
	// held[b] are batch b's held values; done are the values computed
	// (held, or let go once every reader that leads to a target ran).
	held  []map[string]*tensor.Tensor
	done  map[string]bool
	bytes int64
	// leads are the values that targets depend on (targets included).
	leads map[string]bool
	// off: holding gave up (over budget, a value let go asked for again,
	// or an engine other than the built-in one); steps run whole models.
	off bool
}

// newFrontier reads the calibration batches (at most samples samples) of
// model m's inputs and holds them, for steps asking for targets.
func newFrontier(d *AlgorithmData, samples int, m *onnxgraph.Model, targets []string) (*frontier, error) {
	f := &frontier{d: d, done: map[string]bool{}, leads: map[string]bool{}}
	if frontierMade != nil {
		frontierMade(f)
	}
	var walk func(v *onnxgraph.Value)
	walk = func(v *onnxgraph.Value) {
		if v == nil || v.Const != nil || f.leads[v.Name] {
			return
		}
		f.leads[v.Name] = true
		if p := v.Producer; p != nil && p.Graph == m.Graph {
			for _, in := range nodeReads(p) {
				walk(in)
			}
		}
	}
	for _, name := range targets {
		walk(m.Graph.Value(name))
	}
	err := d.eachBatch(samples, func(start, end int, in map[string]*tensor.Tensor) error {
		f.batches = append(f.batches, [2]int{start, end})
		held := map[string]*tensor.Tensor{}
		for name, t := range in {
			f.done[name] = true
			if f.leads[name] {
				held[name] = t
				f.bytes += tensorBytes(t)
			}
		}
		f.held = append(f.held, held)
		return nil
	})
	if err != nil {
		return nil, err
	}
	f.checkBudget()
	if !d.builtIn() {
		// Another engine optimises a cut-out part of a graph differently
		// from the whole (ONNX Runtime's Q/DQ fusions stop at the cut):
		// its values would not be those of the model it runs for the user.
		f.off, f.held, f.bytes = true, nil, 0
	}
	return f, nil
}

// frontierMade, when set, is told of every frontier made: tests check
// whether it kept holding.
var frontierMade func(*frontier)

func tensorBytes(t *tensor.Tensor) int64 {
	return int64(t.Len()) * int64(max(t.DType.ElemSize(), 1))
}

func (f *frontier) checkBudget() {
	if f.bytes > frontierBudget {
		f.off, f.held, f.bytes = true, nil, 0
	}
}

// frontierStep is one step: the nodes it runs and the session running
// them.
type frontierStep struct {
	f    *frontier
	m    *onnxgraph.Model
	s    runtime.Session
	want []string
	// inputs are the held values its nodes read; keep the values they
	// compute that nodes still to run read.
	inputs, keep []string
	ran          []*onnxgraph.Node
}

// step prepares a step of model m asking for the values want; close it
// after running it on every batch. When what is held does not serve the
// step (a value it needs was let go, or m is not the graph the frontier
// was made for), the frontier gives up holding and the step runs the
// whole model.
func (f *frontier) step(m *onnxgraph.Model, want []string) (*frontierStep, error) {
	st, err := f.partStep(m, want)
	if err != nil && !f.off {
		f.off, f.held, f.bytes = true, nil, 0
		return f.partStep(m, want)
	}
	return st, err
}

func (f *frontier) partStep(m *onnxgraph.Model, want []string) (*frontierStep, error) {
	st := &frontierStep{f: f, m: m, want: want}
	if f.off {
		s, err := runtime.Open(f.d.Engine, m, f.d.Runtime)
		if err != nil {
			return nil, err
		}
		st.s = s
		return st, nil
	}
	g := m.Graph
	need := map[*onnxgraph.Node]bool{}
	isInput := map[string]bool{}
	var ins []*onnxgraph.Value
	var visit func(v *onnxgraph.Value) error
	visit = func(v *onnxgraph.Value) error {
		switch {
		case v == nil || v.Const != nil || isInput[v.Name]:
			return nil
		case f.done[v.Name]:
			if len(f.held) > 0 && f.held[0][v.Name] == nil {
				return fmt.Errorf("value %q was let go and is asked for again", v.Name)
			}
			isInput[v.Name] = true
			ins = append(ins, v)
			return nil
		case v.Producer == nil || v.Producer.Graph != g:
			return fmt.Errorf("value %q has no producer in the main graph", v.Name)
		case need[v.Producer]:
			return nil
		}
		need[v.Producer] = true
		for _, in := range nodeReads(v.Producer) {
			if err := visit(in); err != nil {
				return err
			}
		}
		return nil
	}
	for _, name := range want {
		v := g.Value(name)
		if v == nil {
			return nil, fmt.Errorf("value %q is not in the model", name)
		}
		if err := visit(v); err != nil {
			return nil, err
		}
	}
	computed := map[string]bool{}
	for _, n := range g.Nodes {
		if need[n] {
			st.ran = append(st.ran, n)
			for _, v := range n.Outputs {
				if v != nil && v.Name != "" {
					computed[v.Name] = true
				}
			}
		}
	}
	if len(st.ran) == 0 {
		return st, nil // every value asked for is held
	}
	for _, v := range ins {
		st.inputs = append(st.inputs, v.Name)
	}
	outs, outSet := []*onnxgraph.Value{}, map[string]bool{}
	addOut := func(name string) {
		if computed[name] && !outSet[name] {
			outSet[name] = true
			outs = append(outs, g.Value(name))
		}
	}
	for _, name := range want {
		addOut(name)
	}
	for _, name := range f.stillRead(g, computed) {
		if computed[name] {
			st.keep = append(st.keep, name)
			addOut(name)
		}
	}
	types := elemTypes(g)
	var first map[string]*tensor.Tensor // batch 0's values show the types
	if len(f.held) > 0 {
		first = f.held[0]
	}
	typeOf := func(v *onnxgraph.Value) *onnxpb.TypeProto { return valueType(v, types, first) }
	sub, err := nodesModel(m, g.Name+"_step", st.ran, ins, outs, typeOf)
	if err != nil {
		return nil, err
	}
	if st.s, err = runtime.Open(f.d.Engine, sub, f.d.Runtime); err != nil {
		return nil, err
	}
	return st, nil
}

// stillRead lists, in graph order, the values that the nodes leading to a
// target and not run yet (nor by the step that computes computed) read.
func (f *frontier) stillRead(g *onnxgraph.Graph, computed map[string]bool) []string {
	var names []string
	seen := map[string]bool{}
	for _, n := range g.Nodes {
		ran, leads := true, false
		for _, v := range n.Outputs {
			if v != nil && v.Name != "" {
				ran = ran && (f.done[v.Name] || computed[v.Name])
				leads = leads || f.leads[v.Name]
			}
		}
		if ran || !leads {
			continue
		}
		for _, v := range nodeReads(n) {
			if !seen[v.Name] {
				seen[v.Name] = true
				names = append(names, v.Name)
			}
		}
	}
	return names
}

// run runs the step on batch b and returns float32 copies of the values
// asked for.
func (st *frontierStep) run(ctx context.Context, b int) (map[string]*tensor.Tensor, error) {
	f := st.f
	if f.off {
		in, err := f.d.Source.Batch(f.batches[b][0], f.batches[b][1])
		if err != nil {
			return nil, err
		}
		return runKeeping(ctx, st.s, in, st.want)
	}
	held := f.held[b]
	out := held
	if st.s != nil {
		feeds := make(map[string]*tensor.Tensor, len(st.inputs))
		for _, name := range st.inputs {
			feeds[name] = held[name]
		}
		var err error
		if out, err = st.s.Run(ctx, feeds, runtime.RunOptions{}); err != nil {
			return nil, err
		}
		for name, t := range held {
			if _, ok := out[name]; !ok {
				out[name] = t
			}
		}
	}
	kept := map[string]*tensor.Tensor{}
	for _, name := range st.want {
		t := out[name]
		if t == nil {
			return nil, fmt.Errorf("value %q was not computed", name)
		}
		c, err := floatCopy(name, t)
		if err != nil {
			return nil, err
		}
		kept[name] = c
	}
	for _, name := range st.keep {
		held[name] = out[name]
		f.bytes += tensorBytes(out[name])
	}
	return kept, nil
}

// close ends the step: what it computed is done, and the held values no
// node still to run reads are let go.
func (st *frontierStep) close() {
	if st.s != nil {
		st.s.Close()
	}
	f := st.f
	if f.off || len(st.ran) == 0 {
		return
	}
	for _, n := range st.ran {
		for _, v := range n.Outputs {
			if v != nil && v.Name != "" {
				f.done[v.Name] = true
			}
		}
	}
	read := map[string]bool{}
	for _, name := range f.stillRead(st.m.Graph, nil) {
		read[name] = true
	}
	for _, held := range f.held {
		for name, t := range held {
			if !read[name] {
				f.bytes -= tensorBytes(t)
				delete(held, name)
			}
		}
	}
	f.checkBudget()
}

package passes

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// A graphBlock is a run of consecutive main-graph nodes (in topological
// order) that the block runner executes on its own: a decoder block, or
// half of one.
type graphBlock struct {
	index int
	nodes []*onnxgraph.Node
	// inputs are the non-constant values its nodes read from before it
	// (graph inputs, earlier blocks' outputs); outputs are the values it
	// computes that later blocks read.
	inputs, outputs []*onnxgraph.Value
	// layers are its nodes that the caller's predicate marked.
	layers []*onnxgraph.Node
	// end is the position past its last node in the graph's order.
	end int
}

// planBlocks cuts the main graph into blocks for sequential processing of
// the layers isLayer marks (the layers whose weights an algorithm
// rewrites). A cut goes between two nodes where at most one of the
// activations crossing it (computed before, read after) belongs to the
// stream: depends on a marked layer or, before the first layer, leads to
// its input. In a decoder that is the residual stream between blocks and
// between the attention and MLP halves of one; the other values crossing
// (graph inputs, masks, positions, rotary tables) do not change when the
// layers do and are carried along. Each block ends at the first such cut
// after its first marked layer; the nodes after the last marked layer are
// left out (nothing the caller needs). It returns nil and why when the
// graph gives fewer than two blocks.
func planBlocks(g *onnxgraph.Graph, isLayer func(*onnxgraph.Node) bool) ([]*graphBlock, string) {
	nodes := g.Nodes
	first := map[*onnxgraph.Value]int{} // producer's position (−1: graph input)
	last := map[*onnxgraph.Value]int{}  // last reader's position
	dependent := map[*onnxgraph.Value]bool{}
	layers := 0
	var firstLayer *onnxgraph.Node
	for i, n := range nodes {
		dep := isLayer(n)
		if dep {
			layers++
			if firstLayer == nil {
				firstLayer = n
			}
		}
		for _, v := range nodeReads(n) {
			if _, ok := first[v]; !ok {
				first[v] = -1
			}
			last[v] = i
			dep = dep || dependent[v]
		}
		for _, v := range n.Outputs {
			if v != nil && v.Const == nil {
				first[v], dependent[v] = i, dep
			}
		}
	}
	if layers < 2 {
		return nil, "a single layer, nothing to sequence"
	}
	// Before the first layer the stream is what feeds it: the values
	// computed on the way to its input count as the stream too.
	feedsFirst := map[*onnxgraph.Value]bool{}
	var walk func(v *onnxgraph.Value)
	walk = func(v *onnxgraph.Value) {
		if feedsFirst[v] || v.Producer == nil || v.Producer.Graph != g {
			return
		}
		feedsFirst[v] = true
		for _, in := range nodeReads(v.Producer) {
			walk(in)
		}
	}
	for _, v := range nodeReads(firstLayer) {
		walk(v)
	}
	// crossing[p]: the stream values computed before node p and read at
	// or after it.
	crossing := make([]int, len(nodes)+1)
	for v, f := range first {
		if l, ok := last[v]; ok && (dependent[v] || feedsFirst[v]) && l > f {
			crossing[f+1]++
			crossing[l+1]--
		}
	}
	for p := 1; p <= len(nodes); p++ {
		crossing[p] += crossing[p-1]
	}
	var blocks []*graphBlock
	start, marked := 0, false
	for p, n := range nodes {
		if marked && crossing[p] <= 1 {
			blocks = append(blocks, &graphBlock{index: len(blocks), nodes: nodes[start:p], end: p})
			start, marked = p, false
		}
		marked = marked || isLayer(n)
	}
	if marked {
		blocks = append(blocks, &graphBlock{index: len(blocks), nodes: nodes[start:], end: len(nodes)})
	}
	if len(blocks) < 2 {
		return nil, fmt.Sprintf("no point between its %d layers where at most one activation computed from them carries everything forward", layers)
	}
	blockOf := map[*onnxgraph.Node]int{}
	for _, b := range blocks {
		for _, n := range b.nodes {
			blockOf[n] = b.index
			if isLayer(n) {
				b.layers = append(b.layers, n)
			}
		}
	}
	for _, b := range blocks {
		seen := map[*onnxgraph.Value]bool{}
		for _, n := range b.nodes {
			for _, v := range nodeReads(n) {
				if bi, ok := blockOf[v.Producer]; (!ok || bi < b.index) && !seen[v] {
					seen[v] = true
					b.inputs = append(b.inputs, v)
					if ok {
						blocks[bi].outputs = appendValueOnce(blocks[bi].outputs, v)
					}
				}
			}
		}
	}
	return blocks, ""
}

func appendValueOnce(list []*onnxgraph.Value, v *onnxgraph.Value) []*onnxgraph.Value {
	for _, w := range list {
		if w == v {
			return list
		}
	}
	return append(list, v)
}

// nodeReads are the non-constant values n reads: its inputs and the
// values of this graph its subgraphs read.
func nodeReads(n *onnxgraph.Node) []*onnxgraph.Value {
	var out []*onnxgraph.Value
	for _, vs := range [][]*onnxgraph.Value{n.Inputs, n.OuterInputs} {
		for _, v := range vs {
			if v != nil && v.Const == nil && v.Name != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// blockRunner runs a model block by block on the algorithm data: it holds,
// for every calibration batch, the values crossing the current cut, and
// runs one block at a time with the model's current weights, so that a
// block's inputs come from the earlier blocks as they were rewritten.
// Memory holds those activations and one block's weights.
type blockRunner struct {
	u      *Unit
	blocks []*graphBlock
	// held[i] are batch i's values crossing the current cut.
	held []map[string]*tensor.Tensor
	// lastBlock is the last block that reads a value.
	lastBlock map[string]int
	// types are the graph's element types, for the blocks' inputs and
	// outputs that the model declares none for (ONNX Runtime needs them).
	types map[string]tensor.DType
	// open counts the block sessions alive (tests check that it stays at
	// most one).
	open, maxOpen int
}

// newBlockRunner reads the calibration batches (at most samples samples)
// of the graph inputs the blocks read.
func newBlockRunner(u *Unit, blocks []*graphBlock, samples int) (*blockRunner, error) {
	r := &blockRunner{u: u, blocks: blocks, lastBlock: map[string]int{}, types: elemTypes(u.Model.Graph)}
	if blockRunnerMade != nil {
		blockRunnerMade(r)
	}
	for _, b := range blocks {
		for _, v := range b.inputs {
			r.lastBlock[v.Name] = b.index
		}
	}
	err := u.Data.eachBatch(samples, func(_, _ int, in map[string]*tensor.Tensor) error {
		held := map[string]*tensor.Tensor{}
		for name, t := range in {
			if _, ok := r.lastBlock[name]; ok {
				held[name] = t
			}
		}
		r.held = append(r.held, held)
		return nil
	})
	return r, err
}

// blockRunnerMade, when set, is told of every block runner made: tests
// read its count of open sessions.
var blockRunnerMade func(*blockRunner)

// run runs block b on every held batch with the model's current weights,
// calling tap for the values in taps as they are computed (block inputs
// among them straight from the held batch) and after at the end of each
// batch. With advance, the block's outputs replace the values no later
// block reads: the cut moves past b.
func (r *blockRunner) run(ctx context.Context, b *graphBlock, taps []string, tap runtime.Tap, after func() error, advance bool) error {
	m, err := r.subModel(b)
	if err != nil {
		return err
	}
	s, err := runtime.Open(r.u.Data.Engine, m, r.u.Data.Runtime)
	if err != nil {
		return fmt.Errorf("block %d (%s … %s): %w", b.index, b.nodes[0], b.nodes[len(b.nodes)-1], err)
	}
	r.open++
	r.maxOpen = max(r.maxOpen, r.open)
	defer func() {
		s.Close()
		r.open--
	}()
	isInput := map[string]bool{}
	for _, v := range b.inputs {
		isInput[v.Name] = true
	}
	var computed, direct []string
	for _, t := range taps {
		if isInput[t] {
			direct = append(direct, t)
		} else {
			computed = append(computed, t)
		}
	}
	opts := runtime.RunOptions{}
	if len(computed) > 0 {
		opts = runtime.RunOptions{Tap: tap, TapValues: computed}
	}
	for i, held := range r.held {
		if err := ctx.Err(); err != nil {
			return err
		}
		feeds := make(map[string]*tensor.Tensor, len(b.inputs))
		for _, v := range b.inputs {
			t, ok := held[v.Name]
			if !ok {
				return fmt.Errorf("block %d: value %q is not held (batch %d)", b.index, v.Name, i)
			}
			feeds[v.Name] = t
		}
		for _, name := range direct {
			tap(name, feeds[name])
		}
		out, err := s.Run(ctx, feeds, opts)
		if err != nil {
			return fmt.Errorf("block %d (%s … %s), batch %d: %w", b.index, b.nodes[0], b.nodes[len(b.nodes)-1], i, err)
		}
		if after != nil {
			if err := after(); err != nil {
				return fmt.Errorf("block %d, batch %d: %w", b.index, i, err)
			}
		}
		if !advance {
			continue
		}
		for _, v := range b.inputs {
			if r.lastBlock[v.Name] <= b.index {
				delete(held, v.Name)
			}
		}
		for _, v := range b.outputs {
			held[v.Name] = out[v.Name]
		}
	}
	return nil
}

// subModel is block b as a model of its own: its nodes, the constants they
// read (the model's current initializers), its inputs as graph inputs and
// its outputs as graph outputs.
func (r *blockRunner) subModel(b *graphBlock) (*onnxgraph.Model, error) {
	outs := b.outputs
	if len(outs) == 0 {
		// A session needs an output: the block's last node's first.
		outs = []*onnxgraph.Value{b.nodes[len(b.nodes)-1].Outputs[0]}
	}
	name := fmt.Sprintf("%s_block_%d", r.u.Model.Proto.GetGraph().GetName(), b.index)
	return nodesModel(r.u.Model, name, b.nodes, b.inputs, outs, r.typeOf)
}

// nodesModel is some of m's main-graph nodes (in graph order) as a model
// of their own: the constants they read (m's current initializers), the
// values inputs as graph inputs and outputs as graph outputs, typed by
// typeOf.
func nodesModel(m *onnxgraph.Model, name string, nodes []*onnxgraph.Node, inputs, outputs []*onnxgraph.Value, typeOf func(*onnxgraph.Value) *onnxpb.TypeProto) (*onnxgraph.Model, error) {
	in := map[*onnxgraph.Node]bool{}
	for _, n := range nodes {
		in[n] = true
	}
	gp := &onnxpb.GraphProto{Name: proto.String(name)}
	seen := map[string]bool{}
	for _, n := range nodes {
		gp.Node = append(gp.Node, n.Proto)
		for _, vs := range [][]*onnxgraph.Value{n.Inputs, n.OuterInputs} {
			for _, v := range vs {
				if v == nil || v.Const == nil || in[v.Producer] || seen[v.Name] {
					continue
				}
				seen[v.Name] = true
				c := v.Const
				if c.GetName() != v.Name {
					c = shallowRenamed(c, v.Name)
				}
				gp.Initializer = append(gp.Initializer, c)
			}
		}
	}
	for _, v := range inputs {
		gp.Input = append(gp.Input, &onnxpb.ValueInfoProto{Name: proto.String(v.Name), Type: typeOf(v)})
	}
	for _, v := range outputs {
		gp.Output = append(gp.Output, &onnxpb.ValueInfoProto{Name: proto.String(v.Name), Type: typeOf(v)})
	}
	mp := &onnxpb.ModelProto{
		IrVersion:    m.Proto.IrVersion,
		OpsetImport:  m.Proto.OpsetImport,
		Functions:    m.Proto.Functions,
		ProducerName: m.Proto.ProducerName,
		Graph:        gp,
	}
	return m.Derive(mp, nil)
}

// typeOf is v's declared type, else its element type as the graph's
// types tell it, else as held (a block's input), else none.
func (r *blockRunner) typeOf(v *onnxgraph.Value) *onnxpb.TypeProto {
	var held map[string]*tensor.Tensor
	if len(r.held) > 0 {
		held = r.held[0]
	}
	return valueType(v, r.types, held)
}

// valueType is v's declared type, else its element type as types tell
// it, else as its tensor in held shows it, else none: the type a value
// cut out of its graph (a sub-model's input or output) is declared with,
// which ONNX Runtime needs.
func valueType(v *onnxgraph.Value, types map[string]tensor.DType, held map[string]*tensor.Tensor) *onnxpb.TypeProto {
	if v.Type != nil {
		return v.Type
	}
	dt := types[v.Name]
	if t := held[v.Name]; dt == tensor.Undefined && t != nil {
		dt = t.DType
	}
	if dt == tensor.Undefined {
		return nil
	}
	return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt))}}}
}

// shallowRenamed is t under another name, sharing its data.
func shallowRenamed(t *onnxpb.TensorProto, name string) *onnxpb.TensorProto {
	c := &onnxpb.TensorProto{
		Dims: t.Dims, DataType: t.DataType, Name: &name,
		FloatData: t.FloatData, Int32Data: t.Int32Data, StringData: t.StringData, Int64Data: t.Int64Data,
		RawData: t.RawData, DoubleData: t.DoubleData, Uint64Data: t.Uint64Data,
		ExternalData: t.ExternalData, DataLocation: t.DataLocation,
	}
	return c
}

// divideHeld divides feature j (the last axis) of the held value name by
// s[j] in every batch, when the cut holds it: an algorithm folded 1/s
// into its producer, in a block already run, and the readers still to run
// read it scaled. Values not held are left alone.
func (r *blockRunner) divideHeld(name string, s []float32) error {
	for i, held := range r.held {
		t := held[name]
		if t == nil {
			continue
		}
		if t.DType != tensor.Float || len(t.Shape) == 0 || t.Shape[len(t.Shape)-1] != len(s) {
			return fmt.Errorf("held value %q (batch %d) is %s %v, want float with %d features on the last axis", name, i, t.DType, t.Shape, len(s))
		}
		f, err := t.AsFloat32()
		if err != nil {
			return err
		}
		out := make([]float32, len(f))
		for j, v := range f {
			out[j] = v / s[j%len(s)]
		}
		held[name] = tensor.FromFloat32(out, t.Shape...)
	}
	return nil
}

package finalize

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// ConstantsAsInitializers returns a copy of m in which every Constant node
// of the main graph is an initializer of the same name, as ONNX Runtime
// makes them before optimizing. Exporters that write parameters as
// Constant nodes (Paddle) would otherwise keep their BatchNormalization
// out of FoldBatchNorm and their weights out of the rules that want
// initializers. It returns m itself when there is nothing to move, or when
// the IR version (below 4) would need every initializer listed as a graph
// input.
func ConstantsAsInitializers(m *onnxgraph.Model) (*onnxgraph.Model, int, error) {
	if m.Proto.GetIrVersion() < 4 {
		return m, 0, nil
	}
	drop := map[int]bool{}
	for _, n := range m.Graph.Nodes {
		if n.OpType != "Constant" || n.Domain != "" || len(n.Outputs) != 1 {
			continue
		}
		if v := n.Outputs[0]; v != nil && v.Const != nil && !v.IsGraphOutput {
			drop[n.Index] = true
		}
	}
	if len(drop) == 0 {
		return m, 0, nil
	}
	out := proto.CloneOf(m.Proto)
	g := out.Graph
	nodes := g.Node[:0]
	for i, n := range g.Node {
		if !drop[i] {
			nodes = append(nodes, n)
			continue
		}
		v := m.Graph.Value(n.Output[0])
		t := proto.CloneOf(v.Const)
		t.Name = proto.String(n.Output[0])
		g.Initializer = append(g.Initializer, t)
	}
	g.Node = nodes
	fm, err := rewritten(m, out, "constants as initializers")
	if err != nil {
		return nil, 0, err
	}
	return fm, len(drop), nil
}

// rewritten wraps out, an edited copy of m's proto, as a model that reads
// its tensors as m does (same directory and stores) and keeps m's path;
// what names the rewrite in the error.
func rewritten(m *onnxgraph.Model, out *onnxpb.ModelProto, what string) (*onnxgraph.Model, error) {
	r, err := m.Derive(out, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	r.Path = m.Path
	return r, nil
}

// dropValueInfo removes from g's value_info the values a rewrite removed.
func dropValueInfo(g *onnxpb.GraphProto, dropped map[string]bool) {
	var vi []*onnxpb.ValueInfoProto
	for _, v := range g.ValueInfo {
		if !dropped[v.GetName()] {
			vi = append(vi, v)
		}
	}
	g.ValueInfo = vi
}

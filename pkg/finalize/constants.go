package finalize

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
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
	fm, err := m.Derive(out, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("constants as initializers: %w", err)
	}
	fm.Path = m.Path
	return fm, len(drop), nil
}

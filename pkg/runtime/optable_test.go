package runtime

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops/opstest"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestFakeOpFromTable checks that an op table entry alone decides what the
// engine fuses into a Conv: an op whose entry has the FuseConvRelu role
// joins the Conv's epilogue.
func TestFakeOpFromTable(t *testing.T) {
	chain := func() *convChain {
		m := opstest.Model(t)
		var conv *onnxgraph.Node
		for _, n := range m.Graph.Nodes {
			if n.OpType == "Conv" {
				conv = n
			}
		}
		none := func(*onnxgraph.Value) *tensor.Tensor { return nil }
		ready := func(*onnxgraph.Value) bool { return true }
		return planConvChain(conv, none, ready)
	}
	if ch := chain(); ch != nil {
		t.Fatalf("before the entry is added, the Conv fuses %s", ch.fusedOps())
	}
	opstest.Register(t)
	ch := chain()
	if ch == nil || ch.act == nil || ch.act.OpType != "FakeRelu" || ch.out.Name != "r" {
		t.Fatalf("chain %+v, want the Conv with FakeRelu in its epilogue", ch)
	}
}

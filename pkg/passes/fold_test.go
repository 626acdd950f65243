package passes

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestFoldPass checks that BatchNormalization folds in the fold pass, once
// (one note, in the plan dumped after fold), giving the Conv a bias before
// prepare plans its weight, and that KeepBatchNorm leaves it in the model.
func TestFoldPass(t *testing.T) {
	b := testmodels.New("convbn", 17)
	b.Input("x", tensor.Float, 1, 2, 5, 5).Output("y", tensor.Float, 1, 3, 5, 5)
	b.RandomInit("w", 0.5, 3, 2, 3, 3)
	b.Init("g", []int64{3}, []float32{1.5, 0.5, -0.7}).Init("beta", []int64{3}, []float32{0.1, -0.2, 0.3})
	b.Init("mean", []int64{3}, []float32{0.05, -0.4, 0.2}).Init("var", []int64{3}, []float32{0.8, 1.7, 0.02})
	b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
	b.Node("BatchNormalization", "bn", []string{"c", "g", "beta", "mean", "var"}, []string{"bn_out"})
	b.Node("Relu", "relu", []string{"bn_out"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Preset("w8")
	if err != nil {
		t.Fatal(err)
	}
	hasBN := func(m *onnxgraph.Model) bool {
		for _, n := range m.Graph.Nodes {
			if n.OpType == "BatchNormalization" {
				return true
			}
		}
		return false
	}
	for _, keep := range []bool{false, true} {
		var dump bytes.Buffer
		u := &Unit{Model: m, Config: cfg, Prepare: PrepareOptions{KeepBatchNorm: keep}}
		if _, err := Run(context.Background(), u, RunOptions{Until: "prepare", DumpAfter: "fold", Dump: &dump}); err != nil {
			t.Fatal(err)
		}
		if hasBN(u.Model) != keep {
			t.Errorf("KeepBatchNorm %v: BatchNormalization in the prepared model: %v", keep, hasBN(u.Model))
		}
		folds := 0
		for _, n := range u.Plan.Notes {
			if strings.Contains(n, "folded into") {
				folds++
			}
		}
		if want := map[bool]int{false: 1, true: 0}[keep]; folds != want || strings.Count(dump.String(), "folded into") != want {
			t.Errorf("KeepBatchNorm %v: %d fold notes in the plan, dump after fold:\n%s\nwant %d", keep, folds, dump.String(), want)
		}
		// Prepare plans the weight the Conv reads: the folded one.
		conv := u.Model.Graph.Node("conv")
		if w := u.Plan.Tensor("w"); w == nil || conv == nil || conv.Inputs[1].Const == nil || (len(conv.Inputs) == 3) == keep {
			t.Errorf("KeepBatchNorm %v: weight planned %v, Conv inputs %d", keep, w != nil, len(conv.Inputs))
		}
	}
	if hasBN(m) != true {
		t.Error("the fold pass changed the model it was given")
	}
}

package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// checkGolden compares got with testdata/golden/name (COREAIQ_UPDATE_GOLDEN=1
// rewrites it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", "golden", name), []byte(got))
}

// guideStep is one node of the guide test model: its op, its TorchScript
// scoped name, and the module chain the dynamo variant records.
type guideStep struct {
	op, name string
	in, out  []string
	// modules and classes are the enclosing modules, outermost first.
	modules, classes []string
	attrs            []any
}

// guideSteps is a small network holding every layer the guide's examples
// name: Conv, ConvTranspose (decoder.deconv1), Linear as Gemm (fc) and as
// MatMul (linear_23, in module proj), an Embedding (Gather on a table), a
// self-attention block with Softmax (model.selfattention.layer.0), Add and
// Concat.
func guideSteps() []guideStep {
	sa := []string{"model", "model.selfattention", "model.selfattention.layer.0"}
	saT := []string{"__main__.Model", "torch.nn.modules.activation.MultiheadAttention", "mymodelSelfAttention"}
	return []guideStep{
		{op: "Conv", name: "/conv1/Conv", in: []string{"x", "conv1.weight", "conv1.bias"}, out: []string{"c1"},
			modules: []string{"conv1"}, classes: []string{"torch.nn.modules.conv.Conv2d"}, attrs: []any{"pads", []int64{1, 1, 1, 1}}},
		{op: "Relu", name: "/relu/Relu", in: []string{"c1"}, out: []string{"r1"},
			modules: []string{"relu"}, classes: []string{"torch.nn.modules.activation.ReLU"}},
		{op: "ConvTranspose", name: "/decoder/deconv1/ConvTranspose", in: []string{"r1", "decoder.deconv1.weight", "decoder.deconv1.bias"}, out: []string{"d1"},
			modules: []string{"decoder", "decoder.deconv1"}, classes: []string{"__main__.Decoder", "torch.nn.modules.conv.ConvTranspose2d"}, attrs: []any{"strides", []int64{2, 2}}},
		{op: "GlobalAveragePool", name: "/pool/GlobalAveragePool", in: []string{"d1"}, out: []string{"g"},
			modules: []string{"pool"}, classes: []string{"torch.nn.modules.pooling.AdaptiveAvgPool2d"}},
		{op: "Flatten", name: "/Flatten", in: []string{"g"}, out: []string{"f"}},
		{op: "Gemm", name: "/fc/Gemm", in: []string{"f", "fc.weight", "fc.bias"}, out: []string{"h"},
			modules: []string{"fc"}, classes: []string{"torch.nn.modules.linear.Linear"}, attrs: []any{"transB", int64(1)}},
		{op: "MatMul", name: "linear_23", in: []string{"h", "proj.weight"}, out: []string{"p"},
			modules: []string{"proj"}, classes: []string{"torch.nn.modules.linear.Linear"}},
		{op: "Gather", name: "/embed/Gather", in: []string{"embed.weight", "ids"}, out: []string{"e"},
			modules: []string{"embed"}, classes: []string{"torch.nn.modules.sparse.Embedding"}},
		{op: "Mul", name: "/model/selfattention/layer.0/Mul", in: []string{"p", "e"}, out: []string{"q"},
			modules: sa, classes: saT},
		{op: "Softmax", name: "/model/selfattention/layer.0/Softmax", in: []string{"q"}, out: []string{"s"},
			modules: sa, classes: saT, attrs: []any{"axis", int64(-1)}},
		{op: "Add", name: "/model/selfattention/Add", in: []string{"s", "p"}, out: []string{"a"},
			modules: sa[:2], classes: saT[:2]},
		{op: "Concat", name: "/Concat", in: []string{"a", "p"}, out: []string{"y"}, attrs: []any{"axis", int64(1)}},
	}
}

// guideTargets are the aten targets dynamo records for the guide steps.
var guideTargets = map[string]string{
	"Conv": "aten.conv2d.default", "Relu": "aten.relu.default", "ConvTranspose": "aten.conv_transpose2d.input",
	"GlobalAveragePool": "aten.adaptive_avg_pool2d.default", "Flatten": "aten.flatten.using_ints", "Gemm": "aten.linear.default",
	"MatMul": "aten.linear.default", "Gather": "aten.embedding.default", "Mul": "aten.mul.Tensor", "Softmax": "aten._softmax.default",
	"Add": "aten.add.Tensor", "Concat": "aten.cat.default",
}

// guideModel builds the guide test model, with TorchScript scoped names or
// (dynamo) FX-style names plus name_scopes/class_hierarchy metadata.
func guideModel(t testing.TB, dynamo bool) *onnxgraph.Model {
	t.Helper()
	b := testmodels.New("guide", 17)
	b.Input("x", tensor.Float, 1, 4, 8, 8).Input("ids", tensor.Int64, 1).Output("y", tensor.Float, 1, 32)
	b.RandomInit("conv1.weight", 0.3, 8, 4, 3, 3).RandomInit("conv1.bias", 0.1, 8)
	b.RandomInit("decoder.deconv1.weight", 0.3, 8, 4, 2, 2).RandomInit("decoder.deconv1.bias", 0.1, 4)
	b.RandomInit("fc.weight", 0.3, 16, 4).RandomInit("fc.bias", 0.1, 16)
	b.RandomInit("proj.weight", 0.3, 16, 16)
	b.RandomInit("embed.weight", 0.3, 10, 16)
	fxCount := map[string]int{}
	for i, s := range guideSteps() {
		name := s.name
		if dynamo && name != "linear_23" {
			name = fmt.Sprintf("node_%s_%d", s.op, i)
		}
		var attrs []*onnxpb.AttributeProto
		for j := 0; j+1 < len(s.attrs); j += 2 {
			switch v := s.attrs[j+1].(type) {
			case int64:
				attrs = append(attrs, testmodels.AttrInt(s.attrs[j].(string), v))
			case []int64:
				attrs = append(attrs, testmodels.AttrInts(s.attrs[j].(string), v...))
			}
		}
		n := b.Node(s.op, name, s.in, s.out, attrs...)
		if dynamo {
			target := guideTargets[s.op]
			fx := strings.Split(target, ".")[1]
			if k := fxCount[fx]; k > 0 {
				fx = fmt.Sprintf("%s_%d", fx, k)
			}
			fxCount[strings.Split(target, ".")[1]]++
			names := append(append([]string{""}, s.modules...), fx)
			classes := append(append([]string{"__main__.Net"}, s.classes...), target)
			testmodels.Meta(n, onnxgraph.MetaNameScopes, pyList(names), onnxgraph.MetaClassHierarchy, pyList(classes))
		}
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func pyList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// dump prints a resolution for golden files: every node, every tensor slot
// with its spec (or why not) and the rule that decided, then the warnings.
func dump(res *Resolution) string {
	var b strings.Builder
	for _, nr := range res.Nodes {
		n := nr.Node
		fmt.Fprintf(&b, "%s (%s) module=%q scope=%q\n  call   %s %s (graph %q, eager %q)\n  config %s\n  op     %s\n", n.Name, n.OpType, n.Module, nr.Scope,
			nr.Call.Type, strings.Join(nr.Names, " | "), nr.Call.GraphName, nr.Call.EagerName, nr.ModuleRule, nr.OpRule)
		for _, t := range nr.Tensors {
			what := "-"
			if t.Spec != nil {
				what = t.Spec.String()
			} else {
				what = "not quantized: " + t.Reason
			}
			fmt.Fprintf(&b, "  %-9s %-24s %s\n            <- %s\n", t.Label(), t.Value, what, t.Rule)
		}
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w.Error())
	}
	return b.String()
}

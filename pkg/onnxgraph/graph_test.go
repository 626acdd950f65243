package onnxgraph

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func mustModel(t *testing.T, b *testmodels.Builder) *Model {
	t.Helper()
	m, err := LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func nodeNames(nodes []*Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func TestGraphView(t *testing.T) {
	m := mustModel(t, testmodels.CNN())
	g := m.Graph
	if got := len(g.Nodes); got != 10 {
		t.Fatalf("nodes = %d, want 10", got)
	}
	if len(g.Inputs) != 1 || g.Inputs[0].Name != "input" {
		t.Errorf("inputs = %v, want [input] (initializers are not inputs)", g.Inputs)
	}
	if len(g.Initializers) != 9 {
		t.Errorf("initializers = %d, want 9", len(g.Initializers))
	}
	relu := g.Value("/relu/Relu_output_0")
	if relu.Producer.Name != "/relu/Relu" {
		t.Errorf("producer = %s", relu.Producer.Name)
	}
	if got := strings.Join(nodeNames(relu.Consumers), ","); got != "/layer1/layer1.0/conv1/Conv,/layer1/layer1.0/Add" {
		t.Errorf("consumers = %s", got)
	}
	w := g.Value("conv1.weight")
	if !w.IsConst() || !w.IsInitializer || w.DType() != tensor.Float {
		t.Errorf("conv1.weight: const=%v init=%v dtype=%s", w.IsConst(), w.IsInitializer, w.DType())
	}
	dims, ok := w.Shape()
	if !ok || len(dims) != 4 || dims[0].Size != 4 {
		t.Errorf("conv1.weight shape = %v %v", dims, ok)
	}
	in, _ := g.Inputs[0].Shape()
	if in[0].Param != "N" || in[0].String() != "N" || in[1].Size != 1 {
		t.Errorf("input shape = %v", in)
	}
	if n := g.Node("/fc/Gemm"); n == nil || n.Attr("transB").GetI() != 1 || n.Opset() != 17 {
		t.Errorf("Gemm lookup, attribute or opset wrong: %v", n)
	}
}

func TestTopologicalOrderAndStableNames(t *testing.T) {
	m := mustModel(t, testmodels.Unnamed())
	got := strings.Join(nodeNames(m.Graph.Nodes), ",")
	if got != "Neg_1,Abs_2,Relu_0" {
		t.Errorf("order = %s, want Neg_1,Abs_2,Relu_0", got)
	}
	if m.Graph.Node("Relu_0") == nil {
		t.Error("generated name is not looked up")
	}
}

func TestCycleIsAnError(t *testing.T) {
	b := testmodels.New("cycle", 13)
	b.Input("x", tensor.Float, 1).Output("y", tensor.Float, 1)
	b.Node("Add", "a", []string{"x", "c"}, []string{"b"})
	b.Node("Relu", "r", []string{"b"}, []string{"c"})
	b.Node("Identity", "out", []string{"c"}, []string{"y"})
	_, err := LoadBytes(b.Bytes(), "")
	var cyc *CycleError
	if !errors.As(err, &cyc) {
		t.Fatalf("err = %v, want a CycleError", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"a"`) || !strings.Contains(msg, `"r"`) || !strings.Contains(msg, `"out"`) {
		t.Errorf("message does not name the nodes: %s", msg)
	}
}

func TestBadGraphs(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *testmodels.Builder)
		want  string
	}{
		{"undefined input", func(b *testmodels.Builder) {
			b.Node("Relu", "r", []string{"nowhere"}, []string{"y"})
		}, `node "r" (Relu): input "nowhere" is not a graph input`},
		{"two producers", func(b *testmodels.Builder) {
			b.Node("Relu", "r1", []string{"x"}, []string{"y"})
			b.Node("Relu", "r2", []string{"x"}, []string{"y"})
		}, `value "y" is produced by both node "r1" (Relu) and node "r2" (Relu)`},
		{"constant without value", func(b *testmodels.Builder) {
			b.Node("Constant", "k", nil, []string{"y"})
		}, `node "k" (Constant): the Constant node has no value attribute`},
		{"duplicate initializers", func(b *testmodels.Builder) {
			b.Init("w", []int64{1}, []float32{1}).Init("w", []int64{1}, []float32{2})
			b.Node("Add", "a", []string{"x", "w"}, []string{"y"})
		}, `graph "bad" has two initializers named "w"`},
		{"no nodes, output never produced", func(b *testmodels.Builder) {},
			`graph "bad" declares the output "y", which no node produces`},
		{"node output named like an initializer", func(b *testmodels.Builder) {
			b.Init("w", []int64{1}, []float32{1})
			b.Node("Relu", "r", []string{"x"}, []string{"w"})
			b.Node("Add", "a", []string{"x", "w"}, []string{"y"})
		}, `node "r" (Relu) writes "w", which is also an initializer`},
		{"node output named like a graph input", func(b *testmodels.Builder) {
			b.Node("Relu", "r", []string{"x"}, []string{"x"})
			b.Node("Identity", "i", []string{"x"}, []string{"y"})
		}, `node "r" (Relu) writes "x", which is also a graph input`},
		{"raw_data too short", func(b *testmodels.Builder) {
			b.Init("w", []int64{2}, []float32{1, 2})
			b.Model.Graph.Initializer[0].RawData = b.Model.Graph.Initializer[0].RawData[:4]
			b.Node("Add", "a", []string{"x", "w"}, []string{"y"})
		}, `tensor "w": float32 tensor of shape [2] needs 8 bytes in raw_data, has 4`},
		{"10^12 dims", func(b *testmodels.Builder) {
			b.Init("w", []int64{1}, []float32{1})
			b.Model.Graph.Initializer[0].Dims = []int64{1000000, 1000000}
			b.Node("Add", "a", []string{"x", "w"}, []string{"y"})
		}, `tensor "w": float32 tensor of shape [1000000 1000000] needs 4000000000000 bytes in raw_data, has 4`},
		{"negative dims", func(b *testmodels.Builder) {
			b.Init("w", []int64{1}, []float32{1})
			b.Model.Graph.Initializer[0].Dims = []int64{-4}
			b.Node("Add", "a", []string{"x", "w"}, []string{"y"})
		}, `tensor "w": negative dimension -4`},
		{"Softmax axis as a string", func(b *testmodels.Builder) {
			b.Node("Softmax", "sm", []string{"x"}, []string{"y"}, &onnxpb.AttributeProto{Name: proto.String("axis"),
				Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("1")})
		}, `node "sm" (Softmax): attribute "axis" must be INT, the model gives STRING`},
		{"Softmax axis as floats", func(b *testmodels.Builder) {
			b.Node("Softmax", "sm", []string{"x"}, []string{"y"}, &onnxpb.AttributeProto{Name: proto.String("axis"),
				Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: []float32{1}})
		}, `node "sm" (Softmax): attribute "axis" must be INT, the model gives FLOATS`},
		{"Gemm transB as a float, type unset", func(b *testmodels.Builder) {
			b.Init("w", []int64{1, 1}, []float32{2})
			b.Node("Gemm", "g", []string{"x", "w"}, []string{"y"}, &onnxpb.AttributeProto{Name: proto.String("transB"), F: proto.Float32(1)})
		}, `node "g" (Gemm): attribute "transB" must be INT, the model gives FLOAT`},
		{"overflowing dims", func(b *testmodels.Builder) {
			b.Init("w", []int64{1}, []float32{1})
			b.Model.Graph.Initializer[0].Dims = []int64{1 << 40, 1 << 40}
			b.Node("Add", "a", []string{"x", "w"}, []string{"y"})
		}, `tensor "w": shape [1099511627776 1099511627776] has more than 2^48 elements`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testmodels.New("bad", 13)
			b.Input("x", tensor.Float, 1).Output("y", tensor.Float, 1)
			tt.build(b)
			_, err := LoadBytes(b.Bytes(), "")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestConstantNodes(t *testing.T) {
	b := testmodels.New("const", 13)
	b.Output("y", tensor.Float, 2)
	b.Node("Constant", "k", nil, []string{"k_out"}, testmodels.AttrTensor("value", testmodels.Float32Tensor("", []int64{2}, []float32{1, 2})))
	b.Node("Constant", "s", nil, []string{"s_out"}, testmodels.AttrFloat("value_float", 3))
	b.Node("Mul", "m", []string{"k_out", "s_out"}, []string{"y"})
	m := mustModel(t, b)
	k := m.Graph.Value("k_out")
	if !k.IsConst() || k.IsInitializer || k.Const.GetName() != "k_out" || len(k.Const.GetDims()) != 1 {
		t.Errorf("Constant value tensor: %v", k.Const)
	}
	s := m.Graph.Value("s_out")
	if s.DType() != tensor.Float || len(s.Const.GetDims()) != 0 || s.Const.GetFloatData()[0] != 3 {
		t.Errorf("value_float constant: %v", s.Const)
	}
}

func TestSubgraphOuterScope(t *testing.T) {
	m := mustModel(t, testmodels.Subgraph())
	ifNode := m.Graph.Node("if")
	if len(ifNode.Subgraphs) != 2 {
		t.Fatalf("subgraphs = %v", ifNode.Subgraphs)
	}
	if len(ifNode.OuterInputs) != 1 || ifNode.OuterInputs[0].Name != "ax" {
		t.Errorf("If outer inputs = %v, want [ax]", ifNode.OuterInputs)
	}
	then := ifNode.Subgraphs["then_branch"]
	op := then.Node("if/then_branch/then_op")
	if op.Inputs[0] != m.Graph.Value("ax") {
		t.Error("subgraph input does not resolve to the outer value")
	}
	if then.Owner != ifNode || then.Attr != "then_branch" || op.Proto.GetName() != "then_op" {
		t.Errorf("then_branch owner = %v, attr %q, node proto name %q", then.Owner, then.Attr, op.Proto.GetName())
	}
	if got := strings.Join(nodeNames(m.Graph.Nodes), ","); got != "abs,if" {
		t.Errorf("order = %s", got)
	}
	// Subgraph nodes come before their owner, after the values they read.
	if got := strings.Join(nodeNames(m.Graph.AllNodes()), ","); got != "abs,if/else_branch/else_op,if/then_branch/then_op,if" {
		t.Errorf("all nodes = %s", got)
	}
	if got := len(m.Graph.Graphs()); got != 3 {
		t.Errorf("graphs = %d, want 3", got)
	}
}

func TestModuleScopes(t *testing.T) {
	tests := []struct {
		model *testmodels.Builder
		node  string
		mod   string
		typ   string
	}{
		{testmodels.CNN(), "/conv1/Conv", "conv1", ""},
		{testmodels.CNN(), "/layer1/layer1.0/conv2/Conv", "layer1.0.conv2", ""},
		{testmodels.CNN(), "/layer1/layer1.0/Add", "layer1.0", ""},
		{testmodels.CNN(), "/layer1/layer1.0/relu_1/Relu", "layer1.0.relu", ""},
		{testmodels.CNN(), "/Reshape", "", ""},
		{testmodels.DynamoMLP(), "node_MatMul_3", "fc2", "torch.nn.modules.linear.Linear"},
		{testmodels.DynamoMLP(), "node_relu", "act", "torch.nn.modules.activation.ReLU"},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			m := mustModel(t, tt.model)
			n := m.Graph.Node(tt.node)
			if n.Module != tt.mod || n.ModuleType != tt.typ {
				t.Errorf("module = %q (%q), want %q (%q)", n.Module, n.ModuleType, tt.mod, tt.typ)
			}
		})
	}
}

// TestSubgraphModules: an unscoped node inside a subgraph runs in the
// module of the node that owns the subgraph; a scoped one keeps its scope.
func TestSubgraphModules(t *testing.T) {
	b := testmodels.QuantLoop()
	loop := b.Model.Graph.Node[len(b.Model.Graph.Node)-1]
	loop.Name = proto.String("/blk/Loop")
	body := loop.Attribute[0].G
	body.Node[len(body.Node)-2].Name = proto.String("/blk/inner/Relu")
	m := mustModel(t, b)
	sg := m.Graph.Node("/blk/Loop").Subgraphs["body"]
	for name, want := range map[string]string{"/blk/Loop/body/mm": "blk", "/blk/Loop/body//blk/inner/Relu": "blk.inner"} {
		if n := sg.Node(name); n == nil || n.Module != want {
			t.Errorf("%s: module %v, want %q", name, n, want)
		}
	}
}

func TestTorchScriptModule(t *testing.T) {
	tests := map[string]string{
		"/layer1/layer1.0/conv1/Conv":             "layer1.0.conv1",
		"/blocks/blocks.1/mlp/mlp.1/Mul":          "blocks.1.mlp.1",
		"/model/layers.0/self_attn/q_proj/MatMul": "model.layers.0.self_attn.q_proj",
		"/encoder/layers.1/Mul":                   "encoder.layers.1",
		"/Conv":                                   "",
		"Conv_3":                                  "",
		"":                                        "",
	}
	for name, want := range tests {
		if got := torchScriptModule(name); got != want {
			t.Errorf("torchScriptModule(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestParsePyStringList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"['', 'layer1', 'layer1.0']", []string{"", "layer1", "layer1.0"}},
		{`["a", 'b\'c']`, []string{"a", "b'c"}},
		{"[]", nil},
		{"['unterminated]", nil},
		{"not a list", nil},
		{"['a' 'b']", nil},
	}
	for _, tt := range tests {
		got := ParsePyStringList(tt.in)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("ParsePyStringList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestModuleTreeOrder(t *testing.T) {
	b := testmodels.New("tree", 13)
	b.Input("x", tensor.Float, 1).Output("y", tensor.Float, 1)
	prev := "x"
	for i, name := range []string{"/layers.10/Relu", "/layers.9/Relu", "/layers.2/Relu"} {
		out := []string{"y0", "y1", "y"}[i]
		b.Node("Relu", name, []string{prev}, []string{out})
		prev = out
	}
	m := mustModel(t, b)
	root := m.Graph.Modules()
	var got []string
	for _, c := range root.Children[0].Children {
		got = append(got, c.Name)
	}
	if strings.Join(got, ",") != "layers.2,layers.9,layers.10" {
		t.Errorf("module order = %v", got)
	}
}

// TestUnknownFieldsAndMetadataSurvive: fields this schema does not know and
// every metadata_props entry are kept through Load and Save.
func TestUnknownFieldsAndMetadataSurvive(t *testing.T) {
	b := testmodels.DynamoMLP()
	b.Model.MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String("k"), Value: proto.String("v")}}
	b.Model.Graph.MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String("g"), Value: proto.String("1")}}
	raw := b.Bytes()
	// Field 999 of ModelProto is unknown to every ONNX version.
	raw = protowire.AppendTag(raw, 999, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte("future"))
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.onnx")
	if err := m.Save(out, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	back, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(m.Proto, back.Proto) {
		t.Error("round trip changed the model")
	}
	if u := back.Proto.ProtoReflect().GetUnknown(); !strings.Contains(string(u), "future") {
		t.Errorf("unknown field lost: %q", u)
	}
	if v, _ := back.Graph.Node("node_relu").Metadata(MetaNameScopes); v == "" {
		t.Error("node metadata lost")
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	good := testmodels.MLP().Bytes()
	cases := map[string][]byte{
		"truncated.onnx": good[:len(good)/2],
		"garbage.onnx":   []byte("\xff\xff\xff\xff not a model"),
		"empty.onnx":     nil,
	}
	for name, data := range cases {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		var fe *FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want a FileError naming the file", name, err)
		}
	}
}

// TestLoadRefusesSpecialFiles: devices, FIFOs and directories are refused
// before anything is read (reading /dev/zero would never end).
func TestLoadRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.onnx")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "is not a regular file (a character device)",
		fifo:        "is not a regular file (a named pipe)",
		t.TempDir(): "is not a regular file (a directory)",
	} {
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%s) = %v, want it to name the file and say %q", path, err, want)
		}
	}
}

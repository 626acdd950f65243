package testmodels

import (
	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"strings"
)

//go:generate go run ./gen ../../testdata/models

// Catalog lists the example models written to testdata/models, by file name.
var Catalog = map[string]func() *Builder{
	"mlp.onnx":      MLP,
	"cnn.onnx":      CNN,
	"dynamo.onnx":   DynamoMLP,
	"unnamed.onnx":  Unnamed,
	"subgraph.onnx": Subgraph,
}

// MLP is a TorchScript-style export of a two-layer perceptron:
// input[N,16] → fc1 (Gemm) → Relu → fc2 (Gemm) → output[N,4].
func MLP() *Builder {
	b := New("mlp", 17)
	b.Input("input", tensor.Float, "N", 16).Output("logits", tensor.Float, "N", 4)
	b.RandomInit("fc1.weight", 0.25, 32, 16).RandomInit("fc1.bias", 0.1, 32)
	b.RandomInit("fc2.weight", 0.18, 4, 32).RandomInit("fc2.bias", 0.1, 4)
	b.Node("Gemm", "/fc1/Gemm", []string{"input", "fc1.weight", "fc1.bias"}, []string{"/fc1/Gemm_output_0"},
		AttrFloat("alpha", 1), AttrFloat("beta", 1), AttrInt("transB", 1))
	b.Node("Relu", "/relu/Relu", []string{"/fc1/Gemm_output_0"}, []string{"/relu/Relu_output_0"})
	b.Node("Gemm", "/fc2/Gemm", []string{"/relu/Relu_output_0", "fc2.weight", "fc2.bias"}, []string{"logits"},
		AttrFloat("alpha", 1), AttrFloat("beta", 1), AttrInt("transB", 1))
	return b
}

// CNN is a TorchScript-style export of a small residual CNN on 1×8×8 images,
// with nested module scopes (layer1.0.conv1) and a module called twice (relu).
func CNN() *Builder {
	b := New("cnn", 17)
	b.Input("input", tensor.Float, "N", 1, 8, 8).Output("logits", tensor.Float, "N", 10)
	b.RandomInit("conv1.weight", 0.5, 4, 1, 3, 3).RandomInit("conv1.bias", 0.1, 4)
	b.RandomInit("layer1.0.conv1.weight", 0.3, 4, 4, 3, 3).RandomInit("layer1.0.conv1.bias", 0.1, 4)
	b.RandomInit("layer1.0.conv2.weight", 0.3, 4, 4, 3, 3).RandomInit("layer1.0.conv2.bias", 0.1, 4)
	b.RandomInit("fc.weight", 0.2, 10, 64).RandomInit("fc.bias", 0.1, 10)
	b.InitInt64("/Constant_output_0", []int64{2}, []int64{-1, 64})
	conv := func(name, in, w, out string) {
		b.Node("Conv", name, []string{in, w, w[:len(w)-len("weight")] + "bias"}, []string{out},
			AttrInts("kernel_shape", 3, 3), AttrInts("pads", 1, 1, 1, 1), AttrInts("strides", 1, 1))
	}
	conv("/conv1/Conv", "input", "conv1.weight", "/conv1/Conv_output_0")
	b.Node("Relu", "/relu/Relu", []string{"/conv1/Conv_output_0"}, []string{"/relu/Relu_output_0"})
	conv("/layer1/layer1.0/conv1/Conv", "/relu/Relu_output_0", "layer1.0.conv1.weight", "/layer1/layer1.0/conv1/Conv_output_0")
	b.Node("Relu", "/layer1/layer1.0/relu/Relu", []string{"/layer1/layer1.0/conv1/Conv_output_0"}, []string{"/layer1/layer1.0/relu/Relu_output_0"})
	conv("/layer1/layer1.0/conv2/Conv", "/layer1/layer1.0/relu/Relu_output_0", "layer1.0.conv2.weight", "/layer1/layer1.0/conv2/Conv_output_0")
	b.Node("Add", "/layer1/layer1.0/Add", []string{"/layer1/layer1.0/conv2/Conv_output_0", "/relu/Relu_output_0"}, []string{"/layer1/layer1.0/Add_output_0"})
	b.Node("Relu", "/layer1/layer1.0/relu_1/Relu", []string{"/layer1/layer1.0/Add_output_0"}, []string{"/layer1/layer1.0/relu_1/Relu_output_0"})
	b.Node("MaxPool", "/pool/MaxPool", []string{"/layer1/layer1.0/relu_1/Relu_output_0"}, []string{"/pool/MaxPool_output_0"},
		AttrInts("kernel_shape", 2, 2), AttrInts("strides", 2, 2))
	b.Node("Reshape", "/Reshape", []string{"/pool/MaxPool_output_0", "/Constant_output_0"}, []string{"/Reshape_output_0"})
	b.Node("Gemm", "/fc/Gemm", []string{"/Reshape_output_0", "fc.weight", "fc.bias"}, []string{"logits"},
		AttrFloat("alpha", 1), AttrFloat("beta", 1), AttrInt("transB", 1))
	return b
}

// DynamoMLP is the MLP as the dynamo exporter writes it: node names from FX,
// modules and their classes in metadata_props, and a Transpose+MatMul linear.
func DynamoMLP() *Builder {
	b := New("main_graph", 18)
	b.Model.ProducerName, b.Model.IrVersion = strPtr("pytorch"), int64Ptr(10)
	b.Input("x", tensor.Float, "batch", 16).Output("linear_1", tensor.Float, "batch", 4)
	b.RandomInit("fc1.weight", 0.25, 16, 32).RandomInit("fc1.bias", 0.1, 32)
	b.RandomInit("fc2.weight", 0.18, 32, 4).RandomInit("fc2.bias", 0.1, 4)
	type step struct {
		op, name, module, class, fx string
		in                          []string
		out                         string
	}
	steps := []step{
		{"MatMul", "node_MatMul_0", "fc1", "torch.nn.modules.linear.Linear", "linear", []string{"x", "fc1.weight"}, "val_0"},
		{"Add", "node_Add_1", "fc1", "torch.nn.modules.linear.Linear", "linear", []string{"val_0", "fc1.bias"}, "linear"},
		{"Relu", "node_relu", "act", "torch.nn.modules.activation.ReLU", "relu", []string{"linear"}, "relu"},
		{"MatMul", "node_MatMul_3", "fc2", "torch.nn.modules.linear.Linear", "linear_1", []string{"relu", "fc2.weight"}, "val_3"},
		{"Add", "node_Add_4", "fc2", "torch.nn.modules.linear.Linear", "linear_1", []string{"val_3", "fc2.bias"}, "linear_1"},
	}
	for _, s := range steps {
		n := b.Node(s.op, s.name, s.in, []string{s.out})
		Meta(n,
			"pkg.torch.onnx.name_scopes", "['', '"+s.module+"', '"+s.fx+"']",
			"pkg.torch.onnx.class_hierarchy", "['__main__.Net', '"+s.class+"', 'aten."+strings.TrimSuffix(s.fx, "_1")+".default']",
		)
	}
	return b
}

// Unnamed has nodes without names, listed out of topological order.
func Unnamed() *Builder {
	b := New("unnamed", 13)
	b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 2, 3)
	b.Node("Relu", "", []string{"t1"}, []string{"y"})
	b.Node("Neg", "", []string{"x"}, []string{"t0"})
	b.Node("Abs", "", []string{"t0"}, []string{"t1"})
	return b
}

// Subgraph has an If whose branches read a value of the main graph.
func Subgraph() *Builder {
	b := New("subgraph", 13)
	b.Input("x", tensor.Float, 3).Input("cond", tensor.Bool).Output("y", tensor.Float, 3)
	b.Node("Abs", "abs", []string{"x"}, []string{"ax"})
	branch := func(name, op string) *Builder {
		sb := New(name, 13)
		sb.Output(name+"_out", tensor.Float, 3)
		sb.Node(op, name+"_op", []string{"ax"}, []string{name + "_out"})
		return sb
	}
	b.Node("If", "if", []string{"cond"}, []string{"y"},
		AttrGraph("then_branch", branch("then", "Neg").Model.Graph),
		AttrGraph("else_branch", branch("else", "Relu").Model.Graph))
	return b
}

// Loop runs a body that reads a value of the main graph, carries an
// accumulator and uses its iteration number, for at most five
// iterations, and stops after the third through its condition output:
// y = the last accumulator, steps = the steps stacked.
func Loop() *Builder {
	b := New("loop", 13)
	b.Input("x", tensor.Float, "N", 4).Output("y", tensor.Float, "N", 4).Output("steps", tensor.Float, "T", "N", 4)
	b.InitInt64("trips", []int64{}, []int64{5})
	b.Node("Abs", "abs", []string{"x"}, []string{"ax"})
	b.Node("Constant", "yes", nil, []string{"go"}, AttrTensor("value", boolTensor(true)))
	body := New("body", 13)
	body.Input("i", tensor.Int64).Input("c", tensor.Bool).Input("acc", tensor.Float, "N", 4)
	body.Output("c_out", tensor.Bool).Output("acc_out", tensor.Float, "N", 4).Output("step", tensor.Float, "N", 4)
	body.InitInt64("last", []int64{}, []int64{2})
	body.Node("Cast", "f", []string{"i"}, []string{"fi"}, AttrInt("to", int64(tensor.Float)))
	body.Node("Mul", "scale", []string{"ax", "fi"}, []string{"scaled"})
	body.Node("Add", "add", []string{"acc", "scaled"}, []string{"sum"})
	body.Node("Sigmoid", "sig", []string{"sum"}, []string{"acc_out"})
	body.Node("Add", "add_x", []string{"acc_out", "ax"}, []string{"step"})
	body.Node("Less", "more", []string{"i", "last"}, []string{"c_out"})
	b.Node("Loop", "loop", []string{"trips", "go", "x"}, []string{"y", "steps"}, AttrGraph("body", body.Model.Graph))
	return b
}

// Scan runs a body over the rows of x, forward, and of z backwards,
// carrying a running sum; y = the last sum, rows = the sums stacked
// along axis 1.
func Scan() *Builder {
	b := New("scan", 13)
	b.Input("s0", tensor.Float, 3).Input("x", tensor.Float, 5, 3).Input("z", tensor.Float, 3, 5)
	b.Output("y", tensor.Float, 3).Output("rows", tensor.Float, 3, 5)
	b.RandomInit("w", 0.5, 3)
	body := New("body", 13)
	body.Input("s", tensor.Float, 3).Input("xr", tensor.Float, 3).Input("zr", tensor.Float, 3)
	body.Output("s_out", tensor.Float, 3).Output("r", tensor.Float, 3)
	body.Node("Mul", "mw", []string{"xr", "w"}, []string{"xw"})
	body.Node("Add", "a1", []string{"s", "xw"}, []string{"s1"})
	body.Node("Sub", "a2", []string{"s1", "zr"}, []string{"s_out"})
	body.Node("Tanh", "t", []string{"s_out"}, []string{"r"})
	b.Node("Scan", "scan", []string{"s0", "x", "z"}, []string{"y", "rows"}, AttrGraph("body", body.Model.Graph),
		AttrInt("num_scan_inputs", 2), AttrInts("scan_input_axes", 0, 1), AttrInts("scan_input_directions", 0, 1),
		AttrInts("scan_output_axes", 1))
	return b
}

func boolTensor(v bool) *onnxpb.TensorProto {
	x := int32(0)
	if v {
		x = 1
	}
	return &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.Bool)), Int32Data: []int32{x}}
}

func strPtr(s string) *string { return &s }
func int64Ptr(v int64) *int64 { return &v }

// ConvBias is Conv(x, W, B) with one input channel and two output
// channels, W = [0.5, -1] and the bias given: the smallest model with an
// int32 bias, for the tests of the bias rule.
func ConvBias(bias []float32) *Builder {
	b := New("bias", 13)
	b.Input("x", tensor.Float, 1, 1, 2, 2).Output("y", tensor.Float, 1, 2, 2, 2)
	b.Init("W", []int64{2, 1, 1, 1}, []float32{0.5, -1})
	b.Init("B", []int64{2}, bias)
	b.Node("Conv", "conv", []string{"x", "W", "B"}, []string{"y"})
	return b
}

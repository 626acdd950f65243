package testmodels

import "github.com/coreaiq/coreaiq/pkg/tensor"

// The control-flow models below hold quantizable ops (MatMul with
// weights, Add, Relu, Tanh) inside If, Loop and Scan subgraphs, with
// weights both in the subgraph's own initializers and captured from the
// main graph.

// QuantIf branches on the sign of x's mean: then = Relu(h·Wt + bt) with
// its weight and bias in the branch, else = h·We + h with We captured from
// the main graph, where h = x·W0.
func QuantIf() *Builder {
	b := New("quant_if", 13)
	b.Input("x", tensor.Float, 2, 8).Output("y", tensor.Float, 2, 8)
	b.RandomInit("W0", 0.5, 8, 8).RandomInit("We", 0.4, 8, 8)
	b.Init("zero", []int64{}, []float32{0})
	b.Node("MatMul", "mm0", []string{"x", "W0"}, []string{"h"})
	b.Node("ReduceMean", "mean", []string{"x"}, []string{"mx"}, AttrInt("keepdims", 0))
	b.Node("Greater", "positive", []string{"mx", "zero"}, []string{"cond"})
	then := New("then", 13)
	then.Output("t_out", tensor.Float, 2, 8)
	then.RandomInit("Wt", 0.3, 8, 8).RandomInit("bt", 0.1, 8)
	then.Node("MatMul", "mm", []string{"h", "Wt"}, []string{"t_mm"})
	then.Node("Add", "bias", []string{"t_mm", "bt"}, []string{"t_add"})
	then.Node("Relu", "relu", []string{"t_add"}, []string{"t_out"})
	els := New("else", 13)
	els.Output("e_out", tensor.Float, 2, 8)
	els.Node("MatMul", "mm", []string{"h", "We"}, []string{"e_mm"})
	els.Node("Add", "skip", []string{"e_mm", "h"}, []string{"e_out"})
	b.Node("If", "branch", []string{"cond"}, []string{"y"},
		AttrGraph("then_branch", then.Model.Graph), AttrGraph("else_branch", els.Model.Graph))
	return b
}

// QuantLoop runs three iterations of acc = Tanh(acc·Wb + x) from acc =
// Relu(x·W0), with Wb in the body and x captured from the main graph;
// steps stacks each iteration's Relu(acc·Wb).
func QuantLoop() *Builder {
	b := New("quant_loop", 13)
	b.Input("x", tensor.Float, 2, 8).Output("y", tensor.Float, 2, 8).Output("steps", tensor.Float, 3, 2, 8)
	b.RandomInit("W0", 0.5, 8, 8)
	b.InitInt64("trips", []int64{}, []int64{3})
	b.Node("Constant", "yes", nil, []string{"go"}, AttrTensor("value", boolTensor(true)))
	b.Node("MatMul", "mm0", []string{"x", "W0"}, []string{"h0"})
	b.Node("Relu", "relu0", []string{"h0"}, []string{"acc0"})
	body := New("body", 13)
	body.Input("i", tensor.Int64).Input("c", tensor.Bool).Input("acc", tensor.Float, 2, 8)
	body.Output("c_out", tensor.Bool).Output("acc_out", tensor.Float, 2, 8).Output("step", tensor.Float, 2, 8)
	body.RandomInit("Wb", 0.6, 8, 8)
	body.Node("MatMul", "mm", []string{"acc", "Wb"}, []string{"b_mm"})
	body.Node("Add", "add", []string{"b_mm", "x"}, []string{"b_add"})
	body.Node("Tanh", "tanh", []string{"b_add"}, []string{"acc_out"})
	body.Node("Relu", "relu", []string{"b_mm"}, []string{"step"})
	body.Node("Identity", "keep", []string{"c"}, []string{"c_out"})
	b.Node("Loop", "loop", []string{"trips", "go", "acc0"}, []string{"y", "steps"}, AttrGraph("body", body.Model.Graph))
	return b
}

// QuantScan runs s = Tanh(x_t·Wx + s·Ws) over the four rows of x from s =
// mean of the rows, with Wx in the body and Ws captured from the main
// graph; rows stacks Relu(x_t·Wx).
func QuantScan() *Builder {
	b := New("quant_scan", 13)
	b.Input("x", tensor.Float, 4, 8).Output("y", tensor.Float, 8).Output("rows", tensor.Float, 4, 8)
	b.RandomInit("Ws", 0.4, 8, 8)
	b.Node("ReduceMean", "mean", []string{"x"}, []string{"s0"}, AttrInts("axes", 0), AttrInt("keepdims", 0))
	body := New("body", 13)
	body.Input("s", tensor.Float, 8).Input("xt", tensor.Float, 8)
	body.Output("s_out", tensor.Float, 8).Output("r", tensor.Float, 8)
	body.RandomInit("Wx", 0.7, 8, 8)
	body.Node("MatMul", "mx", []string{"xt", "Wx"}, []string{"xw"})
	body.Node("MatMul", "ms", []string{"s", "Ws"}, []string{"sw"})
	body.Node("Add", "add", []string{"xw", "sw"}, []string{"pre"})
	body.Node("Tanh", "tanh", []string{"pre"}, []string{"s_out"})
	body.Node("Relu", "relu", []string{"xw"}, []string{"r"})
	b.Node("Scan", "scan", []string{"s0", "x"}, []string{"y", "rows"}, AttrGraph("body", body.Model.Graph),
		AttrInt("num_scan_inputs", 1))
	return b
}

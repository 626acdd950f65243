package testmodels

import (
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// The models of this file exercise the quantization rules: weights of
// every compute op, fixed-range outputs, shared qparams through data
// movement ops, several outputs and graph outputs behind shared ops.
func init() {
	Catalog["attention.onnx"] = Attention
	Catalog["convtranspose.onnx"] = ConvTransposeNet
}

// Attention is a single-head self-attention block followed by a Gemm head:
// MatMul weights (q, k, v), Transpose, Softmax, a constant Mul and bias Add,
// Concat, Reshape, Gemm with beta 0.5, Sigmoid × Tanh, and a Split whose
// outputs are the graph outputs.
func Attention() *Builder {
	b := New("attention", 18)
	b.Input("x", tensor.Float, 2, 8, 16)
	b.Output("y1", tensor.Float, 16, 4).Output("y2", tensor.Float, 16, 4)
	b.RandomInit("wq", 0.3, 16, 16).RandomInit("wk", 0.3, 16, 16).RandomInit("wv", 0.3, 16, 16)
	b.Init("temp", []int64{}, []float32{0.25})
	b.RandomInit("out.bias", 0.1, 16)
	b.RandomInit("head.weight", 0.2, 32, 8).RandomInit("head.bias", 0.1, 8)
	b.InitInt64("flat", []int64{2}, []int64{16, 32})
	b.Node("MatMul", "q_proj", []string{"x", "wq"}, []string{"q"})
	b.Node("MatMul", "k_proj", []string{"x", "wk"}, []string{"k"})
	b.Node("MatMul", "v_proj", []string{"x", "wv"}, []string{"v"})
	b.Node("Transpose", "k_t", []string{"k"}, []string{"kt"}, AttrInts("perm", 0, 2, 1))
	b.Node("MatMul", "scores", []string{"q", "kt"}, []string{"s"})
	b.Node("Mul", "scale", []string{"s", "temp"}, []string{"ss"})
	b.Node("Softmax", "softmax", []string{"ss"}, []string{"p"}, AttrInt("axis", -1))
	b.Node("MatMul", "context", []string{"p", "v"}, []string{"c"})
	b.Node("Add", "out_bias", []string{"c", "out.bias"}, []string{"o"})
	b.Node("Concat", "concat", []string{"o", "x"}, []string{"oc"}, AttrInt("axis", -1))
	b.Node("Reshape", "flatten", []string{"oc", "flat"}, []string{"f"})
	b.Node("Gemm", "head", []string{"f", "head.weight", "head.bias"}, []string{"g"},
		AttrFloat("alpha", 1), AttrFloat("beta", 0.5))
	b.Node("Sigmoid", "gate", []string{"g"}, []string{"sg"})
	b.Node("Tanh", "act", []string{"g"}, []string{"tg"})
	b.Node("Mul", "gated", []string{"sg", "tg"}, []string{"y"})
	b.Node("Split", "split", []string{"y"}, []string{"y1", "y2"}, AttrInt("axis", 1), AttrInt("num_outputs", 2))
	return b
}

// ConvTransposeNet is a grouped ConvTranspose with bias, then Relu,
// GlobalAveragePool and Flatten.
func ConvTransposeNet() *Builder {
	b := New("convtranspose", 17)
	b.Input("image", tensor.Float, 1, 4, 5, 5).Output("features", tensor.Float, 1, 6)
	b.RandomInit("up.weight", 0.4, 4, 3, 3, 3).RandomInit("up.bias", 0.2, 6)
	b.Node("ConvTranspose", "up", []string{"image", "up.weight", "up.bias"}, []string{"u"},
		AttrInt("group", 2), AttrInts("kernel_shape", 3, 3), AttrInts("strides", 2, 2))
	b.Node("Relu", "relu", []string{"u"}, []string{"r"})
	b.Node("GlobalAveragePool", "gap", []string{"r"}, []string{"pooled"})
	b.Node("Flatten", "flatten", []string{"pooled"}, []string{"features"})
	return b
}

package passes

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// patternBuilder writes nodes the way exporters do, each constant a
// scalar initializer of its own.
type patternBuilder struct {
	*testmodels.Builder
	consts int
}

func newPatternBuilder(name string) *patternBuilder {
	b := &patternBuilder{Builder: testmodels.New(name, 17)}
	b.Input("x", tensor.Float, 2, 4, 8)
	return b
}

// c adds a scalar constant and returns its name.
func (b *patternBuilder) c(v float32) string {
	b.consts++
	name := fmt.Sprintf("const%d", b.consts)
	b.Init(name, []int64{}, []float32{v})
	return name
}

// vec adds a constant vector of 8 values and returns its name.
func (b *patternBuilder) vec(v float32) string {
	b.consts++
	name := fmt.Sprintf("vec%d", b.consts)
	d := make([]float32, 8)
	for i := range d {
		d[i] = v + float32(i)/16
	}
	b.Init(name, []int64{8}, d)
	return name
}

func (b *patternBuilder) n(op, out string, in ...string) {
	b.Node(op, out+"_node", in, []string{out})
}

func (b *patternBuilder) model(t *testing.T, outputs ...string) *onnxgraph.Model {
	t.Helper()
	for _, o := range outputs {
		b.Output(o, tensor.Float, 2, 4, 8)
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// geluTanh writes the tanh approximation of GELU, x·½·(1 + tanh(√(2/π)·
// (g + 0.044715·g³))), whose gate reads g (x itself, or x rescaled by
// equalization) and whose product reads x.
func (b *patternBuilder) geluTanh(g, x, out string) {
	b.n("Pow", "c", g, b.c(3))
	b.n("Mul", "k", "c", b.c(0.044715))
	b.n("Add", "i", g, "k")
	b.n("Mul", "s", "i", b.c(0.7978846))
	b.n("Tanh", "th", "s")
	b.n("Add", "u", "th", b.c(1))
	b.n("Mul", "h", x, b.c(0.5))
	b.n("Mul", out, "h", "u")
}

// layerNorm writes torch's opset-13 LayerNorm over the last axis of in.
func (b *patternBuilder) layerNorm(in, out string) {
	b.normalize(in, out+"_norm")
	b.n("Mul", out+"_scaled", out+"_norm", b.vec(1))
	b.n("Add", out, out+"_scaled", b.vec(0))
}

// normalize writes a LayerNorm without scale and shift.
func (b *patternBuilder) normalize(in, out string) {
	b.Node("ReduceMean", out+"_mean_node", []string{in}, []string{out + "_mean"}, testmodels.AttrInts("axes", -1))
	b.n("Sub", out+"_d", in, out+"_mean")
	b.n("Pow", out+"_sq", out+"_d", b.c(2))
	b.Node("ReduceMean", out+"_var_node", []string{out + "_sq"}, []string{out + "_var"}, testmodels.AttrInts("axes", -1))
	b.n("Add", out+"_ve", out+"_var", b.c(1e-5))
	b.n("Sqrt", out+"_std", out+"_ve")
	b.n("Div", out, out+"_d", out+"_std")
}

// rmsNorm writes an RMSNorm over the last axis of in, its reciprocal
// square root spelled as inv says: "Div" (x / rms), "Reciprocal" (torch's
// dynamo exporter) or "one_over" (TorchScript's rsqrt, Div(1, rms)); the
// weight, when there is one, multiplies from the left as Llama's does.
func (b *patternBuilder) rmsNorm(in, out, inv string, weight bool) {
	norm := out
	if weight {
		norm = out + "_norm"
	}
	b.n("Pow", out+"_sq", in, b.c(2))
	b.Node("ReduceMean", out+"_ms_node", []string{out + "_sq"}, []string{out + "_ms"}, testmodels.AttrInts("axes", -1))
	b.n("Add", out+"_e", out+"_ms", b.c(1e-6))
	b.n("Sqrt", out+"_rms", out+"_e")
	switch inv {
	case "Div":
		b.n("Div", norm, in, out+"_rms")
	case "Reciprocal":
		b.n("Reciprocal", out+"_r", out+"_rms")
		b.n("Mul", norm, in, out+"_r")
	default:
		b.n("Div", out+"_r", b.c(1), out+"_rms")
		b.n("Mul", norm, in, out+"_r")
	}
	if weight {
		b.n("Mul", out, b.vec(1), norm)
	}
}

// gelu writes the erf GELU as torch exports it.
func (b *patternBuilder) gelu(in, out string) {
	b.n("Div", out+"_a", in, b.c(1.4142135))
	b.n("Erf", out+"_e", out+"_a")
	b.n("Add", out+"_u", out+"_e", b.c(1))
	b.n("Mul", out+"_g", in, out+"_u")
	b.n("Mul", out, out+"_g", b.c(0.5))
}

func TestFindPatterns(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *patternBuilder)
		// want lists "pattern:root" for each match.
		want []string
	}{
		{"layer_norm", func(b *patternBuilder) { b.layerNorm("x", "y") }, []string{"layer_norm:y_node"}},
		{"layer_norm square by Mul, constants swapped", func(b *patternBuilder) {
			b.Node("ReduceMean", "m", []string{"x"}, []string{"mean"}, testmodels.AttrInts("axes", -1))
			b.n("Sub", "d", "x", "mean")
			b.n("Mul", "sq", "d", "d")
			b.Node("ReduceMean", "v", []string{"sq"}, []string{"var"}, testmodels.AttrInts("axes", -1))
			b.n("Add", "ve", b.c(1e-5), "var")
			b.n("Sqrt", "std", "ve")
			b.n("Div", "norm", "d", "std")
			b.n("Mul", "scaled", b.vec(1), "norm")
			b.n("Add", "y", b.vec(0), "scaled")
		}, []string{"layer_norm_square_by_mul:y_node"}},
		{"layer_norm without affine", func(b *patternBuilder) {
			b.normalize("x", "ln")
		}, []string{"layer_norm_no_affine:ln_node"}},
		{"gelu", func(b *patternBuilder) { b.gelu("x", "y") }, []string{"gelu:y_node"}},
		{"rms_norm", func(b *patternBuilder) { b.rmsNorm("x", "y", "Div", true) }, []string{"rms_norm:y_node"}},
		{"rms_norm with Reciprocal", func(b *patternBuilder) { b.rmsNorm("x", "y", "Reciprocal", true) }, []string{"rms_norm_reciprocal:y_node"}},
		{"rms_norm with Div(1, ·), weight first", func(b *patternBuilder) { b.rmsNorm("x", "y", "one_over", true) }, []string{"rms_norm_one_over:y_node"}},
		{"rms_norm square by Mul", func(b *patternBuilder) {
			b.n("Mul", "sq", "x", "x")
			b.Node("ReduceMean", "v", []string{"sq"}, []string{"ms"}, testmodels.AttrInts("axes", -1))
			b.n("Add", "e", "ms", b.c(1e-6))
			b.n("Sqrt", "s", "e")
			b.n("Div", "n", "x", "s")
			b.n("Mul", "y", "n", b.vec(1))
		}, []string{"rms_norm_square_by_mul:y_node"}},
		{"rms_norm without weight", func(b *patternBuilder) { b.rmsNorm("x", "ln", "Div", false) }, []string{"rms_norm_no_affine:ln_node"}},
		{"rms_norm with Reciprocal, without weight", func(b *patternBuilder) { b.rmsNorm("x", "ln", "Reciprocal", false) }, []string{"rms_norm_reciprocal_no_affine:ln_node"}},
		{"rms_norm with Div(1, ·), without weight", func(b *patternBuilder) { b.rmsNorm("x", "ln", "one_over", false) }, []string{"rms_norm_one_over_no_affine:ln_node"}},
		{"rms_norm with Div(2, ·) is not an rms_norm", func(b *patternBuilder) {
			b.n("Pow", "sq", "x", b.c(2))
			b.Node("ReduceMean", "v", []string{"sq"}, []string{"ms"}, testmodels.AttrInts("axes", -1))
			b.n("Add", "e", "ms", b.c(1e-6))
			b.n("Sqrt", "s", "e")
			b.n("Div", "r", b.c(2), "s")
			b.n("Mul", "y", "x", "r")
		}, nil},
		{"gelu by Mul, half first", func(b *patternBuilder) {
			b.n("Mul", "a", "x", b.c(0.70710678))
			b.n("Erf", "e", "a")
			b.n("Add", "u", b.c(1), "e")
			b.n("Mul", "h", "x", b.c(0.5))
			b.n("Mul", "y", "u", "h")
		}, []string{"gelu_by_mul_half_first:y_node"}},
		{"gelu with a wrong constant is not a gelu", func(b *patternBuilder) {
			b.n("Div", "a", "x", b.c(2))
			b.n("Erf", "e", "a")
			b.n("Add", "u", "e", b.c(1))
			b.n("Mul", "g", "x", "u")
			b.n("Mul", "y", "g", b.c(0.5))
		}, nil},
		{"gelu whose erf is also read outside is not a pattern", func(b *patternBuilder) {
			b.gelu("x", "y")
			b.n("Relu", "z", "y_e")
		}, nil},
		{"gelu_tanh", func(b *patternBuilder) {
			b.geluTanh("x", "x", "y")
		}, []string{"gelu_tanh:y_node"}},
		{"silu", func(b *patternBuilder) {
			b.n("Sigmoid", "s", "x")
			b.n("Mul", "y", "s", "x")
		}, []string{"silu:y_node"}},
		{"silu whose gate reads x rescaled (equalization; Swish-β)", func(b *patternBuilder) {
			b.n("Mul", "xs", "x", b.vec(1))
			b.n("Sigmoid", "s", "xs")
			b.n("Mul", "y", "s", "x")
		}, []string{"silu_rescaled:y_node"}},
		{"hard_swish whose gate reads x rescaled", func(b *patternBuilder) {
			b.n("Mul", "xs", b.vec(1), "x")
			b.n("Add", "a", "xs", b.c(3))
			b.n("Clip", "c", "a", b.c(0), b.c(6))
			b.n("Div", "d", "c", b.c(6))
			b.n("Mul", "y", "x", "d")
		}, []string{"hard_swish_rescaled:y_node"}},
		{"gelu_tanh whose two gate reads go through the rescale", func(b *patternBuilder) {
			b.n("Mul", "xs", "x", b.vec(1))
			b.geluTanh("xs", "x", "y")
		}, []string{"gelu_tanh_rescaled:y_node"}},
		{"a rescale another node reads too is no pattern", func(b *patternBuilder) {
			b.n("Mul", "xs", "x", b.vec(1))
			b.n("Sigmoid", "s", "xs")
			b.n("Mul", "y", "s", "x")
			b.n("Relu", "z", "xs")
		}, nil},
		{"sigmoid times another value is not silu", func(b *patternBuilder) {
			b.n("Relu", "r", "x")
			b.n("Sigmoid", "s", "x")
			b.n("Mul", "y", "s", "r")
		}, nil},
		{"hard_swish", func(b *patternBuilder) {
			b.n("Add", "a", "x", b.c(3))
			b.Node("Clip", "clip", []string{"a", b.c(0), b.c(6)}, []string{"c"})
			b.n("Div", "d", "c", b.c(6))
			b.n("Mul", "y", "x", "d")
		}, []string{"hard_swish:y_node"}},
		{"hard_sigmoid", func(b *patternBuilder) {
			b.n("Add", "a", "x", b.c(3))
			b.Node("Clip", "clip", []string{"a", b.c(0), b.c(6)}, []string{"c"})
			b.n("Div", "y", "c", b.c(6))
		}, []string{"hard_sigmoid:y_node"}},
		{"HardSigmoid op times x", func(b *patternBuilder) {
			b.n("HardSigmoid", "h", "x")
			b.n("Mul", "y", "x", "h")
		}, []string{"hard_swish_op:y_node"}},
		{"attention scores", func(b *patternBuilder) {
			b.Input("k", tensor.Float, 2, 8, 4)
			b.Input("mask", tensor.Float, 2, 4, 4)
			b.n("MatMul", "s", "x", "k")
			b.n("Mul", "t", "s", b.c(0.35))
			b.n("Add", "a", "t", "mask")
			b.Node("Softmax", "y_node", []string{"a"}, []string{"y"}, testmodels.AttrInt("axis", -1))
		}, []string{"attention_scores:y_node"}},
		{"scaled dot-product attention as torch exports it", func(b *patternBuilder) {
			b.Input("k", tensor.Float, 2, 8, 4)
			b.n("Mul", "qs", "x", b.c(0.59))
			b.n("Mul", "ks", b.c(0.59), "k")
			b.n("MatMul", "s", "qs", "ks")
			b.Node("Softmax", "y_node", []string{"s"}, []string{"y"}, testmodels.AttrInt("axis", -1))
		}, []string{"attention_scores_sdpa:y_node"}},
		{"scaled dot-product attention with a mask", func(b *patternBuilder) {
			b.Input("k", tensor.Float, 2, 8, 4)
			b.Input("mask", tensor.Float, 2, 4, 4)
			b.n("Mul", "qs", "x", b.c(0.59))
			b.n("Mul", "ks", "k", b.c(0.59))
			b.n("MatMul", "s", "qs", "ks")
			b.n("Add", "a", "s", "mask")
			b.Node("Softmax", "y_node", []string{"a"}, []string{"y"}, testmodels.AttrInt("axis", -1))
		}, []string{"attention_scores_sdpa_masked:y_node"}},
		{"q alone scaled (bmm written as ops) is not the op", func(b *patternBuilder) {
			b.Input("k", tensor.Float, 2, 8, 4)
			b.n("Mul", "qs", "x", b.c(0.35))
			b.n("MatMul", "s", "qs", "k")
			b.Node("Softmax", "y_node", []string{"s"}, []string{"y"}, testmodels.AttrInt("axis", -1))
		}, nil},
		{"a weight scaled is no key", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 8, 4)
			b.n("Mul", "qs", "x", b.c(0.59))
			b.n("Mul", "ks", "w", b.c(0.59))
			b.n("MatMul", "s", "qs", "ks")
			b.Node("Softmax", "y_node", []string{"s"}, []string{"y"}, testmodels.AttrInt("axis", -1))
		}, nil},
		{"conv and residual add", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 4, 4, 1)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
			b.n("Add", "y", "x", "c")
		}, []string{"conv_add:y_node"}},
		{"conv whose output is read twice", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 4, 4, 1)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
			b.n("Add", "y", "x", "c")
			b.n("Relu", "z", "c")
		}, nil},
		{"linear", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 8, 8)
			b.n("MatMul", "m", "x", "w")
			b.n("Add", "y", b.vec(0), "m")
		}, []string{"linear:y_node"}},
		{"MatMul of two activations plus a constant is not linear", func(b *patternBuilder) {
			b.Input("w", tensor.Float, 8, 8)
			b.n("MatMul", "m", "x", "w")
			b.n("Add", "y", "m", b.vec(0))
		}, nil},
		{"two patterns in a row, the larger first", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 8, 8)
			b.n("MatMul", "m", "x", "w")
			b.n("Add", "h", "m", b.vec(0))
			b.gelu("h", "g")
			b.layerNorm("g", "y")
		}, []string{"linear:h_node", "gelu:g_node", "layer_norm:y_node"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newPatternBuilder("patterns")
			tc.build(b)
			var outs []string
			for _, o := range []string{"y", "z", "ln"} {
				if hasOutput(b, o) {
					outs = append(outs, o)
				}
			}
			m := b.model(t, outs...)
			var got []string
			for _, pm := range FindPatterns(m, PatternsAll) {
				got = append(got, pm.Pattern+":"+pm.Root().Name)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("matches %q, want %q", got, tc.want)
			}
		})
	}
}

// hasOutput reports whether a node of b writes name.
func hasOutput(b *patternBuilder, name string) bool {
	for _, n := range b.Model.Graph.Node {
		for _, o := range n.Output {
			if o == name {
				return true
			}
		}
	}
	return false
}

// chainModel runs x through a linear layer, a GELU, a LayerNorm, a SiLU
// and an attention score block: one of each pattern family.
func chainModel(t *testing.T) *onnxgraph.Model {
	b := newPatternBuilder("pattern_chain")
	b.RandomInit("w", 0.5, 8, 8)
	b.n("MatMul", "m", "x", "w")
	b.n("Add", "h", "m", b.vec(0))
	b.gelu("h", "g")
	b.layerNorm("g", "ln")
	b.n("Sigmoid", "sig", "ln")
	b.n("Mul", "act", "ln", "sig")
	b.RandomInit("wk", 0.5, 8, 8)
	b.n("MatMul", "k", "act", "wk")
	b.Node("Transpose", "kt_node", []string{"k"}, []string{"kt"}, testmodels.AttrInts("perm", 0, 2, 1))
	b.n("MatMul", "s", "act", "kt")
	b.n("Mul", "sc", "s", b.c(0.35))
	b.Node("Softmax", "y_node", []string{"sc"}, []string{"y"}, testmodels.AttrInt("axis", -1))
	b.Output("y", tensor.Float, 2, 4, 4)
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPatternBoundaries pins the plan and the written model of the
// pattern chain, and checks that no value inside a pattern is quantized
// while every boundary value is.
func TestPatternBoundaries(t *testing.T) {
	m := chainModel(t)
	u := quantize(t, m, "w8a8", PrepareOptions{}, true)
	var b bytes.Buffer
	for _, pm := range FindPatterns(u.Model, PatternsOps) {
		fmt.Fprintf(&b, "pattern %s root %q inside %q\n", pm.Pattern, pm.Root().Name, pm.Inside)
	}
	if err := u.Plan.Dump(&b); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "--- model\n")
	if err := finalize.DumpModel(&b, u.Result.Model); err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "patterns", "chain.w8a8.txt"), b.Bytes())

	checkBoundaries(t, u)
	for _, v := range []string{"x", "h", "g", "ln", "act", "y"} {
		if u.Plan.Tensor(v) == nil {
			t.Errorf("boundary value %q is not quantized", v)
		}
	}

	// Without patterns, the inside values are quantized again.
	off := quantize(t, chainModel(t), "w8a8", PrepareOptions{Patterns: PatternsNone}, true)
	for _, v := range []string{"m", "g_a", "ln_norm_d", "sig", "s"} {
		if off.Plan.Tensor(v) == nil {
			t.Errorf("PatternsNone: %q is not quantized", v)
		}
	}
}

// checkBoundaries fails when a QuantizeLinear of the written model reads a
// value inside a pattern of the model that was quantized.
func checkBoundaries(t *testing.T, u *Unit) {
	t.Helper()
	inside := map[string]string{}
	for _, pm := range FindPatterns(u.Model, PatternsOps) {
		for _, v := range pm.Inside {
			inside[v] = pm.Pattern
		}
	}
	if len(inside) == 0 {
		t.Fatal("no pattern found")
	}
	for _, n := range u.Result.Model.Graph.Nodes {
		if n.OpType != "QuantizeLinear" {
			continue
		}
		if p, ok := inside[n.Inputs[0].Name]; ok {
			t.Errorf("%s quantizes %q, inside pattern %s", n.Name, n.Inputs[0].Name, p)
		}
	}
	for _, tp := range u.Plan.Tensors {
		if p, ok := inside[tp.Value]; ok {
			t.Errorf("plan quantizes %q, inside pattern %s", tp.Value, p)
		}
	}
}

// TestPatternsOpset13Encoder finds every decomposed LayerNorm and GELU of
// the shared opset-13 BERT encoder and checks the written model has no
// Q/DQ inside them; the golden lists the matches.
func TestPatternsOpset13Encoder(t *testing.T) {
	dir := testutil.SharedModels(t)
	m, err := onnxgraph.Load(filepath.Join(dir, "bert_encoder-op13", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	u := quantize(t, m, "w8a8", PrepareOptions{}, true)
	var b bytes.Buffer
	count := map[string]int{}
	for _, pm := range FindPatterns(u.Model, PatternsOps) {
		count[pm.Pattern]++
		fmt.Fprintf(&b, "%s %q\n", pm.Pattern, pm.Root().Name)
	}
	testutil.Golden(t, filepath.Join("testdata", "patterns", "bert_encoder-op13.txt"), b.Bytes())
	// 4 layers: two LayerNorms and one GELU each, plus the embedding's
	// LayerNorm.
	if count["layer_norm"] != 9 || count["gelu"] != 4 {
		t.Errorf("found %d layer_norm and %d gelu patterns, want 9 and 4", count["layer_norm"], count["gelu"])
	}
	checkBoundaries(t, u)
}

// TestPatternsKeepFloatFunction checks on the chain model that
// quantizing at the boundaries only is closer to the float model than
// quantizing the insides too (same calibration).
func TestPatternsKeepFloatFunction(t *testing.T) {
	m := chainModel(t)
	ref := runModel(t, m, 9)
	with := runModel(t, quantize(t, chainModel(t), "w8a8", PrepareOptions{}).Result.Model, 9)
	without := runModel(t, quantize(t, chainModel(t), "w8a8", PrepareOptions{Patterns: PatternsNone}).Result.Model, 9)
	a, b := sqnr(ref["y"], with["y"]), sqnr(ref["y"], without["y"])
	t.Logf("SQNR with patterns %.2f dB, without %.2f dB", a, b)
	if !(a > b) || math.IsInf(a, 1) {
		t.Errorf("SQNR with patterns %.2f dB, want above the %.2f dB without", a, b)
	}
}

// sdpaHead is one attention head as torch's exporter writes
// scaled_dot_product_attention: q and kᵀ each times √scale, their
// product, Softmax, the product with v, and an output projection. The
// weights make the scores span several units, so that the Softmax is
// peaked as a trained model's is.
func sdpaHead(t *testing.T) *onnxgraph.Model {
	b := newPatternBuilder("sdpa_head")
	b.RandomInit("wq", 1.5, 8, 8).RandomInit("wk", 1.5, 8, 8).RandomInit("wv", 0.5, 8, 8).RandomInit("wo", 0.5, 8, 8)
	root := b.c(0.5946) // √(1/√8)
	b.n("MatMul", "q0", "x", "wq")
	b.n("MatMul", "k0", "x", "wk")
	b.n("MatMul", "v", "x", "wv")
	b.n("Mul", "q", "q0", root)
	b.Node("Transpose", "kt0_node", []string{"k0"}, []string{"kt0"}, testmodels.AttrInts("perm", 0, 2, 1))
	b.n("Mul", "kt", "kt0", root)
	b.n("MatMul", "s", "q", "kt")
	b.Node("Softmax", "p_node", []string{"s"}, []string{"p"}, testmodels.AttrInt("axis", -1))
	b.n("MatMul", "c", "p", "v")
	b.n("MatMul", "y", "c", "wo")
	return b.model(t, "y")
}

// TestPatternsAttentionScaledBeforeProduct checks that the scaled q and
// kᵀ and the scores of sdpaHead (torch's scaled_dot_product_attention,
// one op in torch) are left in float, and that its output is closer to
// the float model than with them quantized (same calibration).
func TestPatternsAttentionScaledBeforeProduct(t *testing.T) {
	var found []string
	for _, pm := range FindPatterns(sdpaHead(t), PatternsOps) {
		found = append(found, pm.Pattern+":"+pm.Root().Name)
	}
	if strings.Join(found, " ") != "attention_scores_sdpa:p_node" {
		t.Fatalf("patterns %q, want the scores up to the Softmax", found)
	}
	ref := runModel(t, sdpaHead(t), 9)
	u := quantize(t, sdpaHead(t), "w8a8", PrepareOptions{})
	checkBoundaries(t, u)
	with := runModel(t, u.Result.Model, 9)
	without := runModel(t, quantize(t, sdpaHead(t), "w8a8", PrepareOptions{Patterns: PatternsNone}).Result.Model, 9)
	a, b := sqnr(ref["y"], with["y"]), sqnr(ref["y"], without["y"])
	t.Logf("SQNR with patterns %.2f dB, without %.2f dB", a, b)
	if !(a > b) || math.IsInf(a, 1) {
		t.Errorf("SQNR with patterns %.2f dB, want above the %.2f dB without", a, b)
	}
}

// rmsNormBlock is a decoder's feed-forward half as exporters write it:
// RMSNorm (its reciprocal square root spelled as inv says), a linear
// layer, SiLU, a second linear layer, the residual Add and the final
// RMSNorm. The tokens' magnitudes span 0.05 to 40, as a decoder's hidden
// states do (a first token far larger than the rest), so the reciprocal
// RMS spans nearly three decades.
func rmsNormBlock(t *testing.T, inv string) *onnxgraph.Model {
	b := newPatternBuilder("rms_norm_block")
	b.Init("token_scale", []int64{4, 1}, []float32{40, 0.05, 1, 5})
	b.n("Mul", "xs", "x", "token_scale")
	b.rmsNorm("xs", "h", inv, true)
	b.RandomInit("w1", 0.5, 8, 8)
	b.n("MatMul", "up", "h", "w1")
	b.n("Sigmoid", "sig", "up")
	b.n("Mul", "act", "up", "sig")
	b.RandomInit("w2", 0.5, 8, 8)
	b.n("MatMul", "down", "act", "w2")
	b.n("Add", "res", "xs", "down")
	b.rmsNorm("res", "y", inv, true)
	return b.model(t, "y")
}

// TestRMSNormPatterns checks each exporter's spelling of RMSNorm in a
// decoder block: both norms match, nothing inside them is quantized, and
// the output is closer to the float model than with the insides
// quantized too (same calibration).
func TestRMSNormPatterns(t *testing.T) {
	for _, inv := range []string{"Div", "Reciprocal", "one_over"} {
		t.Run(inv, func(t *testing.T) {
			m := rmsNormBlock(t, inv)
			if got := len(FindPatterns(m, PatternsOps)); got != 3 {
				t.Fatalf("%d patterns, want the two RMSNorms and the SiLU", got)
			}
			ref := runModel(t, m, 9)
			u := quantize(t, rmsNormBlock(t, inv), "w8a8", PrepareOptions{})
			checkBoundaries(t, u)
			with := runModel(t, u.Result.Model, 9)
			without := runModel(t, quantize(t, rmsNormBlock(t, inv), "w8a8", PrepareOptions{Patterns: PatternsNone}).Result.Model, 9)
			a, b := sqnr(ref["y"], with["y"]), sqnr(ref["y"], without["y"])
			t.Logf("SQNR with patterns %.2f dB, without %.2f dB", a, b)
			if !(a > b) || math.IsInf(a, 1) {
				t.Errorf("SQNR with patterns %.2f dB, want above the %.2f dB without", a, b)
			}
		})
	}
}

// TestFusedGatedActivations checks that under --patterns all the output
// of a Conv, a MatMul or a linear layer that only a gated activation
// reads (SiLU, HardSwish and GELU written out, the HardSwish op) gets no
// Q/DQ, with a plan note, as a Relu's input does, and that it keeps its
// Q/DQ under the default patterns, when another node reads it too, or
// when the producer is no integer kernel.
func TestFusedGatedActivations(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *patternBuilder)
		fused bool
	}{
		{"conv, silu", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 4, 4, 1)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
			b.n("Sigmoid", "s", "c")
			b.n("Mul", "y", "c", "s")
		}, true},
		{"conv, hard swish written out", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 4, 4, 1)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
			b.n("Add", "a", "c", b.c(3))
			b.n("Clip", "l", "a", b.c(0), b.c(6))
			b.n("Mul", "m", "c", "l")
			b.n("Div", "y", "m", b.c(6))
		}, true},
		{"conv, HardSwish op", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 4, 4, 1)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
			b.n("HardSwish", "y", "c")
		}, true},
		{"matmul, silu", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 8, 8)
			b.n("MatMul", "c", "x", "w")
			b.n("Sigmoid", "s", "c")
			b.n("Mul", "y", "c", "s")
		}, true},
		{"linear layer (MatMul + bias), gelu", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 8, 8)
			b.n("MatMul", "m", "x", "w")
			b.n("Add", "c", "m", b.vec(0))
			b.gelu("c", "y")
		}, true},
		{"conv output read beside the silu", func(b *patternBuilder) {
			b.RandomInit("w", 0.5, 4, 4, 1)
			b.Node("Conv", "conv", []string{"x", "w"}, []string{"c"})
			b.n("Sigmoid", "s", "c")
			b.n("Mul", "y", "c", "s")
			b.n("Relu", "z", "c")
		}, false},
		{"an Add is no integer kernel", func(b *patternBuilder) {
			b.n("Add", "c", "x", b.vec(0))
			b.n("Sigmoid", "s", "c")
			b.n("Mul", "y", "c", "s")
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			build := func() *onnxgraph.Model {
				b := newPatternBuilder("fused_gate")
				tc.build(b)
				outs := []string{"y"}
				if hasOutput(b, "z") {
					outs = append(outs, "z")
				}
				return b.model(t, outs...)
			}
			all := quantize(t, build(), "w8a8", PrepareOptions{Patterns: PatternsAll}, true)
			noted := false
			for _, n := range all.Plan.Notes {
				noted = noted || (strings.Contains(n, `value "c": no Q/DQ between`) && strings.Contains(n, "(fused activation)"))
			}
			if got := all.Plan.Tensor("c") == nil; got != tc.fused || noted != tc.fused {
				t.Errorf("patterns all: c unquantized %v, noted %v; want %v", got, noted, tc.fused)
			}
			if all.Plan.Tensor("y") == nil {
				t.Error("patterns all: the activation's output y is not quantized")
			}
			if ops := quantize(t, build(), "w8a8", PrepareOptions{}, true); ops.Plan.Tensor("c") == nil {
				t.Error("default patterns: c is not quantized")
			}
		})
	}
}

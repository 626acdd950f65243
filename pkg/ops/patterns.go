package ops

import (
	"slices"
	"sort"
	"strings"
)

// A Pattern is a group of nodes that a backend runs as one op (torch.ao's
// BackendPatternConfig): a LayerNormalization or GELU that the exporter
// wrote out op by op, a Conv followed by the Add of a residual, a MatMul
// and the Add of its bias, the scores of an attention head up to their
// Softmax. prepare quantizes its values at the pattern's boundary only:
// the inputs it reads from outside and the output of its last node.
//
// A pattern is written as data, one statement per node in topological
// order, the last node's output being the pattern's output:
//
//	name = Op(arg, arg, ...)
//
// An arg is a name defined by an earlier statement (that node's output,
// which must be consumed only inside the pattern), another name (a value
// from outside the pattern; every use of the name must be the same value),
// such a name written `~name` (a value from outside that no constant
// holds: an activation), `$` (any constant) or a number (a constant
// scalar equal to it within 1e-3 relative). Add and Mul match their two
// inputs in either order.
// Inputs past the args (Conv's weight, ReduceMean's axes) must be constant.
type Pattern struct {
	Name       string
	Statements []string
	// Fusion marks a pattern that is one op only to runtimes that fuse it
	// (Conv + Add: oneDNN and torch.ao's backends do, ONNX Runtime's x86
	// QDQ fusions do not and run a Conv without an output Q in float).
	Fusion bool
	// Torch is the torch op that exporters without op metadata write as
	// this chain (TorchScript at opsets without Gelu or
	// LayerNormalization); the config language then addresses the chain
	// as one call of it. "" for none.
	Torch string
	// GateReads are the statements that read x to compute the gate of a
	// gated activation x·g(x) (SiLU, GELU, HardSwish); nil for the others.
	// Cross-layer equalization can divide x by per-channel scales when the
	// gate reads x multiplied back by them (one Mul by a constant), so each
	// gated pattern has a variant, NAME_rescaled, whose gate reads go
	// through that Mul.
	GateReads []int
	// Tail says where a gated activation's output stops changing as x
	// falls, for the ones whose input is quantized from there (SiLU; nil
	// for the other patterns).
	Tail *Tail
}

// OpTypes are the op types of the pattern's statements, in order.
func (p Pattern) OpTypes() []string {
	out := make([]string, len(p.Statements))
	for i, s := range p.Statements {
		_, rhs, _ := strings.Cut(s, "=")
		op, _, _ := strings.Cut(strings.TrimSpace(rhs), "(")
		out[i] = op
	}
	return out
}

// Patterns lists the patterns, with the rescaled variants of the gated
// ones, sorted by name.
func Patterns() []Pattern {
	out := append([]Pattern(nil), patterns...)
	for _, p := range patterns {
		if len(p.GateReads) > 0 {
			out = append(out, p.Rescaled())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RescaledSuffix ends the name of a gated pattern's rescaled variant.
const RescaledSuffix = "_rescaled"

// Rescaled is the variant of a gated pattern whose gate reads x through a
// Mul by a constant (Pattern.GateReads): "xs = Mul(x, $)" comes first and
// the gate statements read xs.
func (p Pattern) Rescaled() Pattern {
	stmts := []string{"xs = Mul(x, $)"}
	for i, st := range p.Statements {
		if slices.Contains(p.GateReads, i) {
			lhs, rhs, _ := strings.Cut(st, "=")
			op, args, _ := strings.Cut(strings.TrimSpace(rhs), "(")
			parts := strings.Split(strings.TrimSuffix(args, ")"), ",")
			for j, a := range parts {
				if strings.TrimSpace(a) == "x" {
					parts[j] = strings.Replace(a, "x", "xs", 1)
				}
			}
			st = strings.TrimSpace(lhs) + " = " + op + "(" + strings.Join(parts, ",") + ")"
		}
		stmts = append(stmts, st)
	}
	return Pattern{Name: p.Name + RescaledSuffix, Statements: stmts, Torch: p.Torch, Tail: p.Tail}
}

var patterns = []Pattern{
	{Name: "layer_norm", Torch: "layer_norm", Statements: []string{
		"m = ReduceMean(x)", "d = Sub(x, m)", "p = Pow(d, 2)", "v = ReduceMean(p)",
		"e = Add(v, $)", "s = Sqrt(e)", "n = Div(d, s)", "g = Mul(n, $)", "y = Add(g, $)",
	}},
	{Name: "layer_norm_square_by_mul", Statements: []string{
		"m = ReduceMean(x)", "d = Sub(x, m)", "p = Mul(d, d)", "v = ReduceMean(p)",
		"e = Add(v, $)", "s = Sqrt(e)", "n = Div(d, s)", "g = Mul(n, $)", "y = Add(g, $)",
	}},
	{Name: "layer_norm_no_affine", Statements: []string{
		"m = ReduceMean(x)", "d = Sub(x, m)", "p = Pow(d, 2)", "v = ReduceMean(p)",
		"e = Add(v, $)", "s = Sqrt(e)", "y = Div(d, s)",
	}},
	// RMSNorm as decoder exports write it: x·rsqrt(mean(x²) + ε)·w, the
	// reciprocal square root as Div(x, ·), Reciprocal then Mul (torch's
	// dynamo exporter) or Div(1, ·) then Mul (TorchScript's rsqrt), the
	// square as Pow or Mul, and the weight absent in some models.
	{Name: "rms_norm", Statements: []string{
		"p = Pow(x, 2)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "n = Div(x, s)", "y = Mul(n, $)",
	}},
	{Name: "rms_norm_square_by_mul", Statements: []string{
		"p = Mul(x, x)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "n = Div(x, s)", "y = Mul(n, $)",
	}},
	{Name: "rms_norm_reciprocal", Statements: []string{
		"p = Pow(x, 2)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "r = Reciprocal(s)", "n = Mul(x, r)", "y = Mul(n, $)",
	}},
	{Name: "rms_norm_one_over", Statements: []string{
		"p = Pow(x, 2)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "r = Div(1, s)", "n = Mul(x, r)", "y = Mul(n, $)",
	}},
	{Name: "rms_norm_no_affine", Statements: []string{
		"p = Pow(x, 2)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "y = Div(x, s)",
	}},
	{Name: "rms_norm_reciprocal_no_affine", Statements: []string{
		"p = Pow(x, 2)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "r = Reciprocal(s)", "y = Mul(x, r)",
	}},
	{Name: "rms_norm_one_over_no_affine", Statements: []string{
		"p = Pow(x, 2)", "v = ReduceMean(p)", "e = Add(v, $)", "s = Sqrt(e)", "r = Div(1, s)", "y = Mul(x, r)",
	}},
	{Name: "gelu_tanh", GateReads: []int{0, 2}, Statements: []string{
		"c = Pow(x, 3)", "k = Mul(c, 0.044715)", "i = Add(x, k)", "s = Mul(i, 0.7978846)",
		"t = Tanh(s)", "u = Add(t, 1)", "h = Mul(x, 0.5)", "y = Mul(h, u)",
	}},
	{Name: "gelu_tanh_half_last", GateReads: []int{0, 2}, Statements: []string{
		"c = Pow(x, 3)", "k = Mul(c, 0.044715)", "i = Add(x, k)", "s = Mul(i, 0.7978846)",
		"t = Tanh(s)", "u = Add(t, 1)", "g = Mul(x, u)", "y = Mul(g, 0.5)",
	}},
	{Name: "gelu", GateReads: []int{0}, Torch: "gelu", Statements: []string{
		"a = Div(x, 1.4142135)", "e = Erf(a)", "u = Add(e, 1)", "g = Mul(x, u)", "y = Mul(g, 0.5)",
	}},
	{Name: "gelu_by_mul", GateReads: []int{0}, Statements: []string{
		"a = Mul(x, 0.70710678)", "e = Erf(a)", "u = Add(e, 1)", "g = Mul(x, u)", "y = Mul(g, 0.5)",
	}},
	{Name: "gelu_half_first", GateReads: []int{0}, Statements: []string{
		"a = Div(x, 1.4142135)", "e = Erf(a)", "u = Add(e, 1)", "h = Mul(x, 0.5)", "y = Mul(h, u)",
	}},
	{Name: "gelu_by_mul_half_first", GateReads: []int{0}, Statements: []string{
		"a = Mul(x, 0.70710678)", "e = Erf(a)", "u = Add(e, 1)", "h = Mul(x, 0.5)", "y = Mul(h, u)",
	}},
	{Name: "hard_swish", GateReads: []int{0}, Statements: []string{"a = Add(x, 3)", "c = Clip(a)", "d = Div(c, 6)", "y = Mul(x, d)"}},
	{Name: "hard_swish_div_last", GateReads: []int{0}, Statements: []string{"a = Add(x, 3)", "c = Clip(a)", "m = Mul(x, c)", "y = Div(m, 6)"}},
	{Name: "hard_swish_by_mul", GateReads: []int{0}, Statements: []string{"a = Add(x, 3)", "c = Clip(a)", "d = Mul(c, 0.16666667)", "y = Mul(x, d)"}},
	{Name: "hard_sigmoid", Statements: []string{"a = Add(x, 3)", "c = Clip(a)", "y = Div(c, 6)"}},
	{Name: "hard_sigmoid_by_mul", Statements: []string{"a = Add(x, 3)", "c = Clip(a)", "y = Mul(c, 0.16666667)"}},
	{Name: "hard_swish_op", GateReads: []int{0}, Statements: []string{"h = HardSigmoid(x)", "y = Mul(x, h)"}},
	{Name: "silu", Tail: siluTail, GateReads: []int{0}, Statements: []string{"s = Sigmoid(x)", "y = Mul(x, s)"}},
	{Name: "attention_scores", Statements: []string{
		"s = MatMul(q, k)", "t = Mul(s, $)", "a = Add(t, mask)", "y = Softmax(a)",
	}},
	{Name: "attention_scores_div", Statements: []string{
		"s = MatMul(q, k)", "t = Div(s, $)", "a = Add(t, mask)", "y = Softmax(a)",
	}},
	{Name: "attention_scores_scaled", Statements: []string{"s = MatMul(q, k)", "t = Mul(s, $)", "y = Softmax(t)"}},
	{Name: "attention_scores_div_no_mask", Statements: []string{"s = MatMul(q, k)", "t = Div(s, $)", "y = Softmax(t)"}},
	{Name: "attention_scores_masked", Statements: []string{"s = MatMul(q, k)", "a = Add(s, mask)", "y = Softmax(a)"}},
	// torch's exporters write scaled_dot_product_attention, one op that
	// coreai-opt does not quantize inside, as q·√scale and kᵀ·√scale, then
	// MatMul, an optional mask Add and Softmax. Both factors scaled tell
	// it from attention written as ops (nn.MultiheadAttention's bmm path
	// scales q alone), whose scores coreai-opt quantizes as bmm's output.
	{Name: "attention_scores_sdpa", Statements: []string{"qs = Mul(~q, $)", "ks = Mul(~k, $)", "s = MatMul(qs, ks)", "y = Softmax(s)"}},
	{Name: "attention_scores_sdpa_masked", Statements: []string{"qs = Mul(~q, $)", "ks = Mul(~k, $)", "s = MatMul(qs, ks)", "a = Add(s, mask)", "y = Softmax(a)"}},
	{Name: "linear", Statements: []string{"m = MatMul(x, $)", "y = Add(m, $)"}},
	{Name: "conv_add", Statements: []string{"c = Conv(x)", "y = Add(c, r)"}, Fusion: true},
	{Name: "conv_transpose_add", Statements: []string{"c = ConvTranspose(x)", "y = Add(c, r)"}, Fusion: true},
	{Name: "gemm_add", Statements: []string{"c = Gemm(x)", "y = Add(c, r)"}, Fusion: true},
}

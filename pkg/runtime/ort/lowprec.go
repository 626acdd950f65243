//go:build ort

package ort

import (
	"fmt"
	"slices"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// float8Optimizers are the ONNX Runtime 1.23 graph optimizers that break
// models with float8 QuantizeLinear/DequantizeLinear on the CPU provider,
// by the names optimization.disable_specified_optimizers takes:
//
//   - QDQSelectorActionTransformer fuses DequantizeLinear → Conv/MatMul/Gemm
//     → QuantizeLinear into QLinearConv, QLinearMatMul or QGemm without
//     checking the element type (qdq_selectors.cc tests int8, int16 and
//     int4 only), and those operators have no float8 kernels: the session
//     fails to load with "Type 'tensor(float8e4m3fn)' ... of operator
//     (QLinearConv) ... is invalid" (microsoft/onnxruntime#22269 reports
//     the QGemm case).
//   - ReluQuantRewrite (ReluQuantFusion) deletes a Relu followed by a
//     QuantizeLinear whose zero point is not int8 −128 or uint8 0: it only
//     checks those two types, so with a float8 zero point of 0 it deletes a
//     Relu that is not redundant, and negative values flow on. This is why
//     session.disable_quant_qdq=1 alone loads the model but computes
//     something else (the rule is not a QDQ transformer).
//   - ClipQuantRewrite (ClipQuantFusion) reads the QuantizeLinear range from
//     an int8/uint8 zero point; disabled with the Relu rule so that no Clip
//     is judged against a range it cannot compute.
//
// Every other optimization stays on, and session.disable_quant_qdq=1 is
// set too: it keeps the QDQ transformers away from float8 groups and lets
// constant folding turn each weight DequantizeLinear into a float
// initializer (the same float32 values DequantizeLinear computes at run
// time), so the convolutions and products run on float weights with the
// level-3 layout optimizations, faster than the same graph at the basic
// level.
var float8Optimizers = []string{"QDQSelectorActionTransformer", "ReluQuantRewrite", "ClipQuantRewrite"}

// disableQuantQDQKey turns off ONNX Runtime's QDQ transformers.
const disableQuantQDQKey = "session.disable_quant_qdq"

// float8Options returns so for a model with float8 QuantizeLinear or
// DequantizeLinear: float8Optimizers disabled and, unless the caller chose
// otherwise, session.disable_quant_qdq=1.
func float8Options(so SessionOptions) SessionOptions {
	so = withOptimizersDisabled(so, float8Optimizers)
	if !slices.ContainsFunc(so.Config, func(c ConfigEntry) bool { return c.Key == disableQuantQDQKey }) {
		so.Config = append(so.Config, ConfigEntry{disableQuantQDQKey, "1"})
	}
	return so
}

// disableOptimizersKey is the session configuration key that names graph
// optimizers to skip, separated by semicolons.
const disableOptimizersKey = "optimization.disable_specified_optimizers"

func isFloat8(dt tensor.DType) bool {
	switch dt {
	case tensor.Float8E4M3FN, tensor.Float8E4M3FNUZ, tensor.Float8E5M2, tensor.Float8E5M2FNUZ:
		return true
	}
	return false
}

// hasFloat8QDQ reports whether a QuantizeLinear or DequantizeLinear of m
// (in any graph, subgraphs included) quantizes to a float8 type.
func hasFloat8QDQ(m *onnxgraph.Model) bool {
	found := false
	walkGraphs(m.Graph, func(g *onnxgraph.Graph) bool {
		for _, n := range g.Nodes {
			if quantizedDType(n) != tensor.Undefined && isFloat8(quantizedDType(n)) {
				found = true
				return false
			}
		}
		return true
	})
	return found
}

// quantizedDType is the quantized element type of a QuantizeLinear (its
// zero point's type, or output_dtype) or DequantizeLinear (its input's
// type), Undefined for other nodes or when the file does not say.
func quantizedDType(n *onnxgraph.Node) tensor.DType {
	if n.Domain != "" && n.Domain != "com.microsoft" {
		return tensor.Undefined
	}
	switch n.OpType {
	case "QuantizeLinear":
		if len(n.Inputs) > 2 && n.Inputs[2] != nil {
			return n.Inputs[2].DType()
		}
		if a := n.Attr("output_dtype"); a != nil {
			return tensor.DType(a.GetI())
		}
	case "DequantizeLinear":
		if len(n.Inputs) > 0 && n.Inputs[0] != nil {
			return n.Inputs[0].DType()
		}
	}
	return tensor.Undefined
}

// walkGraphs calls fn on g and every subgraph below it, depth first in node
// order, until fn returns false.
func walkGraphs(g *onnxgraph.Graph, fn func(*onnxgraph.Graph) bool) bool {
	if !fn(g) {
		return false
	}
	for _, n := range g.Nodes {
		keys := make([]string, 0, len(n.Subgraphs))
		for k := range n.Subgraphs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !walkGraphs(n.Subgraphs[k], fn) {
				return false
			}
		}
	}
	return true
}

// withOptimizersDisabled returns so with names added to the optimizers it
// disables, merged into an existing entry if the caller set one.
func withOptimizersDisabled(so SessionOptions, names []string) SessionOptions {
	cfg := slices.Clone(so.Config)
	for i, c := range cfg {
		if c.Key != disableOptimizersKey {
			continue
		}
		have := strings.Split(c.Value, ";")
		for _, n := range names {
			if !slices.Contains(have, n) {
				have = append(have, n)
			}
		}
		have = slices.DeleteFunc(have, func(s string) bool { return s == "" })
		cfg[i].Value = strings.Join(have, ";")
		so.Config = cfg
		return so
	}
	so.Config = append(cfg, ConfigEntry{disableOptimizersKey, strings.Join(names, ";")})
	return so
}

// float4Tensors lists the constants of m (initializers and Constant
// outputs, subgraphs included) stored as float4 e2m1, in file order.
func float4Tensors(m *onnxgraph.Model) []string {
	var names []string
	walkGraphs(m.Graph, func(g *onnxgraph.Graph) bool {
		for _, v := range g.Initializers {
			if v.DType() == tensor.Float4E2M1 {
				names = append(names, v.Name)
			}
		}
		for _, n := range g.Nodes {
			for _, v := range n.Outputs {
				if v != nil && v.Const != nil && !v.IsInitializer && v.DType() == tensor.Float4E2M1 {
					names = append(names, v.Name)
				}
			}
		}
		return true
	})
	return names
}

// float4Error explains a session that failed on a model with float4
// constants: ONNX Runtime 1.23's CPU provider cannot load them and says
// only "not implemented".
func (l *Library) float4Error(names []string, err error) error {
	first := fmt.Sprintf("%q", names[0])
	if len(names) > 1 {
		first += fmt.Sprintf(" and %d more", len(names)-1)
	}
	return fmt.Errorf("ONNX Runtime %s cannot load float4 (FLOAT4E2M1) weights, and this model stores %s as float4; "+
		"quantize it with `coreaiq quantize --fp4-as-fp8` to store the 4-bit float codes as float8 e4m3fn, which ONNX Runtime runs, "+
		"or run it with --engine go: %w", l.VersionString, first, err)
}

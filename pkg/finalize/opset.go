package finalize

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// MaxOpset is the newest default-domain opset coreaiq writes: the last
// one irForOpset and the table of operator changes know.
const MaxOpset = 25

// minQDQOpset is the first opset with QuantizeLinear and DequantizeLinear.
const minQDQOpset = 10

// CheckOpset checks a pinned output opset (0: none) against a model
// importing modelOpset, before any work: it may not lower the model's
// opset, and must lie between the first Q/DQ opset and MaxOpset.
func CheckOpset(modelOpset, pinned int64) error {
	switch {
	case pinned == 0:
		return nil
	case pinned < 0 || pinned > MaxOpset:
		return fmt.Errorf("opset %d: coreaiq writes opsets %d to %d", pinned, minQDQOpset, MaxOpset)
	case pinned < minQDQOpset:
		return fmt.Errorf("opset %d is too low: QuantizeLinear and DequantizeLinear need opset %d or later", pinned, minQDQOpset)
	case pinned < modelOpset:
		return fmt.Errorf("opset %d is below the model's opset %d; coreaiq does not lower opsets", pinned, modelOpset)
	}
	return nil
}

// irForOpset is the IR version of the ONNX release that introduced each
// default-domain opset (docs/Versioning.md): the lowest IR a model
// importing that opset can declare.
func irForOpset(opset int64) int64 {
	switch {
	case opset <= 8:
		return 3
	case opset == 9:
		return 4
	case opset == 10:
		return 5
	case opset == 11:
		return 6
	case opset <= 14:
		return 7
	case opset <= 18:
		return 8
	case opset <= 20:
		return 9
	case opset <= 22:
		return 10
	case opset == 23:
		return 11
	case opset == 24:
		return 12
	}
	return 13
}

// breaking lists, per default-domain op, the opset versions at which the op
// changed in a way that alters the meaning of an existing node (an
// attribute turned into an input, a changed default or semantics). Versions
// that only added element types, or added attributes and inputs whose
// defaults keep the old behaviour, are not listed. An op absent from the
// table is unknown: raising the opset of a model that uses it is refused,
// since nothing here says it is safe. A listed change is rewritten by the
// op's version adapter (adapt.go) when it has one, and refused otherwise.
var breaking = map[string][]int64{
	// Element-wise arithmetic: v7 replaced the broadcast attribute by
	// numpy broadcasting; later versions only added types.
	"Add": {7}, "Sub": {7}, "Mul": {7}, "Div": {7}, "Pow": {7}, "PRelu": {7},
	"Equal": {7}, "Greater": {7}, "Less": {7}, "And": {7}, "Or": {7}, "Xor": {7},
	"Sum": {8}, "Max": {8}, "Min": {8}, "Mean": {8},
	"Abs": nil, "Neg": nil, "Exp": nil, "Log": nil, "Sqrt": nil, "Reciprocal": nil,
	"Floor": nil, "Ceil": nil, "Sign": nil, "Erf": nil, "Not": nil, "Mod": nil,
	"Sin": nil, "Cos": nil, "Tan": nil, "Round": nil, "IsNaN": nil, "IsInf": nil,
	"GreaterOrEqual": nil, "LessOrEqual": nil, "BitShift": nil, "Where": nil,
	"Relu": nil, "LeakyRelu": nil, "Sigmoid": nil, "Tanh": nil, "Elu": nil, "Selu": nil,
	"HardSigmoid": nil, "HardSwish": nil, "Softplus": nil, "Softsign": nil,
	"ThresholdedRelu": nil, "Celu": nil, "Mish": nil, "Gelu": nil,
	// Clip v11: min and max moved from attributes to inputs.
	"Clip": {11},
	// Softmax family v13: the 2-D coercion around axis was dropped.
	"Softmax": {13}, "LogSoftmax": {13}, "Hardmax": {13},
	"Conv": nil, "ConvTranspose": nil, "ConvInteger": nil, "QLinearConv": nil,
	"Gemm": nil, "MatMul": nil, "MatMulInteger": nil, "QLinearMatMul": nil, "Einsum": nil,
	"MaxPool": nil, "AveragePool": nil, "GlobalAveragePool": nil, "GlobalMaxPool": nil,
	"LpPool": nil, "GlobalLpPool": nil, "MaxRoiPool": nil, "MaxUnpool": nil,
	// BatchNormalization v7 dropped is_test, v9 `spatial`; v14 training_mode defaults to inference.
	"BatchNormalization": {7, 9}, "InstanceNormalization": nil, "LayerNormalization": nil,
	"GroupNormalization": {21}, "LRN": nil, "LpNormalization": nil,
	// Dropout v7 dropped is_test, v10 made the mask bool, v12 moved ratio to an input.
	"Dropout": {7, 10, 12}, "Identity": nil, "Cast": nil, "CastLike": nil,
	"Reshape": {5}, "Flatten": nil, "Transpose": nil, "Concat": {4},
	// Squeeze/Unsqueeze v13 and Split v13: axes/split moved to inputs.
	"Squeeze": {13}, "Unsqueeze": {13}, "Split": {13},
	// Slice v10: starts/ends moved to inputs.
	"Slice":  {10},
	"Gather": nil, "GatherElements": nil, "GatherND": nil, "Scatter": nil,
	"ScatterElements": nil, "ScatterND": nil, "Expand": nil, "Tile": {6},
	"Shape": nil, "Size": nil, "ConstantOfShape": nil, "Constant": nil, "Range": nil,
	// Pad v11: pads moved to an input.
	"Pad": {11},
	// Resize v11: roi input inserted before scales; Upsample removed at 10.
	"Resize": {11}, "Upsample": {10},
	"DepthToSpace": nil, "SpaceToDepth": nil, "TopK": {10}, "ArgMax": nil, "ArgMin": nil,
	// Reductions: ReduceSum's axes became an input at v13, the others' at v18.
	"ReduceSum": {13}, "ReduceMean": {18}, "ReduceMax": {18}, "ReduceMin": {18},
	"ReduceProd": {18}, "ReduceL1": {18}, "ReduceL2": {18}, "ReduceLogSum": {18},
	"ReduceLogSumExp": {18}, "ReduceSumSquare": {18},
	"CumSum": nil, "NonZero": nil, "Trilu": nil, "OneHot": nil, "NonMaxSuppression": nil,
	"If": nil, "Loop": nil, "Scan": {9},
	"LSTM": nil, "GRU": nil, "RNN": nil,
	"QuantizeLinear": nil, "DequantizeLinear": nil, "DynamicQuantizeLinear": nil,
}

// checkOpsetRaise returns an error naming every op of the model (in the
// default domain, subgraphs included) whose meaning changed between opset
// from and opset to and that has no version adapter, or that the table
// above does not know.
func checkOpsetRaise(m *onnxpb.ModelProto, from, to int64) error {
	if to <= from {
		return nil
	}
	changed := map[string]string{}
	var walk func(g *onnxpb.GraphProto)
	walk = func(g *onnxpb.GraphProto) {
		for _, n := range g.GetNode() {
			if d := n.GetDomain(); d != "" && d != "ai.onnx" {
				continue
			}
			op := n.GetOpType()
			if _, seen := changed[op]; !seen {
				versions, known := breaking[op]
				switch {
				case !known:
					changed[op] = "not in coreaiq's table of operator changes"
				case adapters[op] != nil:
					// rewritten by adaptOpset, which names the nodes it cannot rewrite
				default:
					for _, v := range versions {
						if v > from && v <= to {
							changed[op] = fmt.Sprintf("changed meaning at opset %d, no rewrite in coreaiq", v)
							break
						}
					}
				}
			}
			for _, a := range n.GetAttribute() {
				if a.G != nil {
					walk(a.G)
				}
				for _, sg := range a.Graphs {
					walk(sg)
				}
			}
		}
	}
	walk(m.GetGraph())
	if len(changed) == 0 {
		return nil
	}
	ops := make([]string, 0, len(changed))
	for op := range changed {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var parts []string
	for _, op := range ops {
		parts = append(parts, op+" ("+changed[op]+")")
	}
	return fmt.Errorf("the quantized model needs opset %d but the model imports opset %d, and raising it is not safe for: %s; convert the model to opset %d first (e.g. onnx.version_converter) and quantize the result",
		to, from, strings.Join(parts, ", "), to)
}

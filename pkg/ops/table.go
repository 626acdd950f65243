package ops

import (
	"math"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// entries is the op table, one entry per op type, sorted by type. An op
// without a Quant rule runs in float and is reported as skipped; an op
// absent from the table is also unknown to the opset raise.
var entries = []Op{
	{
		Type:    "Abs",
		Torch:   []Torch{{Name: "abs"}},
		Changes: unchanged,
	},
	{Type: "Acos", Changes: unchanged},
	{Type: "Acosh", Changes: unchanged},
	{
		Type:    "Add",
		Inputs:  []string{"A", "B"},
		Outputs: []string{"C"},
		Args:    [][]string{{"input", "self"}, {"other"}},
		Torch:   []Torch{{Name: "add"}},
		Quant:   &Quant{Kind: Generic, FusesActivation: true},
		Fusion:  FuseConvResidual,
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "And",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:         "ArgMax",
		Torch:        []Torch{{Name: "argmax"}},
		DecidedByMax: true,
		Out:          OutType{Fixed: tensor.Int64},
		Changes:      unchanged,
	},
	{
		Type:    "ArgMin",
		Torch:   []Torch{{Name: "argmin"}},
		Out:     OutType{Fixed: tensor.Int64},
		Changes: unchanged,
	},
	{Type: "Asin", Changes: unchanged},
	{Type: "Asinh", Changes: unchanged},
	{Type: "Atan", Changes: unchanged},
	{Type: "Atanh", Changes: unchanged},
	{
		Type:  "Attention",
		Torch: []Torch{{Name: "scaled_dot_product_attention"}},
		// v24 added nonpad_kv_seqlen and v25 revised the op again; the
		// revisions are not checked to keep an opset-23 node's meaning, so
		// raising past them is refused.
		Changes: changedAt(24, 25),
	},
	{
		Type:             "AveragePool",
		Inputs:           []string{"X"},
		Outputs:          []string{"Y"},
		Torch:            []Torch{{Name: "avg_pool1d"}, {Name: "avg_pool2d", Preferred: true}, {Name: "avg_pool3d"}},
		Quant:            &Quant{Kind: Generic, Inputs: []int{0}},
		KeepsNonNegative: true,
		MaxFromInput:     true,
		Intrinsic:        &Intrinsic{Scheme: spec.Asymmetric, What: "AveragePool of non-negative inputs", IfInputsNonNegative: true},
		Changes:          unchanged,
	},
	{
		Type:    "BatchNormalization",
		Inputs:  []string{"X", "scale", "B", "input_mean", "input_var"},
		Outputs: []string{"Y", "running_mean", "running_var"},
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}, {"running_mean"}, {"running_var"}},
		States:  map[int]string{1: "weight", 2: "bias", 3: "running_mean", 4: "running_var"},
		Torch:   []Torch{{Name: "batch_norm", States: []string{"weight", "bias", "running_mean", "running_var"}}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}, FusesActivation: true},
		Fusion:  FuseConvNorm,
		Changes: changedAt(7, 9), // v7 dropped is_test, v9 spatial (v14's training_mode defaults to inference)
	},
	{Type: "BitShift", Changes: unchanged},
	{
		Type:    "Cast",
		Out:     OutType{Attr: castTo},
		Changes: unchanged,
	},
	{
		Type:    "CastLike",
		Out:     OutType{Input: 1},
		Changes: unchanged,
	},
	{Type: "Ceil", Changes: unchanged},
	{
		Type:    "Celu",
		Torch:   []Torch{{Name: "celu"}},
		Changes: unchanged,
	},
	{
		Type:    "Clip",
		Inputs:  []string{"input", "min", "max"},
		Outputs: []string{"output"},
		Args:    [][]string{{"input", "self"}, {"min"}, {"max"}},
		Torch:   []Torch{{Name: "clamp", Preferred: true, Targets: []string{"clip"}}, {Name: "clip", Targets: []string{"clamp"}}, {Name: "hardtanh"}, {Name: "relu6"}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}, Activation: true},
		Bounds:  clipBounds,
		Changes: changedAt(11), // v11: min and max moved from attributes to inputs
	},
	{Type: "Compress", Changes: unchanged}, // v11: negative axes only
	{
		Type:             "Concat",
		Inputs:           []string{"inputs"},
		Outputs:          []string{"concat_result"},
		Args:             [][]string{{"tensors"}},
		Torch:            []Torch{{Name: "cat", Preferred: true, Args: []string{"tensors"}, Targets: []string{"concat"}}, {Name: "concat", Args: []string{"tensors"}, Targets: []string{"cat"}}},
		Quant:            &Quant{Kind: Generic},
		KeepsNonNegative: true,
		Intrinsic:        &Intrinsic{Scheme: spec.Asymmetric, What: "Concat of non-negative inputs", IfInputsNonNegative: true},
		Changes:          changedAt(4), // v4: axis became required
	},
	{Type: "Constant", Changes: unchanged},
	{
		Type:    "ConstantOfShape",
		Out:     OutType{Attr: constantOfShapeType},
		Changes: unchanged,
	},
	{
		Type:    "Conv",
		Inputs:  []string{"X", "W", "B"},
		Outputs: []string{"Y"},
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
		States:  map[int]string{1: "weight", 2: "bias"},
		Torch:   []Torch{{Name: "conv1d", If: weightRank(3), States: []string{"weight", "bias"}}, {Name: "conv2d", If: weightRank(4), States: []string{"weight", "bias"}}, {Name: "conv3d", If: weightRank(5), States: []string{"weight", "bias"}}},
		Quant:   &Quant{Kind: Compute, Inputs: []int{0}, Bias: 2, FusesActivation: true},
		Weight:  fixedAxes(0, 1, "per_channel 0, per_block 1"),
		Fusion:  FuseConv,
		Changes: unchanged,
	},
	{Type: "ConvInteger", Changes: unchanged},
	{
		Type:    "ConvTranspose",
		Inputs:  []string{"X", "W", "B"},
		Outputs: []string{"Y"},
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
		States:  map[int]string{1: "weight", 2: "bias"},
		Torch:   []Torch{{Name: "conv_transpose1d", If: weightRank(3), States: []string{"weight", "bias"}}, {Name: "conv_transpose2d", If: weightRank(4), States: []string{"weight", "bias"}}, {Name: "conv_transpose3d", If: weightRank(5), States: []string{"weight", "bias"}}},
		Quant:   &Quant{Kind: Compute, Inputs: []int{0}, Bias: 2, FusesActivation: true},
		Weight:  fixedAxes(1, 0, "per_channel 1, per_block 0"),
		Changes: unchanged,
	},
	{Type: "Cos", Changes: unchanged},
	{Type: "Cosh", Changes: unchanged},
	{
		Type:    "CumSum",
		Torch:   []Torch{{Name: "cumsum"}},
		Changes: unchanged,
	},
	{
		Type:    "DepthToSpace",
		Torch:   []Torch{{Name: "pixel_shuffle"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: unchanged,
	},
	{
		Type:    "DequantizeLinear",
		Out:     OutType{Unknown: true},
		Changes: unchanged,
		Fusion:  FuseRoundTripTail,
	},
	{
		Type:    "Div",
		Inputs:  []string{"A", "B"},
		Outputs: []string{"C"},
		Args:    [][]string{{"input", "self"}, {"other"}},
		Torch:   []Torch{{Name: "div"}},
		Quant:   &Quant{Kind: Generic},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "Dropout",
		Torch:   []Torch{{Name: "dropout"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(7, 10, 12), // v7 dropped is_test, v10 made the mask bool, v12 moved ratio to an input
	},
	{
		Type:    "DynamicQuantizeLinear",
		Out:     OutType{Unknown: true},
		Changes: unchanged,
	},
	{
		Type:    "Einsum",
		Torch:   []Torch{{Name: "einsum"}},
		Changes: unchanged,
	},
	{
		Type:    "Elu",
		Torch:   []Torch{{Name: "elu"}},
		Changes: unchanged,
	},
	{
		Type:    "Equal",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "Erf",
		Inputs:  []string{"input"},
		Outputs: []string{"output"},
		Torch:   []Torch{{Name: "erf"}},
		Changes: unchanged,
	},
	{
		Type:    "Exp",
		Torch:   []Torch{{Name: "exp"}},
		Changes: unchanged,
	},
	{
		Type:    "Expand",
		Torch:   []Torch{{Name: "expand"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: unchanged,
	},
	{Type: "EyeLike", Changes: unchanged},
	{
		Type:    "Flatten",
		Inputs:  []string{"input"},
		Outputs: []string{"output"},
		Torch:   []Torch{{Name: "flatten"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: unchanged,
	},
	{Type: "Floor", Changes: unchanged},
	{Type: "GRU", Changes: unchanged},
	{
		Type:    "Gather",
		Inputs:  []string{"data", "indices"},
		Outputs: []string{"output"},
		Args:    [][]string{{"input", "self"}, {"index"}},
		States:  map[int]string{0: "weight"},
		Torch:   []Torch{{Name: "embedding", If: constInput(0), States: []string{"weight"}, NodeArgs: [][]string{{"weight"}, {"input"}}}, {Name: "gather", Preferred: true}, {Name: "index_select"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Weight:  fixedAxes(0, 1, "per_channel 0, per_block 1 (embedding table)"),
		Changes: unchanged,
	},
	{Type: "GatherElements", Changes: unchanged},
	{Type: "GatherND", Changes: unchanged},
	{
		Type:    "Gelu",
		Inputs:  []string{"X"},
		Outputs: []string{"Y"},
		Torch:   []Torch{{Name: "gelu"}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: unchanged,
	},
	{
		Type:    "Gemm",
		Inputs:  []string{"A", "B", "C"},
		Outputs: []string{"Y"},
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
		States:  map[int]string{1: "weight", 2: "bias"},
		Torch:   []Torch{{Name: "linear", If: always, States: []string{"weight", "bias"}}},
		Quant:   &Quant{Kind: Compute, Inputs: []int{0, 1}, Bias: 2, FusesActivation: true},
		Weight:  gemmAxes,
		Changes: unchanged,
	},
	{
		Type:             "GlobalAveragePool",
		Inputs:           []string{"X"},
		Outputs:          []string{"Y"},
		Torch:            []Torch{{Name: "adaptive_avg_pool1d"}, {Name: "adaptive_avg_pool2d", Preferred: true}, {Name: "adaptive_avg_pool3d"}},
		Quant:            &Quant{Kind: Generic, Inputs: []int{0}},
		KeepsNonNegative: true,
		MaxFromInput:     true,
		Intrinsic:        &Intrinsic{Scheme: spec.Asymmetric, What: "GlobalAveragePool of non-negative inputs", IfInputsNonNegative: true},
		Changes:          unchanged,
	},
	{Type: "GlobalLpPool", Changes: unchanged},
	{Type: "GlobalMaxPool", Changes: unchanged},
	{
		Type:    "Greater",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "GreaterOrEqual",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: unchanged,
	},
	{Type: "GridSample", Changes: changedAt(20)}, // v20: modes renamed (bilinear → linear, bicubic → cubic) and N-D inputs
	{
		Type:    "GroupNormalization",
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
		States:  map[int]string{1: "weight", 2: "bias"},
		Torch:   []Torch{{Name: "group_norm", States: []string{"weight", "bias"}}},
		Changes: changedAt(21), // v21: scale and bias became per channel
	},
	{
		Type:        "HardSigmoid",
		Torch:       []Torch{{Name: "hardsigmoid"}},
		Quant:       &Quant{Kind: Generic, Inputs: []int{0}},
		NonNegative: true,
		Intrinsic:   &Intrinsic{Scheme: spec.Asymmetric, Range: unitRange, What: "HardSigmoid output is in [0, 1]"},
		Changes:     unchanged,
	},
	{
		Type:    "HardSwish",
		Torch:   []Torch{{Name: "hardswish"}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: unchanged,
	},
	{Type: "Hardmax", Changes: changedAt(13)}, // v13: the 2-D coercion around axis was dropped
	{
		Type:    "Identity",
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: unchanged,
	},
	{Type: "If", Changes: unchanged},
	{
		Type:    "InstanceNormalization",
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
		States:  map[int]string{1: "weight", 2: "bias"},
		Torch:   []Torch{{Name: "instance_norm", States: []string{"weight", "bias"}}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: unchanged,
	},
	{
		Type:    "IsInf",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: unchanged,
	},
	{
		Type:    "IsNaN",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: unchanged,
	},
	{Type: "LRN", Changes: unchanged},
	{Type: "LSTM", Changes: unchanged},
	{
		Type:    "LayerNormalization",
		Inputs:  []string{"X", "Scale", "B"},
		Outputs: []string{"Y", "Mean", "InvStdDev"},
		Args:    [][]string{{"input"}, {"weight"}, {"bias"}},
		States:  map[int]string{1: "weight", 2: "bias"},
		Torch:   []Torch{{Name: "layer_norm", States: []string{"weight", "bias"}}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: unchanged,
	},
	{
		Type:    "LeakyRelu",
		Torch:   []Torch{{Name: "leaky_relu"}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: unchanged,
	},
	{
		Type:    "Less",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "LessOrEqual",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: unchanged,
	},
	{Type: "Log", Changes: unchanged},
	{
		Type:         "LogSoftmax",
		Inputs:       []string{"input"},
		Outputs:      []string{"output"},
		Torch:        []Torch{{Name: "log_softmax"}},
		DecidedByMax: true,
		Changes:      changedAt(13), // v13: the 2-D coercion around axis was dropped
	},
	{Type: "Loop", Changes: unchanged},
	{Type: "LpNormalization", Changes: unchanged},
	{Type: "LpPool", Changes: unchanged},
	{
		Type:    "MatMul",
		Inputs:  []string{"A", "B"},
		Outputs: []string{"Y"},
		Args:    [][]string{{"input", "self"}, {"other", "mat2"}},
		States:  map[int]string{1: "weight"},
		Torch:   []Torch{{Name: "bmm"}, {Name: "linear", If: constInput(1), States: []string{"weight", "bias"}}, {Name: "matmul", Preferred: true}, {Name: "mm"}},
		Quant:   &Quant{Kind: Compute, Inputs: []int{0, 1}, FusesActivation: true},
		Weight:  matMulAxes,
		Changes: unchanged,
	},
	{Type: "MatMulInteger", Changes: unchanged},
	{
		Type:    "Max",
		Args:    [][]string{{"input", "self"}, {"other"}},
		Torch:   []Torch{{Name: "maximum"}},
		Changes: changedAt(8), // v8: numpy broadcasting
	},
	{
		Type:             "MaxPool",
		Inputs:           []string{"X"},
		Outputs:          []string{"Y", "Indices"},
		Torch:            []Torch{{Name: "max_pool1d"}, {Name: "max_pool2d", Preferred: true}, {Name: "max_pool3d"}},
		Quant:            &Quant{Kind: Shared, Inputs: []int{0}},
		KeepsNonNegative: true,
		Changes:          unchanged,
	},
	{Type: "MaxRoiPool", Changes: unchanged},
	{Type: "MaxUnpool", Changes: unchanged},
	{Type: "Mean", Changes: changedAt(8)},                      // v8: numpy broadcasting
	{Type: "MeanVarianceNormalization", Changes: changedAt(9)}, // v9: axes replaced across_channels and normalize_variance
	{
		Type:    "Min",
		Args:    [][]string{{"input", "self"}, {"other"}},
		Torch:   []Torch{{Name: "minimum"}},
		Changes: changedAt(8), // v8: numpy broadcasting
	},
	{
		Type:    "Mish",
		Torch:   []Torch{{Name: "mish"}},
		Changes: unchanged,
	},
	{Type: "Mod", Changes: unchanged},
	{
		Type:    "Mul",
		Inputs:  []string{"A", "B"},
		Outputs: []string{"C"},
		Args:    [][]string{{"input", "self"}, {"other"}},
		Torch:   []Torch{{Name: "mul"}},
		Quant:   &Quant{Kind: Generic},
		Fusion:  FuseSigmoidMulTail,
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "Neg",
		Torch:   []Torch{{Name: "neg"}},
		Changes: unchanged,
	},
	{
		Type:    "NonMaxSuppression",
		Out:     OutType{Fixed: tensor.Int64},
		Changes: unchanged,
	},
	{
		Type:    "NonZero",
		Out:     OutType{Fixed: tensor.Int64},
		Changes: unchanged,
	},
	{
		Type:    "Not",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: unchanged,
	},
	{Type: "OneHot", Changes: unchanged},
	{
		Type:    "Or",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "PRelu",
		Args:    [][]string{{"input"}, {"weight"}},
		Torch:   []Torch{{Name: "prelu"}},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{
		Type:    "Pad",
		Torch:   []Torch{{Name: "pad"}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: changedAt(11), // v11: pads moved to an input
	},
	{
		Type:    "Pow",
		Inputs:  []string{"X", "Y"},
		Outputs: []string{"Z"},
		Args:    [][]string{{"input", "self"}, {"exponent"}},
		Torch:   []Torch{{Name: "pow"}},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{Type: "QLinearConv", Changes: unchanged},
	{Type: "QLinearMatMul", Changes: unchanged},
	{
		Type:    "QuantizeLinear",
		Out:     OutType{Unknown: true},
		Changes: unchanged,
		Fusion:  FuseRoundTrip,
	},
	{
		Type:    "RMSNormalization",
		Args:    [][]string{{"input"}, {"weight"}},
		States:  map[int]string{1: "weight"},
		Torch:   []Torch{{Name: "rms_norm", States: []string{"weight"}}},
		Changes: unchanged,
	},
	{Type: "RNN", Changes: unchanged},
	{Type: "Range", Changes: unchanged},
	{
		Type:    "Reciprocal",
		Torch:   []Torch{{Name: "rsqrt"}},
		Changes: unchanged,
	},
	{Type: "ReduceL1", Changes: changedAt(18)},        // v18: axes moved to an input
	{Type: "ReduceL2", Changes: changedAt(18)},        // v18: axes moved to an input
	{Type: "ReduceLogSum", Changes: changedAt(18)},    // v18: axes moved to an input
	{Type: "ReduceLogSumExp", Changes: changedAt(18)}, // v18: axes moved to an input
	{Type: "ReduceMax", Changes: changedAt(18)},       // v18: axes moved to an input
	{
		Type:    "ReduceMean",
		Torch:   []Torch{{Name: "mean", Preferred: true}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{0}},
		Changes: changedAt(18), // v18: axes moved to an input
	},
	{Type: "ReduceMin", Changes: changedAt(18)},  // v18: axes moved to an input
	{Type: "ReduceProd", Changes: changedAt(18)}, // v18: axes moved to an input
	{
		Type:    "ReduceSum",
		Torch:   []Torch{{Name: "sum"}},
		Changes: changedAt(13), // v13: axes moved to an input
	},
	{Type: "ReduceSumSquare", Changes: changedAt(18)}, // v18: axes moved to an input
	{
		Type:        "Relu",
		Inputs:      []string{"X"},
		Outputs:     []string{"Y"},
		Torch:       []Torch{{Name: "relu"}},
		Quant:       &Quant{Kind: Generic, Inputs: []int{0}, Activation: true},
		NonNegative: true,
		Intrinsic:   &Intrinsic{Scheme: spec.Asymmetric, What: "Relu output is non-negative"},
		Fusion:      FuseConvRelu,
		Changes:     unchanged,
	},
	{
		Type:    "Reshape",
		Inputs:  []string{"data", "shape"},
		Outputs: []string{"reshaped"},
		Args:    [][]string{{"input", "self"}, {"shape"}},
		Torch:   []Torch{{Name: "reshape", Preferred: true, Targets: []string{"view"}}, {Name: "view", Targets: []string{"reshape"}}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(5), // v5: shape moved to an input
	},
	{
		Type:    "Resize",
		Inputs:  []string{"X", "roi", "scales", "sizes"},
		Outputs: []string{"Y"},
		Torch:   []Torch{{Name: "interpolate", Preferred: true}, {Name: "upsample"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(11), // v11: the roi input was inserted before scales
	},
	{Type: "ReverseSequence", Changes: unchanged},
	{Type: "RoiAlign", Changes: changedAt(16)}, // v16: coordinate_transformation_mode, half_pixel by default
	{Type: "RotaryEmbedding", Changes: unchanged},
	{Type: "Round", Changes: unchanged},
	{Type: "Scan", Changes: changedAt(9)}, // v9: the batch axis was dropped
	{Type: "Scatter", Changes: unchanged},
	{Type: "ScatterElements", Changes: unchanged},
	{Type: "ScatterND", Changes: unchanged},
	{
		Type:    "Selu",
		Torch:   []Torch{{Name: "selu"}},
		Changes: unchanged,
	},
	{
		Type:    "Shape",
		Out:     OutType{Fixed: tensor.Int64},
		Changes: unchanged,
	},
	{Type: "Shrink", Changes: unchanged},
	{
		Type:        "Sigmoid",
		Inputs:      []string{"X"},
		Outputs:     []string{"Y"},
		Torch:       []Torch{{Name: "sigmoid"}},
		Quant:       &Quant{Kind: Generic, Inputs: []int{0}},
		Range:       unitRange,
		NonNegative: true,
		Intrinsic:   &Intrinsic{Scheme: spec.Asymmetric, Range: unitRange, What: "Sigmoid output is in [0, 1]"},
		Fusion:      FuseSigmoidMul,
		Changes:     unchanged,
	},
	{Type: "Sign", Changes: unchanged},
	{Type: "Sin", Changes: unchanged},
	{Type: "Sinh", Changes: unchanged},
	{
		Type:    "Size",
		Out:     OutType{Fixed: tensor.Int64},
		Changes: unchanged,
	},
	{
		Type:    "Slice",
		Torch:   []Torch{{Name: "slice"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(10), // v10: starts, ends and axes moved to inputs
	},
	{
		Type:         "Softmax",
		Inputs:       []string{"input"},
		Outputs:      []string{"output"},
		Torch:        []Torch{{Name: "softmax"}},
		Quant:        &Quant{Kind: Generic, Inputs: []int{0}},
		DecidedByMax: true,
		Range:        unitRange,
		NonNegative:  true,
		Intrinsic:    &Intrinsic{Scheme: spec.Asymmetric, Range: unitRange, What: "Softmax output is in [0, 1]"},
		Changes:      changedAt(13), // v13: the 2-D coercion around axis was dropped
	},
	{
		Type:    "Softplus",
		Torch:   []Torch{{Name: "softplus"}},
		Changes: unchanged,
	},
	{
		Type:    "Softsign",
		Torch:   []Torch{{Name: "softsign"}},
		Changes: unchanged,
	},
	{
		Type:    "SpaceToDepth",
		Torch:   []Torch{{Name: "pixel_unshuffle"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: unchanged,
	},
	{
		Type:    "Split",
		Inputs:  []string{"input", "split"},
		Outputs: []string{"outputs"},
		Args:    [][]string{{"input", "self"}, {"split_size_or_sections"}},
		Torch:   []Torch{{Name: "chunk"}, {Name: "split", Preferred: true, Targets: []string{"split_with_sizes"}}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}, AllOutputs: true},
		Changes: changedAt(13), // v13: split moved to an input
	},
	{
		Type:    "Sqrt",
		Torch:   []Torch{{Name: "sqrt"}},
		Changes: unchanged,
	},
	{
		Type:    "Squeeze",
		Torch:   []Torch{{Name: "squeeze"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(13), // v13: axes moved to an input
	},
	{
		Type:    "Sub",
		Inputs:  []string{"A", "B"},
		Outputs: []string{"C"},
		Args:    [][]string{{"input", "self"}, {"other"}},
		Torch:   []Torch{{Name: "sub"}},
		Quant:   &Quant{Kind: Generic},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
	{Type: "Sum", Changes: changedAt(8)}, // v8: numpy broadcasting
	{Type: "Tan", Changes: unchanged},
	{
		Type:      "Tanh",
		Inputs:    []string{"input"},
		Outputs:   []string{"output"},
		Torch:     []Torch{{Name: "tanh"}},
		Quant:     &Quant{Kind: Generic, Inputs: []int{0}},
		Range:     signedRange,
		Intrinsic: &Intrinsic{Scheme: spec.Symmetric, Range: signedRange, What: "Tanh output is in [-1, 1]"},
		Changes:   unchanged,
	},
	{Type: "ThresholdedRelu", Changes: unchanged},
	{
		Type:    "Tile",
		Torch:   []Torch{{Name: "tile"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(6), // v6: tiles and axis became the repeats input
	},
	{
		Type:    "TopK",
		Torch:   []Torch{{Name: "topk"}},
		Out:     OutType{Extra: map[int]tensor.DType{1: tensor.Int64}},
		Changes: changedAt(10), // v10: k moved to an input
	},
	{
		Type:    "Transpose",
		Inputs:  []string{"data"},
		Outputs: []string{"transposed"},
		Torch:   []Torch{{Name: "permute"}, {Name: "transpose", Preferred: true}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: unchanged,
	},
	{Type: "Trilu", Changes: unchanged},
	{
		Type:    "Unsqueeze",
		Torch:   []Torch{{Name: "unsqueeze"}},
		Quant:   &Quant{Kind: Shared, Inputs: []int{0}},
		Changes: changedAt(13), // v13: axes moved to an input
	},
	{Type: "Upsample", Changes: changedAt(10)}, // removed at v10
	{
		Type:    "Where",
		Inputs:  []string{"condition", "X", "Y"},
		Outputs: []string{"output"},
		Args:    [][]string{{"condition"}, {"input", "x", "self"}, {"other", "y"}},
		Torch:   []Torch{{Name: "where", Args: []string{"condition", "input", "other"}}},
		Quant:   &Quant{Kind: Generic, Inputs: []int{1, 2}},
		Out:     OutType{Input: 1},
		Changes: unchanged,
	},
	{
		Type:    "Xor",
		Out:     OutType{Fixed: tensor.Bool},
		Changes: changedAt(7), // v7: numpy broadcasting replaced the broadcast attribute
	},
}

var (
	unitRange   = &Range{Min: 0, Max: 1}
	signedRange = &Range{Min: -1, Max: 1}
)

// always is the condition of a torch name that holds for every node of
// the type but still ranks it above the plain names (linear for Gemm).
func always(*onnxgraph.Node) bool { return true }

// constInput holds when input i of the node is a constant.
func constInput(i int) func(n *onnxgraph.Node) bool {
	return func(n *onnxgraph.Node) bool {
		return i < len(n.Inputs) && n.Inputs[i] != nil && n.Inputs[i].IsConst()
	}
}

// weightRank holds when input 1 (the weight) has the given rank.
func weightRank(rank int) func(n *onnxgraph.Node) bool {
	return func(n *onnxgraph.Node) bool {
		if len(n.Inputs) < 2 || n.Inputs[1] == nil {
			return false
		}
		dims, ok := n.Inputs[1].Shape()
		return ok && len(dims) == rank
	}
}

// gemmAxes: a Gemm's weight is [N K] with transB=1 (a Linear), [K N]
// without.
var gemmAxes = &WeightAxes{
	Of: func(n *onnxgraph.Node, _ int) (int, int) {
		if a := n.Attr("transB"); a != nil && a.GetI() != 0 {
			return 0, 1
		}
		return 1, 0
	},
	Doc: "per_channel 0, per_block 1 (transB=1, a Linear); 1 and 0 with transB=0",
}

// matMulAxes: a MatMul's weight is [… K N].
var matMulAxes = &WeightAxes{
	Of:  func(_ *onnxgraph.Node, rank int) (int, int) { return rank - 1, rank - 2 },
	Doc: "per_channel rank−1, per_block rank−2",
}

// castTo is a Cast's `to` type.
func castTo(n *onnxgraph.Node) tensor.DType {
	if a := n.Attr("to"); a != nil {
		return tensor.DType(a.GetI())
	}
	return tensor.Undefined
}

// constantOfShapeType is the type of ConstantOfShape's `value`, float when
// it has none.
func constantOfShapeType(n *onnxgraph.Node) tensor.DType {
	if a := n.Attr("value"); a != nil && a.T != nil {
		return tensor.DType(a.T.GetDataType())
	}
	return tensor.Float
}

// clipLimit is the magnitude from which a Clip bound is read as "no
// bound" (exporters write ±FLT_MAX for a missing side).
const clipLimit = 1e30

// clipBounds reads a Clip's constant bounds: attributes before opset 11,
// inputs 1 and 2 from then on. A missing, non-constant or unbounded side
// is nil.
func clipBounds(m *onnxgraph.Model, n *onnxgraph.Node) (lo, hi *float32) {
	bound := func(attr string, input int) *float32 {
		var v float32
		if m.Opset("") < 11 {
			a := n.Attr(attr)
			if a == nil {
				return nil
			}
			v = a.GetF()
		} else {
			if input >= len(n.Inputs) || n.Inputs[input] == nil || !n.Inputs[input].IsConst() {
				return nil
			}
			t, err := tensor.FromProto(n.Inputs[input].Const, m)
			if err != nil {
				return nil
			}
			f, err := t.AsFloat32()
			if err != nil || len(f) != 1 {
				return nil
			}
			v = f[0]
		}
		if math.IsNaN(float64(v)) || math.Abs(float64(v)) >= clipLimit {
			return nil
		}
		return &v
	}
	return bound("min", 1), bound("max", 2)
}

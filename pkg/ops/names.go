package ops

import "strings"

// onnxTypes are the operator types of the default ONNX domain (through
// opset 23), entries or not: the valid exact op_type_config keys.
var onnxTypes = strings.Fields(`Abs Acos Acosh Add AffineGrid And ArgMax ArgMin Asin Asinh Atan Atanh
Attention AveragePool BatchNormalization Bernoulli BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor
BlackmanWindow Cast CastLike Ceil Celu CenterCropPad Clip Col2Im Compress Concat ConcatFromSequence
Constant ConstantOfShape Conv ConvInteger ConvTranspose Cos Cosh CumSum DFT DeformConv DepthToSpace
DequantizeLinear Det Div Dropout DynamicQuantizeLinear Einsum Elu Equal Erf Exp Expand EyeLike Flatten
Floor GRU Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater
GreaterOrEqual GridSample GroupNormalization HammingWindow HannWindow HardSigmoid HardSwish Hardmax
Identity If ImageDecoder InstanceNormalization IsInf IsNaN LRN LSTM LayerNormalization LeakyRelu Less
LessOrEqual Log LogSoftmax Loop LpNormalization LpPool MatMul MatMulInteger Max MaxPool MaxRoiPool
MaxUnpool Mean MeanVarianceNormalization MelWeightMatrix Min Mish Mod Mul Multinomial Neg
NegativeLogLikelihoodLoss NonMaxSuppression NonZero Not OneHot Optional OptionalGetElement
OptionalHasElement Or PRelu Pad Pow QLinearConv QLinearMatMul QuantizeLinear RMSNormalization RNN
RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2
ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare
RegexFullMatch Relu Reshape Resize ReverseSequence RoiAlign RotaryEmbedding Round STFT Scan Scatter
ScatterElements ScatterND Selu SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert
SequenceLength SequenceMap Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax
SoftmaxCrossEntropyLoss Softplus Softsign SpaceToDepth Split SplitToSequence Sqrt Squeeze StringConcat
StringNormalizer StringSplit Sub Sum Swish Tan Tanh TensorScatter TfIdfVectorizer ThresholdedRelu Tile
TopK Transpose Trilu Unique Unsqueeze Upsample Where Xor`)

var onnxTypeSet = func() map[string]bool {
	m := map[string]bool{}
	for _, op := range onnxTypes {
		m[op] = true
	}
	return m
}()

// IsONNX reports whether op is an operator type of the default ONNX
// domain.
func IsONNX(op string) bool { return onnxTypeSet[op] }

// ONNXTypes lists the default domain's operator types.
func ONNXTypes() []string { return append([]string(nil), onnxTypes...) }

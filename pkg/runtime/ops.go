package runtime

import (
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// maxOpset is the newest default-domain opset the engine knows.
const maxOpset = 25

// opDef is one supported op: the opset versions it covers and its builder,
// which reads the node's attributes once and returns the kernel.
type opDef struct {
	from, to int64 // supported default-domain opset range; to 0 means maxOpset
	build    func(b *builder) (kernel, error)
}

// simple wraps a kernel that needs no attributes.
func simple(k kernel) func(*builder) (kernel, error) {
	return func(*builder) (kernel, error) { return k, nil }
}

// opTable is the list of ops the built-in engine claims. The conformance
// test runs every ONNX node test of these ops.
var opTable map[string]opDef

func init() {
	opTable = map[string]opDef{
		"Abs":                       {1, 0, simple(unarySigned(func(x float32) float32 { return float32(math.Abs(float64(x))) }, func(x int64) int64 { return max(x, -x) }))},
		"Neg":                       {1, 0, simple(unarySigned(func(x float32) float32 { return -x }, func(x int64) int64 { return -x }))},
		"Sign":                      {9, 0, simple(unarySigned(sign[float32], sign[int64]))},
		"Ceil":                      {1, 0, simple(unaryFloat(via64(math.Ceil)))},
		"Floor":                     {1, 0, simple(unaryFloat(via64(math.Floor)))},
		"Round":                     {11, 0, simple(unaryFloat(via64(math.RoundToEven)))},
		"Exp":                       {1, 0, simple(unaryFloat(via64(math.Exp)))},
		"Log":                       {1, 0, simple(unaryFloat(via64(math.Log)))},
		"Sqrt":                      {1, 0, simple(unaryFloat(via64(math.Sqrt)))},
		"Reciprocal":                {1, 0, simple(unaryFloat(func(x float32) float32 { return 1 / x }))},
		"Sin":                       {7, 0, simple(unaryFloat(via64(math.Sin)))},
		"Cos":                       {7, 0, simple(unaryFloat(via64(math.Cos)))},
		"Tan":                       {7, 0, simple(unaryFloat(via64(math.Tan)))},
		"Asin":                      {7, 0, simple(unaryFloat(via64(math.Asin)))},
		"Acos":                      {7, 0, simple(unaryFloat(via64(math.Acos)))},
		"Atan":                      {7, 0, simple(unaryFloat(via64(math.Atan)))},
		"Sinh":                      {9, 0, simple(unaryFloat(via64(math.Sinh)))},
		"Cosh":                      {9, 0, simple(unaryFloat(via64(math.Cosh)))},
		"Asinh":                     {9, 0, simple(unaryFloat(via64(math.Asinh)))},
		"Acosh":                     {9, 0, simple(unaryFloat(via64(math.Acosh)))},
		"Atanh":                     {9, 0, simple(unaryFloat(via64(math.Atanh)))},
		"Tanh":                      {1, 0, simple(unaryFloatRows(kernels.Tanh))},
		"Erf":                       {9, 0, simple(unaryFloatRows(kernels.Erf))},
		"Sigmoid":                   {1, 0, simple(unaryFloatRows(kernels.Sigmoid))},
		"Relu":                      {1, 0, simple(signedKernel(unaryFloatRows(reluRow), func(x int64) int64 { return max(x, 0) }))},
		"Softplus":                  {1, 0, simple(unaryFloat(softplus))},
		"Softsign":                  {1, 0, simple(unaryFloat(func(x float32) float32 { return x / (1 + float32(math.Abs(float64(x)))) }))},
		"IsNaN":                     {9, 0, simple(isNaNKernel)},
		"IsInf":                     {10, 0, buildIsInf},
		"LeakyRelu":                 {1, 0, buildAlphaUnary("LeakyRelu", 0.01)},
		"Elu":                       {1, 0, buildAlphaUnary("Elu", 1)},
		"Celu":                      {12, 0, buildAlphaUnary("Celu", 1)},
		"Selu":                      {1, 0, buildSelu},
		"ThresholdedRelu":           {1, 0, buildAlphaUnary("ThresholdedRelu", 1)},
		"Affine":                    {1, 9, buildLegacyActivation("Affine")},
		"ScaledTanh":                {1, 9, buildLegacyActivation("ScaledTanh")},
		"ParametricSoftplus":        {1, 9, buildLegacyActivation("ParametricSoftplus")},
		"ImageScaler":               {1, 9, buildImageScaler},
		"Crop":                      {1, 9, buildCrop},
		"HardSigmoid":               {1, 0, buildHardSigmoid},
		"Shrink":                    {9, 0, buildShrink},
		"HardSwish":                 {14, 0, simple(unaryFloat(func(x float32) float32 { return x * min(max(x/6+0.5, 0), 1) }))},
		"Gelu":                      {20, 0, buildGelu},
		"Mish":                      {18, 0, simple(unaryFloat(func(x float32) float32 { return x * float32(math.Tanh(float64(softplus(x)))) }))},
		"Add":                       {1, 0, legacyBroadcast(simple(binaryKernel(addFuncs)))},
		"Sub":                       {1, 0, legacyBroadcast(simple(binaryKernel(subFuncs)))},
		"Mul":                       {1, 0, legacyBroadcast(simple(binaryKernel(mulFuncs)))},
		"Div":                       {1, 0, legacyBroadcast(simple(binaryKernel(divFuncs)))},
		"Pow":                       {1, 0, legacyBroadcast(simple(powKernel))},
		"Mod":                       {10, 0, func(b *builder) (kernel, error) { return binaryKernel(modFuncs(b.int("fmod", 0) != 0)), nil }},
		"Max":                       {1, 0, simple(variadicKernel(maxFuncs, false))},
		"Min":                       {1, 0, simple(variadicKernel(minFuncs, false))},
		"Sum":                       {1, 0, simple(variadicKernel(addFuncs, false))},
		"Mean":                      {1, 0, simple(variadicKernel(addFuncs, true))},
		"Equal":                     {1, 0, legacyBroadcast(simple(compareKernel(func(c int) bool { return c == 0 }, true)))},
		"Less":                      {1, 0, legacyBroadcast(simple(compareKernel(func(c int) bool { return c < 0 }, false)))},
		"LessOrEqual":               {12, 0, simple(compareKernel(func(c int) bool { return c <= 0 }, false))},
		"Greater":                   {1, 0, legacyBroadcast(simple(compareKernel(func(c int) bool { return c > 0 }, false)))},
		"GreaterOrEqual":            {12, 0, simple(compareKernel(func(c int) bool { return c >= 0 }, false))},
		"And":                       {1, 0, legacyBroadcast(simple(logicKernel(func(a, b bool) bool { return a && b })))},
		"Or":                        {1, 0, legacyBroadcast(simple(logicKernel(func(a, b bool) bool { return a || b })))},
		"Xor":                       {1, 0, legacyBroadcast(simple(logicKernel(func(a, b bool) bool { return a != b })))},
		"Not":                       {1, 0, simple(notKernel)},
		"Where":                     {9, 0, simple(whereKernel)},
		"Clip":                      {6, 0, buildClip},
		"Identity":                  {1, 0, simple(identityKernel)},
		"Dropout":                   {1, 0, buildDropout},
		"Constant":                  {1, 0, buildConstant},
		"Cast":                      {6, 0, buildCast},
		"CastLike":                  {15, 0, buildCastLike},
		"Shape":                     {1, 0, buildShape},
		"Size":                      {1, 0, simple(sizeKernel)},
		"Reshape":                   {5, 0, buildReshape},
		"Flatten":                   {1, 0, buildFlatten},
		"Squeeze":                   {1, 0, buildSqueeze},
		"Unsqueeze":                 {1, 0, buildUnsqueeze},
		"Transpose":                 {1, 0, buildTranspose},
		"Concat":                    {4, 0, buildConcat},
		"Split":                     {2, 0, buildSplit},
		"Slice":                     {1, 0, buildSlice},
		"Gather":                    {1, 0, buildGather},
		"GatherElements":            {11, 0, buildGatherElements},
		"GatherND":                  {11, 0, buildGatherND},
		"Compress":                  {9, 0, buildCompress},
		"ReverseSequence":           {10, 0, buildReverseSequence},
		"ScatterND":                 {11, 0, buildScatterND},
		"ScatterElements":           {11, 0, buildScatterElements},
		"Expand":                    {8, 0, simple(expandKernel)},
		"Tile":                      {6, 0, simple(tileKernel)},
		"ConstantOfShape":           {9, 0, buildConstantOfShape},
		"Range":                     {11, 0, simple(rangeKernel)},
		"NonZero":                   {9, 0, simple(nonZeroKernel)},
		"Trilu":                     {14, 0, buildTrilu},
		"EyeLike":                   {9, 0, buildEyeLike},
		"CumSum":                    {11, 0, buildCumSum},
		"DepthToSpace":              {1, 0, buildDepthToSpace},
		"SpaceToDepth":              {1, 0, buildSpaceToDepth},
		"Pad":                       {2, 0, buildPad},
		"MatMul":                    {1, 0, buildMatMul},
		"Gemm":                      {1, 0, buildGemm},
		"Conv":                      {1, 0, buildConv},
		"ConvTranspose":             {1, 0, buildConvTranspose},
		"MaxPool":                   {1, 0, buildPool(true)},
		"AveragePool":               {1, 0, buildPool(false)},
		"GlobalAveragePool":         {1, 0, simple(globalPoolKernel(false))},
		"GlobalMaxPool":             {1, 0, simple(globalPoolKernel(true))},
		"BatchNormalization":        {1, 0, buildBatchNorm},
		"InstanceNormalization":     {1, 0, buildInstanceNorm},
		"GroupNormalization":        {18, 0, buildGroupNorm},
		"LayerNormalization":        {17, 0, buildLayerNorm},
		"RMSNormalization":          {23, 0, buildRMSNorm},
		"MeanVarianceNormalization": {9, 0, buildMVN},
		"LRN":                       {1, 0, buildLRN},
		"Softmax":                   {1, 0, buildSoftmax(false)},
		"LogSoftmax":                {1, 0, buildSoftmax(true)},
		"Hardmax":                   {1, 0, buildHardmax},
		"PRelu":                     {1, 0, simple(preluKernel)},
		"ReduceSum":                 {1, 0, buildReduce("ReduceSum")},
		"ReduceMean":                {1, 0, buildReduce("ReduceMean")},
		"ReduceMax":                 {1, 0, buildReduce("ReduceMax")},
		"ReduceMin":                 {1, 0, buildReduce("ReduceMin")},
		"ReduceProd":                {1, 0, buildReduce("ReduceProd")},
		"ReduceL1":                  {1, 0, buildReduce("ReduceL1")},
		"ReduceL2":                  {1, 0, buildReduce("ReduceL2")},
		"ReduceSumSquare":           {1, 0, buildReduce("ReduceSumSquare")},
		"ReduceLogSum":              {1, 0, buildReduce("ReduceLogSum")},
		"ReduceLogSumExp":           {1, 0, buildReduce("ReduceLogSumExp")},
		"ArgMax":                    {1, 0, buildArg(true)},
		"ArgMin":                    {1, 0, buildArg(false)},
		"TopK":                      {1, 0, buildTopK},
		"LSTM":                      {7, 0, buildLSTM},
		"GRU":                       {7, 0, buildGRU},
		"RNN":                       {7, 0, buildRNN},
		"QuantizeLinear":            {10, 0, buildQuantize},
		"DequantizeLinear":          {10, 0, buildDequantize},
		"Resize":                    {10, 0, buildResize},
		"Upsample":                  {7, 9, buildUpsample},
		"Einsum":                    {12, 0, buildEinsum},
		"If":                        {1, 0, buildIf},
		"Loop":                      {1, 0, buildLoop},
		"OneHot":                    {9, 0, buildOneHot},
		"NonMaxSuppression":         {10, 0, buildNMS},
		"GridSample":                {16, 0, buildGridSample},
		"RoiAlign":                  {10, 0, buildRoiAlign},
		"RotaryEmbedding":           {23, 0, buildRotaryEmbedding},
		"Attention":                 {23, 23, buildAttention}, // 24 added nonpad_kv_seqlen, 25 changed it again
		"Scan":                      {9, 0, buildScan},
	}
}

// legacyBroadcast adapts the binary ops of opsets before 7, whose B is
// broadcast to A only with broadcast=1, aligned at axis (or at the end).
func legacyBroadcast(build func(*builder) (kernel, error)) func(*builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		k, err := build(b)
		if err != nil || b.opset >= 7 {
			return k, err
		}
		bcast := b.int("broadcast", 0) != 0
		axis, hasAxis := b.int("axis", 0), b.has("axis")
		return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
			a, y := in[0], in[1]
			if !bcast {
				if !slices.Equal(a.Shape, y.Shape) && y.Len() != 1 {
					return nil, fmt.Errorf("shapes %v and %v differ and broadcast is not set", a.Shape, y.Shape)
				}
				return k(rc, in)
			}
			if hasAxis {
				ax, err := normAxis(axis, len(a.Shape))
				if err != nil {
					return nil, err
				}
				shape := slices.Clone(y.Shape)
				for len(shape)+ax < len(a.Shape) {
					shape = append(shape, 1)
				}
				y = view(y, shape)
			}
			return k(rc, []*tensor.Tensor{a, y})
		}, nil
	}
}

// builder gives an op builder the node and its attributes.
type builder struct {
	c     *compiler
	n     *onnxgraph.Node
	opset int64
}

// build chooses the kernel for n, or returns a *featureError naming what
// is not supported.
func (c *compiler) build(n *onnxgraph.Node) (kernel, error) {
	if n.Domain != "" {
		if build, ok := contribOps[n.Domain][n.OpType]; ok {
			return build(&builder{c: c, n: n, opset: n.Opset()})
		}
		if f := c.model.Function(n.Proto.GetDomain(), n.OpType); f != nil {
			return nil, unsupportedf("model-local functions are not supported")
		}
		return nil, unsupportedf("domain %q is not supported", n.Domain)
	}
	def, ok := opTable[n.OpType]
	if !ok {
		if f := c.model.Function(n.Proto.GetDomain(), n.OpType); f != nil {
			return nil, unsupportedf("model-local functions are not supported")
		}
		return nil, unsupportedf("op type %s is not supported", n.OpType)
	}
	opset := n.Opset()
	if opset == 0 {
		return nil, unsupportedf("the model imports no opset for the default domain")
	}
	to := def.to
	if to == 0 {
		to = maxOpset
	}
	if opset < def.from || opset > to {
		return nil, unsupportedf("opset %d is not supported (supported: %d to %d)", opset, def.from, to)
	}
	return def.build(&builder{c: c, n: n, opset: opset})
}

func (b *builder) attr(name string) *onnxpb.AttributeProto { return b.n.Attr(name) }

func (b *builder) has(name string) bool { return b.n.Attr(name) != nil }

func (b *builder) int(name string, def int64) int64 {
	if a := b.attr(name); a != nil {
		return a.GetI()
	}
	return def
}

func (b *builder) float(name string, def float32) float32 {
	if a := b.attr(name); a != nil {
		return a.GetF()
	}
	return def
}

func (b *builder) str(name, def string) string {
	if a := b.attr(name); a != nil {
		return string(a.GetS())
	}
	return def
}

func (b *builder) ints(name string) []int64 {
	if a := b.attr(name); a != nil {
		return a.GetInts()
	}
	return nil
}

func (b *builder) floats(name string) []float32 {
	if a := b.attr(name); a != nil {
		return a.GetFloats()
	}
	return nil
}

// inputCount is the number of inputs the node lists (omitted ones included).
func (b *builder) inputCount() int { return len(b.n.Inputs) }

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(axis int64, rank int) (int, error) {
	a := int(axis)
	if a < 0 {
		a += rank
	}
	if a < 0 || a >= rank {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", axis, rank)
	}
	return a, nil
}

func one(t *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{t} }

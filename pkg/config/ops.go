package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// onnxOps are the operator types of the default ONNX domain (through opset
// 23), the valid exact op_type_config keys.
var onnxOps = strings.Fields(`Abs Acos Acosh Add AffineGrid And ArgMax ArgMin Asin Asinh Atan Atanh
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

var onnxOpSet = func() map[string]bool {
	m := map[string]bool{}
	for _, op := range onnxOps {
		m[op] = true
	}
	return m
}()

// opAlias maps a torch functional name (the guide's op type keys) onto ONNX
// nodes. match, when set, narrows the op types by the node's inputs.
// args and states name the op's torch arguments in order, activations and
// constants apart, for an op exported as several ONNX nodes (a Linear on a
// 3-D input is MatMul + Add): its external activation inputs take args by
// first use, its constant inputs take states in the order the nodes read
// them. Unset, they are "input", "other" and no state names.
type opAlias struct {
	ops    []string
	match  func(n *onnxgraph.Node) bool
	args   []string
	states []string
}

func constInput(i int) func(n *onnxgraph.Node) bool {
	return func(n *onnxgraph.Node) bool {
		return i < len(n.Inputs) && n.Inputs[i] != nil && n.Inputs[i].IsConst()
	}
}

func weightRank(rank int) func(n *onnxgraph.Node) bool {
	return func(n *onnxgraph.Node) bool {
		if len(n.Inputs) < 2 || n.Inputs[1] == nil {
			return false
		}
		dims, ok := n.Inputs[1].Shape()
		return ok && len(dims) == rank
	}
}

var weightBias = []string{"weight", "bias"}

var opAliases = map[string]opAlias{
	"linear": {ops: []string{"Gemm", "MatMul"}, match: func(n *onnxgraph.Node) bool {
		return n.OpType == "Gemm" || constInput(1)(n)
	}, states: weightBias},
	"conv1d":                       {ops: []string{"Conv"}, match: weightRank(3), states: weightBias},
	"conv2d":                       {ops: []string{"Conv"}, match: weightRank(4), states: weightBias},
	"conv3d":                       {ops: []string{"Conv"}, match: weightRank(5), states: weightBias},
	"conv_transpose1d":             {ops: []string{"ConvTranspose"}, match: weightRank(3), states: weightBias},
	"conv_transpose2d":             {ops: []string{"ConvTranspose"}, match: weightRank(4), states: weightBias},
	"conv_transpose3d":             {ops: []string{"ConvTranspose"}, match: weightRank(5), states: weightBias},
	"embedding":                    {ops: []string{"Gather"}, match: constInput(0), states: []string{"weight"}},
	"matmul":                       {ops: []string{"MatMul"}},
	"bmm":                          {ops: []string{"MatMul"}},
	"mm":                           {ops: []string{"MatMul"}},
	"softmax":                      {ops: []string{"Softmax"}},
	"log_softmax":                  {ops: []string{"LogSoftmax"}},
	"add":                          {ops: []string{"Add"}},
	"sub":                          {ops: []string{"Sub"}},
	"mul":                          {ops: []string{"Mul"}},
	"div":                          {ops: []string{"Div"}},
	"pow":                          {ops: []string{"Pow"}},
	"concat":                       {ops: []string{"Concat"}, args: []string{"tensors"}},
	"cat":                          {ops: []string{"Concat"}, args: []string{"tensors"}},
	"max_pool1d":                   {ops: []string{"MaxPool"}},
	"max_pool2d":                   {ops: []string{"MaxPool"}},
	"max_pool3d":                   {ops: []string{"MaxPool"}},
	"avg_pool1d":                   {ops: []string{"AveragePool"}},
	"avg_pool2d":                   {ops: []string{"AveragePool"}},
	"avg_pool3d":                   {ops: []string{"AveragePool"}},
	"adaptive_avg_pool1d":          {ops: []string{"GlobalAveragePool"}},
	"adaptive_avg_pool2d":          {ops: []string{"GlobalAveragePool"}},
	"adaptive_avg_pool3d":          {ops: []string{"GlobalAveragePool"}},
	"layer_norm":                   {ops: []string{"LayerNormalization"}, states: weightBias},
	"batch_norm":                   {ops: []string{"BatchNormalization"}, states: []string{"weight", "bias", "running_mean", "running_var"}},
	"group_norm":                   {ops: []string{"GroupNormalization"}, states: weightBias},
	"instance_norm":                {ops: []string{"InstanceNormalization"}, states: weightBias},
	"rms_norm":                     {ops: []string{"RMSNormalization"}, states: []string{"weight"}},
	"relu":                         {ops: []string{"Relu"}},
	"gelu":                         {ops: []string{"Gelu"}},
	"sigmoid":                      {ops: []string{"Sigmoid"}},
	"tanh":                         {ops: []string{"Tanh"}},
	"leaky_relu":                   {ops: []string{"LeakyRelu"}},
	"elu":                          {ops: []string{"Elu"}},
	"selu":                         {ops: []string{"Selu"}},
	"celu":                         {ops: []string{"Celu"}},
	"prelu":                        {ops: []string{"PRelu"}},
	"mish":                         {ops: []string{"Mish"}},
	"hardswish":                    {ops: []string{"HardSwish"}},
	"hardsigmoid":                  {ops: []string{"HardSigmoid"}},
	"softplus":                     {ops: []string{"Softplus"}},
	"softsign":                     {ops: []string{"Softsign"}},
	"clamp":                        {ops: []string{"Clip"}},
	"clip":                         {ops: []string{"Clip"}},
	"hardtanh":                     {ops: []string{"Clip"}},
	"relu6":                        {ops: []string{"Clip"}},
	"reshape":                      {ops: []string{"Reshape"}},
	"view":                         {ops: []string{"Reshape"}},
	"flatten":                      {ops: []string{"Flatten"}},
	"transpose":                    {ops: []string{"Transpose"}},
	"permute":                      {ops: []string{"Transpose"}},
	"squeeze":                      {ops: []string{"Squeeze"}},
	"unsqueeze":                    {ops: []string{"Unsqueeze"}},
	"split":                        {ops: []string{"Split"}},
	"chunk":                        {ops: []string{"Split"}},
	"interpolate":                  {ops: []string{"Resize"}},
	"upsample":                     {ops: []string{"Resize"}},
	"pad":                          {ops: []string{"Pad"}},
	"mean":                         {ops: []string{"ReduceMean"}},
	"sum":                          {ops: []string{"ReduceSum"}},
	"erf":                          {ops: []string{"Erf"}},
	"exp":                          {ops: []string{"Exp"}},
	"sqrt":                         {ops: []string{"Sqrt"}},
	"rsqrt":                        {ops: []string{"Reciprocal"}},
	"abs":                          {ops: []string{"Abs"}},
	"neg":                          {ops: []string{"Neg"}},
	"where":                        {ops: []string{"Where"}, args: []string{"condition", "input", "other"}},
	"gather":                       {ops: []string{"Gather"}},
	"index_select":                 {ops: []string{"Gather"}},
	"dropout":                      {ops: []string{"Dropout"}},
	"maximum":                      {ops: []string{"Max"}},
	"minimum":                      {ops: []string{"Min"}},
	"einsum":                       {ops: []string{"Einsum"}},
	"cumsum":                       {ops: []string{"CumSum"}},
	"topk":                         {ops: []string{"TopK"}},
	"argmax":                       {ops: []string{"ArgMax"}},
	"argmin":                       {ops: []string{"ArgMin"}},
	"pixel_shuffle":                {ops: []string{"DepthToSpace"}},
	"pixel_unshuffle":              {ops: []string{"SpaceToDepth"}},
	"scaled_dot_product_attention": {ops: []string{"Attention"}},
	"expand":                       {ops: []string{"Expand"}},
	"tile":                         {ops: []string{"Tile"}},
	"slice":                        {ops: []string{"Slice"}},
}

// opTypeKeys lists every valid op_type_config key, for hints.
func opTypeKeys() []string {
	keys := append([]string(nil), onnxOps...)
	for k := range opAliases {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// opTypeOfKey is the op type an op_type_config key stands for: the torch
// op type of a torch/aten name, else the key itself.
func opTypeOfKey(key string) string {
	if t, ok := torchOpType(key); ok {
		return t
	}
	return key
}

// validOpTypeKey reports whether key names ONNX nodes: an ONNX op type, a
// torch alias, or "domain.OpType" for a custom domain.
func validOpTypeKey(key string) bool {
	if onnxOpSet[key] {
		return true
	}
	if _, ok := opAliases[key]; ok {
		return true
	}
	if _, ok := opSynonyms[key]; ok {
		return true
	}
	if _, ok := torchOpType(key); ok {
		return true
	}
	i := strings.LastIndex(key, ".")
	return i > 0 && i < len(key)-1
}

// exactOpType reports whether key is n's ONNX op type ("domain.OpType"
// outside the default domain).
func exactOpType(key string, n *onnxgraph.Node) bool {
	if n.Domain != "" {
		return key == n.Domain+"."+n.OpType
	}
	return key == n.OpType
}

// opSchemas names the inputs and outputs of common ops (the ONNX schema
// names), so that op_input_spec/op_output_spec keys like "X" work. Variadic
// inputs share the last name.
var opSchemas = map[string]struct{ in, out []string }{
	"Conv":               {[]string{"X", "W", "B"}, []string{"Y"}},
	"ConvTranspose":      {[]string{"X", "W", "B"}, []string{"Y"}},
	"Gemm":               {[]string{"A", "B", "C"}, []string{"Y"}},
	"MatMul":             {[]string{"A", "B"}, []string{"Y"}},
	"Add":                {[]string{"A", "B"}, []string{"C"}},
	"Sub":                {[]string{"A", "B"}, []string{"C"}},
	"Mul":                {[]string{"A", "B"}, []string{"C"}},
	"Div":                {[]string{"A", "B"}, []string{"C"}},
	"Pow":                {[]string{"X", "Y"}, []string{"Z"}},
	"Softmax":            {[]string{"input"}, []string{"output"}},
	"LogSoftmax":         {[]string{"input"}, []string{"output"}},
	"Relu":               {[]string{"X"}, []string{"Y"}},
	"Sigmoid":            {[]string{"X"}, []string{"Y"}},
	"Tanh":               {[]string{"input"}, []string{"output"}},
	"Gelu":               {[]string{"X"}, []string{"Y"}},
	"Erf":                {[]string{"input"}, []string{"output"}},
	"Concat":             {[]string{"inputs"}, []string{"concat_result"}},
	"MaxPool":            {[]string{"X"}, []string{"Y", "Indices"}},
	"AveragePool":        {[]string{"X"}, []string{"Y"}},
	"GlobalAveragePool":  {[]string{"X"}, []string{"Y"}},
	"LayerNormalization": {[]string{"X", "Scale", "B"}, []string{"Y", "Mean", "InvStdDev"}},
	"BatchNormalization": {[]string{"X", "scale", "B", "input_mean", "input_var"}, []string{"Y", "running_mean", "running_var"}},
	"Gather":             {[]string{"data", "indices"}, []string{"output"}},
	"Reshape":            {[]string{"data", "shape"}, []string{"reshaped"}},
	"Transpose":          {[]string{"data"}, []string{"transposed"}},
	"Flatten":            {[]string{"input"}, []string{"output"}},
	"Clip":               {[]string{"input", "min", "max"}, []string{"output"}},
	"Resize":             {[]string{"X", "roi", "scales", "sizes"}, []string{"Y"}},
	"Split":              {[]string{"input", "split"}, []string{"outputs"}},
	"Where":              {[]string{"condition", "X", "Y"}, []string{"output"}},
}

// torchArgNames names the inputs of an ONNX node exported from one torch op
// by the op's torch arguments, by ONNX input position (so that the guide's
// op_input_spec/op_state_spec keys such as input, other, weight and bias
// work). A position may have synonyms: torch.where's older (condition, x, y)
// and aten's self. Ops not listed name input 0 "input" and leave the others
// (axes, shapes) to index keys. A Gather on a constant table (embedding) is handled by
// nodeTorchArgs: its ONNX inputs are (weight, input).
var torchArgNames = map[string][][]string{
	"Conv":                  {{"input"}, {"weight"}, {"bias"}},
	"ConvTranspose":         {{"input"}, {"weight"}, {"bias"}},
	"Gemm":                  {{"input"}, {"weight"}, {"bias"}},
	"MatMul":                {{"input", "self"}, {"other", "mat2"}},
	"Add":                   {{"input", "self"}, {"other"}},
	"Sub":                   {{"input", "self"}, {"other"}},
	"Mul":                   {{"input", "self"}, {"other"}},
	"Div":                   {{"input", "self"}, {"other"}},
	"Pow":                   {{"input", "self"}, {"exponent"}},
	"Max":                   {{"input", "self"}, {"other"}},
	"Min":                   {{"input", "self"}, {"other"}},
	"Where":                 {{"condition"}, {"input", "x", "self"}, {"other", "y"}},
	"Concat":                {{"tensors"}},
	"Clip":                  {{"input", "self"}, {"min"}, {"max"}},
	"Reshape":               {{"input", "self"}, {"shape"}},
	"Split":                 {{"input", "self"}, {"split_size_or_sections"}},
	"Gather":                {{"input", "self"}, {"index"}},
	"LayerNormalization":    {{"input"}, {"weight"}, {"bias"}},
	"GroupNormalization":    {{"input"}, {"weight"}, {"bias"}},
	"InstanceNormalization": {{"input"}, {"weight"}, {"bias"}},
	"RMSNormalization":      {{"input"}, {"weight"}},
	"BatchNormalization":    {{"input"}, {"weight"}, {"bias"}, {"running_mean"}, {"running_var"}},
	"PRelu":                 {{"input"}, {"weight"}},
}

// nodeTorchArgs returns the torch argument names of input i of a node that
// is a whole torch op by itself.
func nodeTorchArgs(n *onnxgraph.Node, i int) []string {
	if n.Domain != "" {
		return nil
	}
	if n.OpType == "Gather" && constInput(0)(n) {
		return [][]string{{"weight"}, {"input"}}[min(i, 1)]
	}
	if names, ok := torchArgNames[n.OpType]; ok {
		return names[min(i, len(names)-1)]
	}
	if i == 0 {
		return []string{"input", "self"}
	}
	return nil
}

// outputNames are the torch names every op's output 0 answers to.
var outputNames = []string{"output", "out"}

// knownTensorNames lists every name key an op_*_spec or module_*_spec may
// use on some op, for validation and hints: ONNX schema names, torch
// argument names, state names.
func knownTensorNames() []string {
	set := map[string]bool{}
	for _, s := range opSchemas {
		for _, n := range append(append([]string(nil), s.in...), s.out...) {
			set[n] = true
		}
	}
	for _, list := range torchArgNames {
		for _, names := range list {
			for _, n := range names {
				set[n] = true
			}
		}
	}
	for _, a := range opAliases {
		for _, n := range append(append([]string(nil), a.args...), a.states...) {
			set[n] = true
		}
	}
	for _, n := range append([]string{"input", "other", "self"}, outputNames...) {
		set[n] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// validTensorName reports whether key may name a tensor slot: a known name
// or input_<i>/output_<i>.
func validTensorName(key string) bool {
	for _, p := range []string{"input_", "output_"} {
		if rest, ok := strings.CutPrefix(key, p); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return true
		}
	}
	for _, n := range knownTensorNames() {
		if n == key {
			return true
		}
	}
	return false
}

// torchOpType is the op type a torch op name stands for, by the guide's
// rule (the part after the last period) extended to aten targets, whose
// last part is the overload: "torch.add" and "torch.nn.functional.add" are
// add, "aten.linear.default" and "torch.ops.aten.linear.default" are
// linear. A leading underscore of an aten op is dropped (aten._softmax is
// softmax). ok is false for a key that is not a torch name.
func torchOpType(key string) (string, bool) {
	k := strings.TrimPrefix(key, "torch.ops.")
	if rest, ok := strings.CutPrefix(k, "aten."); ok {
		name, _, _ := strings.Cut(rest, ".")
		return strings.TrimLeft(name, "_"), name != ""
	}
	if strings.HasPrefix(k, "torch.") {
		name := k[strings.LastIndex(k, ".")+1:]
		return name, name != ""
	}
	return "", false
}

// opSynonyms are torch op names that stand for the same op as another key.
var opSynonyms = map[string][]string{
	"cat":              {"concat"},
	"concat":           {"cat"},
	"clamp":            {"clip"},
	"clip":             {"clamp"},
	"split_with_sizes": {"split"},
	"view":             {"reshape"},
	"reshape":          {"view"},
}

// tensorNames are the names an op_input_spec/op_output_spec key may use for
// tensor i of n: "input_<pos>"/"output_<pos>" for its position pos in the
// op call, and the ONNX schema name when n is the whole call.
func tensorNames(n *onnxgraph.Node, output bool, i, pos int, whole bool) []string {
	prefix := "input_"
	if output {
		prefix = "output_"
	}
	var names []string
	if pos >= 0 {
		names = append(names, fmt.Sprintf("%s%d", prefix, pos))
	}
	if s, ok := opSchemas[n.OpType]; ok && n.Domain == "" && whole {
		list := s.in
		if output {
			list = s.out
		}
		if len(list) > 0 {
			names = append(names, list[min(i, len(list)-1)])
		}
	}
	return names
}

// stateName names a constant input of n for op_state_spec: "weight" is
// input 1 of Conv/ConvTranspose/Gemm/MatMul, the table of a Gather on an
// initializer and the scale of normalisation ops; "bias" is input 2 (and
// the shift of normalisation ops); batch norm statistics are
// "running_mean"/"running_var". Other constants have no name and only "*"
// selects them.
func stateName(n *onnxgraph.Node, i int) string {
	if n.Domain != "" {
		return ""
	}
	switch n.OpType {
	case "Conv", "ConvTranspose", "Gemm", "MatMul":
		switch i {
		case 1:
			return "weight"
		case 2:
			if n.OpType != "MatMul" {
				return "bias"
			}
		}
	case "Gather":
		if i == 0 {
			return "weight"
		}
	case "LayerNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization", "BatchNormalization":
		switch i {
		case 1:
			return "weight"
		case 2:
			return "bias"
		case 3:
			if n.OpType == "BatchNormalization" {
				return "running_mean"
			}
		case 4:
			if n.OpType == "BatchNormalization" {
				return "running_var"
			}
		}
	}
	return ""
}

// defaultAxis is the guide's default weight axis for per-channel and
// per-block granularity, translated to ONNX layouts:
//
//	op                         weight        per_channel  per_block
//	Conv                       [Cout Cin K…]  0            1
//	ConvTranspose              [Cin Cout K…]  1            0
//	Gemm transB=1 (Linear)     [N K]          0            1
//	Gemm transB=0              [K N]          1            0
//	MatMul                     [… K N]        rank−1       rank−2
//	Gather (embedding)         [V D]          0            1
//
// A rank-1 state tensor (normalisation scales, biases) has one axis, 0.
// ok is false for anything else: an axis must be given.
func defaultAxis(n *onnxgraph.Node, input int, rank int, g spec.GranularityType) (axis int, ok bool) {
	block := g == spec.PerBlock
	pick := func(channel, blk int) (int, bool) {
		if block {
			return blk, true
		}
		return channel, true
	}
	if n.Domain == "" && stateName(n, input) == "weight" && rank >= 2 {
		switch n.OpType {
		case "Conv":
			return pick(0, 1)
		case "ConvTranspose":
			return pick(1, 0)
		case "Gemm":
			if a := n.Attr("transB"); a != nil && a.GetI() != 0 {
				return pick(0, 1)
			}
			return pick(1, 0)
		case "MatMul":
			return pick(rank-1, rank-2)
		case "Gather":
			return pick(0, 1)
		}
	}
	if rank == 1 {
		return 0, true
	}
	return 0, false
}

// OpNames describes how the config language names one ONNX op type, for
// `coreaiq ops`.
type OpNames struct {
	// TorchTypes are the op_type_config keys besides the ONNX op type.
	TorchTypes []string
	// Inputs are the key names of each input position: torch argument
	// names, then the ONNX schema name.
	Inputs [][]string
	// WeightAxes are the default per_channel and per_block axes of the
	// weight, as the guide's tables translated to ONNX layouts; "" when the
	// op has no weight.
	WeightAxes string
}

// weightAxesText states defaultAxis for each op with a weight.
var weightAxesText = map[string]string{
	"Conv":          "per_channel 0, per_block 1",
	"ConvTranspose": "per_channel 1, per_block 0",
	"Gemm":          "per_channel 0, per_block 1 (transB=1, a Linear); 1 and 0 with transB=0",
	"MatMul":        "per_channel rank−1, per_block rank−2",
	"Gather":        "per_channel 0, per_block 1 (embedding table)",
}

// NamesOf returns how configs name op type op and its tensors; inputs is
// the number of input positions to describe.
func NamesOf(op string, inputs int) OpNames {
	var o OpNames
	for key, a := range opAliases {
		for _, x := range a.ops {
			if x == op {
				o.TorchTypes = append(o.TorchTypes, key)
			}
		}
	}
	sort.Strings(o.TorchTypes)
	schema := opSchemas[op]
	for i := 0; i < inputs; i++ {
		var names []string
		if list, ok := torchArgNames[op]; ok {
			names = append(names, list[min(i, len(list)-1)]...)
		} else if i == 0 {
			names = append(names, "input")
		}
		if len(schema.in) > 0 {
			names = append(names, schema.in[min(i, len(schema.in)-1)])
		}
		var uniq []string
		for _, n := range names {
			if !contains(uniq, n) {
				uniq = append(uniq, n)
			}
		}
		o.Inputs = append(o.Inputs, uniq)
	}
	o.WeightAxes = weightAxesText[op]
	return o
}

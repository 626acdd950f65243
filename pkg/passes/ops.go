package passes

import "github.com/coreaiq/coreaiq/pkg/finalize"

// opKind is how an op's tensors are quantized.
type opKind uint8

const (
	// opCompute ops (Conv, Gemm, MatMul) have a weight, an optional int32
	// bias and quantized activations in and out.
	opCompute opKind = iota
	// opGeneric ops quantize each float input and output with its own
	// qparams.
	opGeneric
	// opShared ops move data without changing values: the output reuses
	// the qparams of input 0, so ONNX Runtime can drop the Q/DQ around them.
	opShared
)

// opRule is the quantization rule of one ONNX op type.
type opRule struct {
	kind opKind
	// inputs are the activation inputs that may be quantized; nil means all.
	inputs []int
	// allOutputs quantizes every output (Split); otherwise output 0 only.
	allOutputs bool
	// fixed is the known output range (Softmax, Sigmoid, Tanh).
	fixed *finalize.Range
	// bias is the input index of an int32 bias, -1 for none.
	bias int
	// fusesRelu: a Relu or Clip that alone consumes the output is fused
	// into the op (torch and ONNX Runtime), so no Q/DQ goes between them.
	fusesRelu bool
}

var (
	unitRange   = &finalize.Range{Min: 0, Max: 1}
	signedRange = &finalize.Range{Min: -1, Max: 1}
)

// opRules is the registry: one line per supported op type. Ops not listed
// run in float and are reported as skipped.
var opRules = map[string]opRule{
	"Conv":          {kind: opCompute, inputs: []int{0}, bias: 2, fusesRelu: true},
	"ConvTranspose": {kind: opCompute, inputs: []int{0}, bias: 2, fusesRelu: true},
	"Gemm":          {kind: opCompute, inputs: []int{0, 1}, bias: 2, fusesRelu: true},
	"MatMul":        {kind: opCompute, inputs: []int{0, 1}, bias: -1, fusesRelu: true},

	"Add":                   {kind: opGeneric, bias: -1, fusesRelu: true},
	"Sub":                   {kind: opGeneric, bias: -1},
	"Mul":                   {kind: opGeneric, bias: -1},
	"Div":                   {kind: opGeneric, bias: -1},
	"Concat":                {kind: opGeneric, bias: -1},
	"AveragePool":           {kind: opGeneric, inputs: []int{0}, bias: -1},
	"GlobalAveragePool":     {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Relu":                  {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Clip":                  {kind: opGeneric, inputs: []int{0}, bias: -1},
	"LeakyRelu":             {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Gelu":                  {kind: opGeneric, inputs: []int{0}, bias: -1},
	"HardSigmoid":           {kind: opGeneric, inputs: []int{0}, bias: -1},
	"HardSwish":             {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Pad":                   {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Where":                 {kind: opGeneric, inputs: []int{1, 2}, bias: -1},
	"ReduceMean":            {kind: opGeneric, inputs: []int{0}, bias: -1},
	"LayerNormalization":    {kind: opGeneric, inputs: []int{0}, bias: -1},
	"BatchNormalization":    {kind: opGeneric, inputs: []int{0}, bias: -1, fusesRelu: true},
	"InstanceNormalization": {kind: opGeneric, inputs: []int{0}, bias: -1},
	"Softmax":               {kind: opGeneric, inputs: []int{0}, bias: -1, fixed: unitRange},
	"Sigmoid":               {kind: opGeneric, inputs: []int{0}, bias: -1, fixed: unitRange},
	"Tanh":                  {kind: opGeneric, inputs: []int{0}, bias: -1, fixed: signedRange},

	"Reshape":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Transpose":    {kind: opShared, inputs: []int{0}, bias: -1},
	"Squeeze":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Unsqueeze":    {kind: opShared, inputs: []int{0}, bias: -1},
	"Flatten":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Slice":        {kind: opShared, inputs: []int{0}, bias: -1},
	"MaxPool":      {kind: opShared, inputs: []int{0}, bias: -1},
	"Resize":       {kind: opShared, inputs: []int{0}, bias: -1},
	"Split":        {kind: opShared, inputs: []int{0}, bias: -1, allOutputs: true},
	"Gather":       {kind: opShared, inputs: []int{0}, bias: -1},
	"Expand":       {kind: opShared, inputs: []int{0}, bias: -1},
	"Tile":         {kind: opShared, inputs: []int{0}, bias: -1},
	"DepthToSpace": {kind: opShared, inputs: []int{0}, bias: -1},
	"SpaceToDepth": {kind: opShared, inputs: []int{0}, bias: -1},
}

func (r opRule) quantizesInput(i int) bool {
	if r.inputs == nil {
		return true
	}
	for _, j := range r.inputs {
		if j == i {
			return true
		}
	}
	return false
}

func (r opRule) quantizesOutput(i int) bool { return i == 0 || r.allOutputs }

// channelAxis is the output-channel axis of a compute op's weight, the
// axis a bias's scales follow: Conv 0, ConvTranspose 1, Gemm 0 with
// transB else 1.
func channelAxis(op string, transB bool) int {
	switch op {
	case "ConvTranspose":
		return 1
	case "Gemm":
		if transB {
			return 0
		}
		return 1
	}
	return 0
}

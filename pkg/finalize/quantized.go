package finalize

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// quantizedOps are the ops that only a quantized model holds: Q/DQ and
// the integer and QLinear ops of the default domain and com.microsoft.
var quantizedOps = map[string]bool{
	"QuantizeLinear": true, "DequantizeLinear": true, "DynamicQuantizeLinear": true,
	"QLinearConv": true, "QLinearMatMul": true, "MatMulInteger": true, "ConvInteger": true,
	"com.microsoft.QuantizeLinear": true, "com.microsoft.DequantizeLinear": true,
	"com.microsoft.QLinearAdd": true, "com.microsoft.QLinearMul": true, "com.microsoft.QLinearConcat": true,
	"com.microsoft.QLinearSigmoid": true, "com.microsoft.QLinearLeakyRelu": true, "com.microsoft.QLinearSoftmax": true,
	"com.microsoft.QLinearAveragePool": true, "com.microsoft.QLinearGlobalAveragePool": true,
	"com.microsoft.QLinearWhere": true, "com.microsoft.QGemm": true, "com.microsoft.QAttention": true,
	"com.microsoft.MatMulNBits": true, "com.microsoft.MatMulIntegerToFloat": true,
	"com.microsoft.DynamicQuantizeMatMul": true, "com.microsoft.DynamicQuantizeLSTM": true,
}

// CheckNotQuantized refuses a model that is already quantized: quantizing
// it again would stack Q/DQ pairs on Q/DQ pairs. The error counts the
// quantized ops and names the first node.
func CheckNotQuantized(m *onnxgraph.Model) error {
	counts := map[string]int{}
	var first *onnxgraph.Node
	for _, n := range m.Graph.FileOrder() {
		op := n.OpType
		if n.Domain != "" {
			op = n.Domain + "." + op
		}
		if quantizedOps[op] {
			counts[op]++
			if first == nil {
				first = n
			}
		}
	}
	if first == nil {
		return nil
	}
	ops := make([]string, 0, len(counts))
	for op, c := range counts {
		ops = append(ops, fmt.Sprintf("%d %s", c, op))
	}
	sort.Strings(ops)
	return fmt.Errorf("the model is already quantized (%s; the first is %s): quantize the float model it was made from",
		strings.Join(ops, ", "), first)
}

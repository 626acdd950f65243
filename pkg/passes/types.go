package passes

import (
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// elemTypes returns the element type of every value of g: the declared
// type where the model has one, else a forward propagation through the
// nodes. Exporters often leave intermediate values without value_info, and
// shape arithmetic (Shape → Gather → Mul → Concat) runs on int64 through
// ops that also take float; a Q/DQ pair there would turn indices into
// floats. Values whose type cannot be told stay Undefined.
func elemTypes(g *onnxgraph.Graph) map[string]tensor.DType {
	types := map[string]tensor.DType{}
	of := func(v *onnxgraph.Value) tensor.DType {
		if v == nil {
			return tensor.Undefined
		}
		if dt := v.DType(); dt != tensor.Undefined {
			return dt
		}
		return types[v.Name]
	}
	input := func(n *onnxgraph.Node, i int) tensor.DType {
		if i < len(n.Inputs) {
			return of(n.Inputs[i])
		}
		return tensor.Undefined
	}
	for _, n := range g.AllNodes() {
		var dt tensor.DType
		if n.Domain == "" {
			switch n.OpType {
			case "Shape", "Size", "NonZero", "ArgMax", "ArgMin", "NonMaxSuppression":
				dt = tensor.Int64
			case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf":
				dt = tensor.Bool
			case "Cast":
				if a := n.Attr("to"); a != nil {
					dt = tensor.DType(a.GetI())
				}
			case "CastLike":
				dt = input(n, 1)
			case "ConstantOfShape":
				dt = tensor.Float
				if a := n.Attr("value"); a != nil && a.T != nil {
					dt = tensor.DType(a.T.GetDataType())
				}
			case "Where":
				dt = input(n, 1)
			case "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear":
				dt = tensor.Undefined
			default:
				// Most ops keep the type of their first input (the
				// exceptions above are the common ones that do not).
				dt = input(n, 0)
			}
		}
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			if d := v.DType(); d != tensor.Undefined {
				types[v.Name] = d
				continue
			}
			if dt != tensor.Undefined {
				types[v.Name] = dt
			}
		}
		if n.OpType == "TopK" && n.Domain == "" && len(n.Outputs) > 1 && n.Outputs[1] != nil && n.Outputs[1].DType() == tensor.Undefined {
			types[n.Outputs[1].Name] = tensor.Int64
		}
	}
	return types
}

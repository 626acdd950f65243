package passes

import (
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// elemTypes returns the element type of every value of g: the declared
// type where the model has one, else a forward propagation through the
// nodes by the op table's output types (ops.ElemType). Exporters often
// leave intermediate values without value_info, and shape arithmetic
// (Shape → Gather → Mul → Concat) runs on int64 through ops that also take
// float; a Q/DQ pair there would turn indices into floats. Values whose
// type cannot be told stay Undefined.
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
	for _, n := range g.AllNodes() {
		input := func(i int) tensor.DType {
			if i < len(n.Inputs) {
				return of(n.Inputs[i])
			}
			return tensor.Undefined
		}
		for o, v := range n.Outputs {
			if v == nil {
				continue
			}
			if d := v.DType(); d != tensor.Undefined {
				types[v.Name] = d
				continue
			}
			if dt := ops.ElemType(n, o, input); dt != tensor.Undefined {
				types[v.Name] = dt
			}
		}
	}
	return types
}

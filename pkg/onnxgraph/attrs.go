package onnxgraph

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// attrTypes are the default-domain attributes whose type is the same in
// every op and opset that has them. A node giving one of them another type
// is refused at load: readers take the typed field (GetI, GetF, ...) and
// would see zero, computing something else than the model says.
var attrTypes = map[string]onnxpb.AttributeProto_AttributeType{
	"axis": onnxpb.AttributeProto_INT, "axes": onnxpb.AttributeProto_INTS,
	"transA": onnxpb.AttributeProto_INT, "transB": onnxpb.AttributeProto_INT,
	"alpha": onnxpb.AttributeProto_FLOAT, "beta": onnxpb.AttributeProto_FLOAT, "gamma": onnxpb.AttributeProto_FLOAT,
	"epsilon": onnxpb.AttributeProto_FLOAT, "momentum": onnxpb.AttributeProto_FLOAT,
	"kernel_shape": onnxpb.AttributeProto_INTS, "pads": onnxpb.AttributeProto_INTS,
	"strides": onnxpb.AttributeProto_INTS, "dilations": onnxpb.AttributeProto_INTS,
	"output_padding": onnxpb.AttributeProto_INTS, "output_shape": onnxpb.AttributeProto_INTS,
	"group": onnxpb.AttributeProto_INT, "perm": onnxpb.AttributeProto_INTS, "keepdims": onnxpb.AttributeProto_INT,
	"to": onnxpb.AttributeProto_INT, "auto_pad": onnxpb.AttributeProto_STRING, "mode": onnxpb.AttributeProto_STRING,
	"ceil_mode": onnxpb.AttributeProto_INT, "count_include_pad": onnxpb.AttributeProto_INT,
	"storage_order": onnxpb.AttributeProto_INT, "blocksize": onnxpb.AttributeProto_INT,
	"block_size": onnxpb.AttributeProto_INT, "training_mode": onnxpb.AttributeProto_INT,
	"spatial": onnxpb.AttributeProto_INT, "noop_with_empty_axes": onnxpb.AttributeProto_INT,
	"select_last_index": onnxpb.AttributeProto_INT, "largest": onnxpb.AttributeProto_INT,
	"sorted": onnxpb.AttributeProto_INT, "direction": onnxpb.AttributeProto_STRING,
	"hidden_size": onnxpb.AttributeProto_INT, "activations": onnxpb.AttributeProto_STRINGS,
	"clip": onnxpb.AttributeProto_FLOAT, "saturate": onnxpb.AttributeProto_INT,
	"output_dtype": onnxpb.AttributeProto_INT, "approximate": onnxpb.AttributeProto_STRING,
	"stash_type": onnxpb.AttributeProto_INT, "coordinate_transformation_mode": onnxpb.AttributeProto_STRING,
	"nearest_mode": onnxpb.AttributeProto_STRING, "exclude_outside": onnxpb.AttributeProto_INT,
	"extrapolation_value": onnxpb.AttributeProto_FLOAT, "cubic_coeff_a": onnxpb.AttributeProto_FLOAT,
	"batch_dims": onnxpb.AttributeProto_INT, "exclusive": onnxpb.AttributeProto_INT,
	"reverse": onnxpb.AttributeProto_INT, "center_point_box": onnxpb.AttributeProto_INT,
	"lambd": onnxpb.AttributeProto_FLOAT, "num_outputs": onnxpb.AttributeProto_INT,
}

// attrType is a's declared type, or, for writers that leave it unset, the
// type its populated field implies (UNDEFINED when none is).
func attrType(a *onnxpb.AttributeProto) onnxpb.AttributeProto_AttributeType {
	if t := a.GetType(); t != onnxpb.AttributeProto_UNDEFINED {
		return t
	}
	switch {
	case a.F != nil:
		return onnxpb.AttributeProto_FLOAT
	case a.I != nil:
		return onnxpb.AttributeProto_INT
	case a.S != nil:
		return onnxpb.AttributeProto_STRING
	case a.T != nil:
		return onnxpb.AttributeProto_TENSOR
	case a.G != nil:
		return onnxpb.AttributeProto_GRAPH
	case len(a.Floats) > 0:
		return onnxpb.AttributeProto_FLOATS
	case len(a.Ints) > 0:
		return onnxpb.AttributeProto_INTS
	case len(a.Strings) > 0:
		return onnxpb.AttributeProto_STRINGS
	}
	return onnxpb.AttributeProto_UNDEFINED
}

// checkAttrTypes refuses a default-domain node whose attribute has a
// type other than the one ONNX defines for it.
func checkAttrTypes(n *Node) error {
	if n.Domain != "" {
		return nil
	}
	for _, a := range n.Proto.GetAttribute() {
		if a.GetRefAttrName() != "" {
			continue // a function's attribute reference, typed by the caller
		}
		want, known := attrTypes[a.GetName()]
		if !known {
			continue
		}
		if got := attrType(a); got != want {
			return fmt.Errorf("%s: attribute %q must be %s, the model gives %s", n, a.GetName(), want, got)
		}
	}
	return nil
}

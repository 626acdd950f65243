package onnxgraph

import (
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// constantTensor returns the tensor a Constant node produces, as a
// TensorProto, whichever of its value attributes is set. It returns nil for
// a sparse_value, which has no dense proto form without decoding.
func constantTensor(np *onnxpb.NodeProto) (*onnxpb.TensorProto, error) {
	var out *onnxpb.TensorProto
	for _, a := range np.GetAttribute() {
		var t *onnxpb.TensorProto
		switch a.GetName() {
		case "value":
			t = proto.CloneOf(a.GetT())
		case "value_float":
			t = &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.Float)), FloatData: []float32{a.GetF()}}
		case "value_floats":
			t = &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.Float)), Dims: []int64{int64(len(a.GetFloats()))}, FloatData: a.GetFloats()}
		case "value_int":
			t = &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.Int64)), Int64Data: []int64{a.GetI()}}
		case "value_ints":
			t = &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.Int64)), Dims: []int64{int64(len(a.GetInts()))}, Int64Data: a.GetInts()}
		case "value_string":
			t = &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.String)), StringData: [][]byte{a.GetS()}}
		case "value_strings":
			t = &onnxpb.TensorProto{DataType: proto.Int32(int32(tensor.String)), Dims: []int64{int64(len(a.GetStrings()))}, StringData: a.GetStrings()}
		case "sparse_value":
			return nil, nil
		default:
			continue
		}
		if out != nil {
			return nil, errors.New("the Constant node has more than one value attribute")
		}
		out = t
	}
	if out == nil {
		return nil, errors.New("the Constant node has no value attribute")
	}
	if len(np.GetOutput()) == 1 {
		out.Name = proto.String(np.GetOutput()[0])
	}
	return out, nil
}

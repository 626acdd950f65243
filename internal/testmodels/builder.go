// Package testmodels builds small ONNX models in Go for tests and for the
// example models in testdata/models (written by `go generate`).
package testmodels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Builder assembles a ModelProto one piece at a time.
type Builder struct {
	Model *onnxpb.ModelProto
	rng   *rand.Rand
}

// New starts a model importing the default domain at opset.
func New(name string, opset int64) *Builder {
	return &Builder{
		Model: &onnxpb.ModelProto{
			IrVersion:       proto.Int64(8),
			ProducerName:    proto.String("coreaiq-testmodels"),
			ProducerVersion: proto.String("1"),
			OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
			Graph:           &onnxpb.GraphProto{Name: proto.String(name)},
		},
		rng: rand.New(rand.NewPCG(1, 2)),
	}
}

func (b *Builder) graph() *onnxpb.GraphProto { return b.Model.Graph }

// ValueInfo makes a tensor ValueInfoProto; dims are int (sizes) or string
// (symbolic names).
func ValueInfo(name string, dt tensor.DType, dims ...any) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch d := d.(type) {
		case int:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}
		case string:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}
		default:
			panic("testmodels: dims are int or string")
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
		Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt)), Shape: shape}},
	}}
}

// Input adds a graph input.
func (b *Builder) Input(name string, dt tensor.DType, dims ...any) *Builder {
	b.graph().Input = append(b.graph().Input, ValueInfo(name, dt, dims...))
	return b
}

// Output adds a graph output.
func (b *Builder) Output(name string, dt tensor.DType, dims ...any) *Builder {
	b.graph().Output = append(b.graph().Output, ValueInfo(name, dt, dims...))
	return b
}

// Float32Tensor encodes data as a float32 TensorProto with raw_data.
func Float32Tensor(name string, dims []int64, data []float32) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(tensor.Float)), RawData: raw}
}

// Int64Tensor encodes data as an int64 TensorProto with raw_data.
func Int64Tensor(name string, dims []int64, data []int64) *onnxpb.TensorProto {
	raw := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(tensor.Int64)), RawData: raw}
}

// Init adds a float32 initializer with the given data.
func (b *Builder) Init(name string, dims []int64, data []float32) *Builder {
	b.graph().Initializer = append(b.graph().Initializer, Float32Tensor(name, dims, data))
	return b
}

// InitInt64 adds an int64 initializer.
func (b *Builder) InitInt64(name string, dims []int64, data []int64) *Builder {
	b.graph().Initializer = append(b.graph().Initializer, Int64Tensor(name, dims, data))
	return b
}

// RandomInit adds a float32 initializer with deterministic values drawn
// uniformly from [-scale, scale].
func (b *Builder) RandomInit(name string, scale float32, dims ...int64) *Builder {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = (b.rng.Float32()*2 - 1) * scale
	}
	return b.Init(name, dims, data)
}

// Node adds a node in the default domain and returns it for further edits.
func (b *Builder) Node(opType, name string, inputs, outputs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	n := &onnxpb.NodeProto{OpType: proto.String(opType), Input: inputs, Output: outputs, Attribute: attrs}
	if name != "" {
		n.Name = proto.String(name)
	}
	b.graph().Node = append(b.graph().Node, n)
	return n
}

// Meta adds metadata_props entries (key, value pairs) to a node.
func Meta(n *onnxpb.NodeProto, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		n.MetadataProps = append(n.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
}

// Bytes serializes the model deterministically.
func (b *Builder) Bytes() []byte {
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(b.Model)
	if err != nil {
		panic(err)
	}
	return out
}

// AttrInt, AttrInts, AttrFloat, AttrFloats and AttrString make attributes.
func AttrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// AttrInts makes an INTS attribute.
func AttrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

// AttrFloat makes a FLOAT attribute.
func AttrFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

// AttrFloats makes a FLOATS attribute.
func AttrFloats(name string, v ...float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: v}
}

// AttrString makes a STRING attribute.
func AttrString(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// AttrGraph makes a GRAPH attribute.
func AttrGraph(name string, g *onnxpb.GraphProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: g}
}

// AttrTensor makes a TENSOR attribute.
func AttrTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

// TensorMeta adds metadata_props entries (key, value pairs) to an
// initializer.
func TensorMeta(t *onnxpb.TensorProto, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		t.MetadataProps = append(t.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
}

package onnxgraph

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// TestCloneSharingData: the clone equals a deep copy, leaves the source
// as it was, and its tensors' raw_data are the source's bytes, not copies.
func TestCloneSharingData(t *testing.T) {
	raw := func(b ...byte) []byte { return b }
	tensor := func(name string, data []byte) *onnxpb.TensorProto {
		return &onnxpb.TensorProto{Name: proto.String(name), Dims: []int64{int64(len(data))}, DataType: proto.Int32(2), RawData: data}
	}
	sub := &onnxpb.GraphProto{Name: proto.String("body"), Initializer: []*onnxpb.TensorProto{tensor("s", raw(7, 8))}}
	mp := &onnxpb.ModelProto{Graph: &onnxpb.GraphProto{
		Name:        proto.String("g"),
		Initializer: []*onnxpb.TensorProto{tensor("a", raw(1, 2, 3)), tensor("empty", []byte{}), tensor("none", nil)},
		Node: []*onnxpb.NodeProto{{OpType: proto.String("If"), Attribute: []*onnxpb.AttributeProto{
			{Name: proto.String("then_branch"), G: sub},
			{Name: proto.String("value"), T: tensor("c", raw(4, 5))},
		}}},
	}}
	want := proto.CloneOf(mp)
	got := CloneSharingData(mp)
	if !proto.Equal(got, want) || !proto.Equal(mp, want) {
		t.Fatal("the clone or the source differs from a deep copy")
	}
	var src, dst []*onnxpb.TensorProto
	allTensors(mp, func(t *onnxpb.TensorProto) { src = append(src, t) })
	allTensors(got, func(t *onnxpb.TensorProto) { dst = append(dst, t) })
	for i := range src {
		if src[i] == dst[i] {
			t.Fatalf("tensor %q is the same message in both", src[i].GetName())
		}
		if len(src[i].RawData) > 0 && &src[i].RawData[0] != &dst[i].RawData[0] {
			t.Errorf("tensor %q: raw_data copied", src[i].GetName())
		}
	}
	if len(src) != 5 {
		t.Fatalf("%d tensors walked, want 5", len(src))
	}
}

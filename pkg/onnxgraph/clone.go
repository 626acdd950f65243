package onnxgraph

import (
	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// CloneSharingData is proto.CloneOf(mp) except that each tensor of the
// clone shares its raw_data bytes with mp's instead of copying them: a
// rewrite of a large model then holds one copy of its weights. Neither
// model may change those bytes in place (replacing a tensor's RawData is
// fine); nothing in coreaiq does.
func CloneSharingData(mp *onnxpb.ModelProto) *onnxpb.ModelProto {
	var raws [][]byte
	allTensors(mp, func(t *onnxpb.TensorProto) {
		raws = append(raws, t.RawData)
		t.RawData = nil
	})
	out := proto.CloneOf(mp)
	restore := func(m *onnxpb.ModelProto) {
		i := 0
		allTensors(m, func(t *onnxpb.TensorProto) {
			t.RawData = raws[i]
			i++
		})
	}
	restore(mp)
	restore(out)
	return out
}

package runtime

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// constantDigests are the digests of the raw bytes of m's constants
// (initializers and Constant nodes' values) by name. The engine views
// these bytes as its constants' data (tensor.FromProtoReadOnly), so no
// kernel may write into them.
func constantDigests(m *onnxgraph.Model) map[string][sha256.Size]byte {
	out := map[string][sha256.Size]byte{}
	for _, v := range m.Graph.Values() {
		if v.Const != nil && v.Const.RawData != nil {
			out[v.Name] = sha256.Sum256(v.Const.RawData)
		}
	}
	return out
}

// constantsUnchanged says which constant of m no longer has the bytes of
// before.
func constantsUnchanged(m *onnxgraph.Model, before map[string][sha256.Size]byte) error {
	after := constantDigests(m)
	for _, name := range sortedKeys(before) {
		if after[name] != before[name] {
			return fmt.Errorf("constant %q was written by a run: the engine views constants' bytes and must not write them", name)
		}
	}
	return nil
}

// TestConstantsViewed checks that a session's constants share the model's
// raw bytes (no second copy of the weights while it runs), and that the
// check the model tests run after their runs sees a byte written into
// one.
func TestConstantsViewed(t *testing.T) {
	m, err := onnxgraph.LoadBytes(testmodels.MLP().Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	before := constantDigests(m)
	if len(before) == 0 {
		t.Fatal("the model has no raw constants")
	}
	s, err := NewGoSession(m, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for slot, c := range s.prog.consts {
		v := m.Graph.Value(s.prog.names[slot])
		if v == nil || v.Const == nil || len(v.Const.RawData) == 0 {
			continue
		}
		if b := tensor.ByteView(c.Data); len(b) > 0 && &b[0] == &v.Const.RawData[0] {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("no constant of the session views the model's bytes")
	}
	if err := constantsUnchanged(m, before); err != nil {
		t.Fatal(err)
	}
	for _, v := range m.Graph.Values() {
		if v.Const != nil && len(v.Const.RawData) > 0 {
			v.Const.RawData[0] ^= 1
			break
		}
	}
	if err := constantsUnchanged(m, before); err == nil {
		t.Fatal("a written constant was not seen")
	}
}

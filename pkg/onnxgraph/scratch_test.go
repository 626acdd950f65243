package onnxgraph

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// A model whose large tensors were moved into a scratch file saves to the
// same bytes as the model held in memory, inline and external, and its
// tensors read back the same.
func TestScratchSavesTheSameBytes(t *testing.T) {
	b := testmodels.New("scratch", 17)
	b.Input("x", tensor.Float, 1, 200).Output("y", tensor.Float, 1, 200)
	b.RandomInit("big", 1, 200, 200).RandomInit("small", 1, 200)
	b.Node("MatMul", "mm", []string{"x", "big"}, []string{"h"})
	b.Node("Add", "add", []string{"h", "small"}, []string{"y"})
	want := mustModel(t, b)

	work := t.TempDir()
	s, err := NewScratch(work)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mp := mustModel(t, b).Proto
	moved := 0
	for _, tp := range mp.Graph.Initializer {
		if err := s.Move(tp); err != nil {
			t.Fatal(err)
		}
		if IsExternal(tp) {
			moved++
		}
	}
	if moved != 1 {
		t.Fatalf("%d tensors moved, want 1 (big: 160 KB; small is under 64 KiB)", moved)
	}
	got, err := fromProto(mp, "", []store{s})
	if err != nil {
		t.Fatal(err)
	}
	for i, tp := range got.Proto.Graph.Initializer {
		a, err := tensor.FromProto(tp, got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := tensor.FromProto(want.Proto.Graph.Initializer[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tensor.ByteView(a.Data), tensor.ByteView(w.Data)) {
			t.Errorf("tensor %q reads back different values", tp.GetName())
		}
	}
	for _, mode := range []ExternalMode{ExternalAuto, ExternalNever, ExternalAlways} {
		da, db := t.TempDir(), t.TempDir()
		if err := want.Save(filepath.Join(da, "m.onnx"), SaveOptions{External: mode}); err != nil {
			t.Fatal(err)
		}
		if err := got.Save(filepath.Join(db, "m.onnx"), SaveOptions{External: mode}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"m.onnx", "m.onnx.data"} {
			x, errA := os.ReadFile(filepath.Join(da, f))
			y, errB := os.ReadFile(filepath.Join(db, f))
			if (errA == nil) != (errB == nil) || !bytes.Equal(x, y) {
				t.Errorf("mode %d: %s differs between the in-memory and the scratch model (%v, %v)", mode, f, errA, errB)
			}
		}
	}
	if !IsExternal(got.Proto.Graph.Initializer[0]) {
		t.Error("Save left the moved tensor inline in memory")
	}
	// The scratch file is not left in the output's directory.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("scratch directory holds %d files after Close", len(ents))
	}
	if _, err := tensor.FromProto(got.Proto.Graph.Initializer[0], got); err == nil {
		t.Error("a moved tensor read after Close did not fail")
	}
}

// A nil scratch moves nothing.
func TestNilScratchMovesNothing(t *testing.T) {
	var s *Scratch
	tp := &onnxpb.TensorProto{RawData: make([]byte, 1<<20)}
	if err := s.Move(tp); err != nil || IsExternal(tp) {
		t.Errorf("nil scratch: err %v, external %v", err, IsExternal(tp))
	}
}

package onnxgraph

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// sameAsPlain fails unless lean, loaded lean from path, holds what a plain
// load of data does: the same proto once its stored tensors are inlined,
// the same values tensor by tensor, and the same bytes saved.
func sameAsPlain(t *testing.T, data []byte, lean *Model) {
	t.Helper()
	plain, err := LoadBytes(data, lean.Dir)
	if err != nil {
		t.Fatalf("plain load fails where lean load did not: %v", err)
	}
	b, err := lean.Marshal(lean.Proto)
	if err != nil {
		t.Fatal(err)
	}
	inlined := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, inlined); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(inlined, plain.Proto) {
		t.Fatal("the lean model, inlined, differs from the plain one")
	}
	var leanT, plainT []*onnxpb.TensorProto
	lean.AllTensors(func(tp *onnxpb.TensorProto) { leanT = append(leanT, tp) })
	plain.AllTensors(func(tp *onnxpb.TensorProto) { plainT = append(plainT, tp) })
	for i := range leanT {
		a, errA := tensor.FromProto(leanT[i], lean)
		p, errP := tensor.FromProto(plainT[i], plain)
		if (errA == nil) != (errP == nil) {
			t.Fatalf("tensor %q decodes differently: %v / %v", leanT[i].GetName(), errA, errP)
		}
		if errA == nil && (!bytes.Equal(tensor.ByteView(a.Data), tensor.ByteView(p.Data)) || a.DType != p.DType) {
			t.Fatalf("tensor %q has other values", leanT[i].GetName())
		}
	}
	for _, mode := range []ExternalMode{ExternalAuto, ExternalAlways} {
		da, db := t.TempDir(), t.TempDir()
		errA := lean.Save(filepath.Join(da, "m.onnx"), SaveOptions{External: mode})
		errB := plain.Save(filepath.Join(db, "m.onnx"), SaveOptions{External: mode})
		if (errA == nil) != (errB == nil) {
			t.Fatalf("save: %v / %v", errA, errB)
		}
		for _, f := range []string{"m.onnx", "m.onnx.data"} {
			x, _ := os.ReadFile(filepath.Join(da, f))
			y, _ := os.ReadFile(filepath.Join(db, f))
			if !bytes.Equal(x, y) {
				t.Fatalf("mode %d: %s saved from the lean model differs", mode, f)
			}
		}
	}
}

func TestLeanLoadMatchesPlainLoad(t *testing.T) {
	models := map[string][]byte{"big": bigModel().Bytes()}
	for name, b := range testmodels.Catalog {
		models[name] = b().Bytes()
	}
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, minRaw := range []int64{1, 1024} {
			path := filepath.Join(t.TempDir(), "m.onnx")
			if err := os.WriteFile(path, models[name], 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := loadLean(path, minRaw)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if minRaw == 1024 && name == "big" && len(m.stores) == 0 {
				t.Errorf("%s: no tensor was left in the file", name)
			}
			sameAsPlain(t, models[name], m)
		}
	}
}

// FuzzLeanLoad: any file loads lean or fails with an error, never a panic;
// whatever a plain load accepts, a lean load accepts with the same content.
func FuzzLeanLoad(f *testing.F) {
	f.Add(bigModel().Bytes())
	for _, b := range testmodels.Catalog {
		f.Add(b().Bytes())
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "m.onnx")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := loadLean(path, 16)
		if _, perr := LoadBytes(data, dir); perr == nil && err != nil {
			t.Fatalf("lean load fails where plain load does not: %v", err)
		}
		if err == nil {
			sameAsPlain(t, data, m)
		}
	})
}

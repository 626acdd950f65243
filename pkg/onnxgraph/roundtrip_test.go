package onnxgraph

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// testModels lists every model.onnx of the ONNX backend test data and of the
// shared model set (when present).
func testModels(t *testing.T) []string {
	t.Helper()
	var paths []string
	root := testutil.RequireONNXTestData(t)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "model.onnx" {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if dir, ok := testutil.SharedModelsDir(); ok {
		shared, _ := filepath.Glob(filepath.Join(dir, "*", "model.onnx"))
		paths = append(paths, shared...)
	}
	sort.Strings(paths)
	if len(paths) < 1000 {
		t.Fatalf("found only %d test models under %s", len(paths), root)
	}
	return paths
}

// TestRoundTrip: Load → Save → Load gives an equal proto, and saving twice
// gives identical bytes, on every test model.
func TestRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	for _, path := range testModels(t) {
		m, err := Load(path)
		if err != nil {
			t.Errorf("load: %v", err)
			continue
		}
		out := filepath.Join(tmp, "out.onnx")
		if err := m.Save(out, SaveOptions{}); err != nil {
			t.Errorf("%s: save: %v", path, err)
			continue
		}
		first, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Load(out)
		if err != nil {
			t.Errorf("%s: reload: %v", path, err)
			continue
		}
		if !proto.Equal(inlined(t, m), inlined(t, back)) {
			t.Errorf("%s: reloaded model differs from the original", path)
		}
		if err := back.Save(out, SaveOptions{}); err != nil {
			t.Fatal(err)
		}
		second, _ := os.ReadFile(out)
		if !bytes.Equal(first, second) {
			t.Errorf("%s: saving twice gave different bytes", path)
		}
		if len(back.Graph.Nodes) != len(m.Proto.GetGraph().GetNode()) {
			t.Errorf("%s: graph view has %d nodes, file has %d", path, len(back.Graph.Nodes), len(m.Proto.GetGraph().GetNode()))
		}
	}
}

// inlined is m's proto with the tensors its stores hold inlined: a model
// file loaded lean refers to itself by path, which another file does not.
func inlined(t *testing.T, m *Model) *onnxpb.ModelProto {
	t.Helper()
	b, err := m.Marshal(m.Proto)
	if err != nil {
		t.Fatal(err)
	}
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, mp); err != nil {
		t.Fatal(err)
	}
	return mp
}

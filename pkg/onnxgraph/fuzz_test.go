package onnxgraph

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
)

// FuzzLoadModel: any bytes load or fail with an error, never a panic; what
// loads saves and reloads to an equal model.
func FuzzLoadModel(f *testing.F) {
	names := make([]string, 0, len(testmodels.Catalog))
	for name := range testmodels.Catalog {
		names = append(names, name)
	}
	for _, name := range names {
		f.Add(testmodels.Catalog[name]().Bytes())
	}
	f.Add(bigModel().Bytes())
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := LoadBytes(data, "")
		if err != nil {
			return
		}
		path := filepath.Join(dir, "m.onnx")
		if err := m.Save(path, SaveOptions{External: ExternalNever}); err != nil {
			t.Fatalf("loaded model does not save: %v", err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		back, err := LoadBytes(b, "")
		if err != nil {
			t.Fatalf("saved model does not reload: %v", err)
		}
		if !proto.Equal(m.Proto, back.Proto) {
			t.Fatal("round trip changed the model")
		}
	})
}

// FuzzExternalData: any offset, length and file size either load and read
// back exactly the 16 bytes the tensor's dims need, or fail with an error
// naming the model; never a panic, never an allocation from the length.
func FuzzExternalData(f *testing.F) {
	f.Add(int64(0), int64(16), int64(16))
	f.Add(int64(1), int64(math.MaxInt64), int64(64))
	f.Add(int64(math.MaxInt64), int64(1), int64(64))
	f.Add(int64(0), int64(-1), int64(2<<30))
	f.Add(int64(-5), int64(16), int64(64))
	f.Add(int64(48), int64(-1), int64(64))
	f.Fuzz(func(t *testing.T, offset, length, size int64) {
		dir := t.TempDir()
		data, err := os.Create(filepath.Join(dir, "w.data"))
		if err != nil {
			t.Fatal(err)
		}
		// Sparse: a large size costs no disk.
		if err := data.Truncate(max(0, size%(8<<30))); err != nil {
			t.Fatal(err)
		}
		data.Close()
		path := filepath.Join(dir, "m.onnx")
		if err := os.WriteFile(path, withExternal(t, "w.data", offset, length), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Load(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the model: %v", err)
			}
			return
		}
		raw, err := m.ReadExternal(m.Graph.Value("w").Const)
		if err != nil || len(raw) != 16 {
			t.Fatalf("loaded, then ReadExternal = %d bytes, %v", len(raw), err)
		}
	})
}

package onnxgraph

import (
	"os"
	"path/filepath"
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

//go:build ort

package cli

import (
	"os"
	"path/filepath"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// ortFindings opens m in ONNX Runtime with every graph optimization, reads
// back the optimized graph it writes, and lists what it left in float.
func ortFindings(m *onnxgraph.Model) ([]passes.Finding, string) {
	lib, err := ort.Default()
	if err != nil {
		return nil, "not confirmed in ONNX Runtime: " + err.Error()
	}
	dir, err := os.MkdirTemp("", "coreaiq-lint-")
	if err != nil {
		return nil, "not confirmed in ONNX Runtime: " + err.Error()
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "optimized.onnx")
	// The kernels' prepacked weights come after the optimized graph is
	// written and would be a second copy of every weight in memory.
	e, err := lib.Open(m, ort.SessionOptions{IntraOpThreads: 1, InterOpThreads: 1, Optimization: ort.OptimizeAll, OptimizedModelPath: path,
		Config: []ort.ConfigEntry{{Key: "session.disable_prepacking", Value: "1"}}})
	if err != nil {
		return nil, "not confirmed in ONNX Runtime: " + err.Error()
	}
	e.Close()
	om, err := onnxgraph.Load(path)
	if err != nil {
		return nil, "not confirmed in ONNX Runtime: " + err.Error()
	}
	f := passes.OptimizedFindings(om)
	if f == nil {
		f = []passes.Finding{}
	}
	return f, ""
}

//go:build !ort

package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestRunOrtUnavailable: a default build has no ONNX Runtime engine and
// says how to get one.
func TestRunOrtUnavailable(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	in := writeNPY(t, dir, "x.npy", tensor.New(tensor.Float, 1, 16))
	code, _, stderr := runCLI(t, "run", model, "--input", "input="+in, "--engine", "ort", "--output-dir", filepath.Join(dir, "o"))
	if code != 2 || !strings.Contains(stderr, `engine "ort" is not available`) || !strings.Contains(stderr, "-tags ort") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

//go:build ort

package passes

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// TestBlockRunnerMatchesWholeModelORT is TestBlockRunnerMatchesWholeModel
// with ONNX Runtime running the blocks, whose sub-models must declare the
// element type of every input and output.
func TestBlockRunnerMatchesWholeModelORT(t *testing.T) {
	runtime.RegisterEngine(ort.EngineName, ort.Open)
	checkBlockRunner(t, ort.EngineName)
}

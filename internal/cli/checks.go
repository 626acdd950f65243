package cli

import (
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// checkModelForPipeline refuses, before any work, what the pipeline
// would fail on only after calibration: a model that is already quantized
// and an --opset the writer cannot honour.
func checkModelForPipeline(m *onnxgraph.Model, opset int64) error {
	if err := finalize.CheckNotQuantized(m); err != nil {
		return Usagef("%s: %v", m.Path, err)
	}
	if err := finalize.CheckOpset(m.Opset(""), opset); err != nil {
		return Usagef("--opset: %v", err)
	}
	return nil
}

//go:build !ort

package cli

import (
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

// ortFindings: this binary has no ONNX Runtime to confirm the lint with.
func ortFindings(*onnxgraph.Model) ([]passes.Finding, string) {
	return nil, "not confirmed in ONNX Runtime's optimized graph (this binary has no ONNX Runtime; build with -tags ort)"
}

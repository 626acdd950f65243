//go:build ort

package cli

import (
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// The ONNX Runtime engine is compiled in only with -tags ort: its binding
// (purego) makes the binary dynamically linked, and the default build stays
// static.
func init() { runtime.RegisterEngine(ort.EngineName, ort.Open) }

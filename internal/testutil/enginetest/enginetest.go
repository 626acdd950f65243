// Package enginetest runs models in the built-in engine for tests of the
// packages above it (a package of its own, so that pkg/runtime's own
// tests, which use internal/testutil, do not import the engine twice).
package enginetest

import (
	"context"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Run runs m once on one thread with the inputs in and returns every
// output, failing t on any error.
func Run(t testing.TB, m *onnxgraph.Model, in map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	s, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), in, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Package runtime runs ONNX models: the built-in engine (pure Go plus
// assembly kernels) and, behind the build tag `ort`, ONNX Runtime. Both
// implement Session.
package runtime

import (
	"context"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// IOInfo describes a model input or output.
type IOInfo struct {
	Name  string
	DType tensor.DType
	// Shape has -1 for dimensions that are symbolic or unknown; nil when the
	// rank is unknown.
	Shape []int64
	// DimParams holds the symbolic names of dynamic dimensions ("" elsewhere).
	DimParams []string
}

// Tap receives computed values during a run. The tensor is only valid during
// the call: the engine may reuse its buffer afterwards, so a tap that keeps
// data must copy it.
type Tap func(value string, t *tensor.Tensor)

// RunOptions controls one run.
type RunOptions struct {
	// Tap, when set, is called for every value in TapValues (every computed
	// value when TapValues is nil) as soon as it is computed.
	Tap       Tap
	TapValues []string
	// TapsOnly, with Tap and TapValues, asks for the tapped values alone:
	// the built-in engine runs only the steps they need and returns no
	// outputs. Other engines may run the whole graph.
	TapsOnly bool
}

// Options configures a session.
type Options struct {
	// Threads is the number of threads a run may use; 0 means one per CPU.
	Threads int
	// Profile, when set, receives the time of every step of every run
	// (the built-in engine; ONNX Runtime ignores it).
	Profile *Profile
	// ConvWay, when not kernels.ConvAuto, makes the built-in engine
	// compute every 2-D convolution that way where it can, instead of the
	// way it finds cheapest: the ways give the same results bit for bit,
	// and tests and benchmarks compare them.
	ConvWay kernels.ConvWay
	// Buffers, when set, lends the built-in engine's sessions the run
	// buffers of the sessions closed before them, and takes theirs when
	// they are closed (see BufferPool); ONNX Runtime ignores it.
	Buffers *BufferPool
	// poisonArena fills recycled buffers with NaN (see arena.poison).
	poisonArena bool
}

// Session is a model compiled for one engine.
type Session interface {
	// Engine names the engine: "go" or "ort".
	Engine() string
	Inputs() []IOInfo
	Outputs() []IOInfo
	// Run computes the model's outputs for the given inputs, keyed by name.
	Run(ctx context.Context, inputs map[string]*tensor.Tensor, opts RunOptions) (map[string]*tensor.Tensor, error)
	Close() error
}

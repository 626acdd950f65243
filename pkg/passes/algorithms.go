package passes

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// AlgorithmData is what the data-aware algorithms read: the calibration
// samples, run through an engine batch by batch.
type AlgorithmData struct {
	Engine  string
	Runtime runtime.Options
	Source  calibrate.Source
	// Samples caps the samples read (0: all); held-out evaluation samples
	// lie beyond it.
	Samples   int
	BatchSize int
	// Progress, when set, is called after each block of an algorithm
	// that goes block by block.
	Progress func(BlockProgress)
}

// LayerReport is what one algorithm did to one node: the node's local
// SQNR (its own quantization error, the rest of the model in float)
// before and after.
type LayerReport struct {
	Algorithm string `json:"algorithm"`
	Node      string `json:"node"`
	OpType    string `json:"op_type"`
	// What the SQNR measures: "output" (the node's output on calibration
	// data) or "weights" (the weights' quantize-dequantize round trip).
	Measure string `json:"measure"`
	Before  DB     `json:"local_sqnr_before_db"`
	After   DB     `json:"local_sqnr_after_db"`
	Note    string `json:"note,omitempty"`
	// Skipped says why the algorithm left the node alone (no figures then).
	Skipped string `json:"skipped,omitempty"`
}

// DB is a figure in decibels; infinities marshal as the strings "inf"
// and "-inf" (as compare's reports do).
type DB float64

// MarshalJSON writes the figure with 4 decimals, or "inf"/"-inf".
func (d DB) MarshalJSON() ([]byte, error) {
	f := float64(d)
	switch {
	case math.IsInf(f, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(f, -1), math.IsNaN(f):
		return []byte(`"-inf"`), nil
	}
	return json.Marshal(math.Round(f*1e4) / 1e4)
}

// String formats the figure for tables.
func (d DB) String() string {
	if math.IsInf(float64(d), 0) {
		return strconv.FormatFloat(float64(d), 'f', -1, 64)
	}
	return strconv.FormatFloat(float64(d), 'f', 2, 64)
}

// sqnrDB is 10·log10(signal/noise) of two sums of squares.
func sqnrDB(signal, noise float64) DB {
	if noise <= 0 {
		return DB(math.Inf(1))
	}
	if signal <= 0 {
		return DB(math.Inf(-1))
	}
	return DB(10 * math.Log10(signal/noise))
}

// ownModel gives u a private copy of its model before an algorithm edits
// weights, so that the caller's float model (the reference of --eval-samples)
// stays as loaded. Prepare's BatchNorm folding already makes one; ownModel
// makes one when it did not.
func ownModel(u *Unit) error {
	if u.ownsModel {
		return nil
	}
	m, err := u.Model.Derive(proto.CloneOf(u.Model.Proto), nil)
	if err != nil {
		return err
	}
	m.Path = u.Model.Path
	u.Model, u.ownsModel = m, true
	return nil
}

// useScratch makes u's model read the writer's scratch file (when there
// is one), where the algorithms that rewrite a large model's weights
// (GPTQ, AWQ) move each as it is made, so that they are never all in
// memory.
func useScratch(u *Unit) error {
	s := u.Write.Scratch
	if s == nil || u.readsScratch {
		return nil
	}
	m, err := u.Model.Derive(u.Model.Proto, s)
	if err != nil {
		return err
	}
	m.Path = u.Model.Path
	u.Model, u.readsScratch = m, true
	return nil
}

// intShape is a tensor's dims as ints.
func intShape(dims []int64) []int {
	out := make([]int, len(dims))
	for i, d := range dims {
		out[i] = int(d)
	}
	return out
}

// constFloats reads a constant value as float32.
func constFloats(m *onnxgraph.Model, v *onnxgraph.Value) ([]float32, []int, error) {
	t, err := tensor.FromProto(v.Const, m)
	if err != nil {
		return nil, nil, err
	}
	f, err := t.AsFloat32()
	if err != nil {
		return nil, nil, err
	}
	return f, t.Shape, nil
}

// initializerIndex returns the position of v among the graph's
// initializers, -1 when v is not one (a Constant node's output).
func initializerIndex(m *onnxgraph.Model, v *onnxgraph.Value) int {
	for i, t := range m.Proto.GetGraph().GetInitializer() {
		if t.GetName() == v.Name {
			return i
		}
	}
	return -1
}

// setConst replaces the data of an initializer (keeping its name, shape
// and element type) and the graph view's pointer to it.
func setConst(m *onnxgraph.Model, v *onnxgraph.Value, data []float32, shape []int) error {
	i := initializerIndex(m, v)
	if i < 0 {
		return fmt.Errorf("value %q is not an initializer", v.Name)
	}
	p, err := floatConst(v.Name, data, shape, tensor.DType(m.Proto.Graph.Initializer[i].GetDataType()))
	if err != nil {
		return err
	}
	m.Proto.Graph.Initializer[i] = p
	v.Const = p
	return nil
}

// rewritable reports whether the algorithms rewrite constants of type dt:
// the floating-point types models compute in.
func rewritable(dt tensor.DType) bool {
	return dt == tensor.Float || dt == tensor.Float16 || dt == tensor.BFloat16 || dt == tensor.Double
}

// floatConst is an initializer of the floating-point type dt holding data:
// a float16, bfloat16 or float64 model's constants get the data rounded to
// its type, as the model computes in it; a value its type cannot hold is
// an error.
func floatConst(name string, data []float32, shape []int, dt tensor.DType) (*onnxpb.TensorProto, error) {
	t := tensor.FromFloat32(data, shape...)
	switch {
	case dt == tensor.Float:
	case rewritable(dt):
		c, err := tensor.Cast(t, dt)
		if err != nil {
			return nil, fmt.Errorf("value %q: %w", name, err)
		}
		back, err := c.AsFloat32()
		if err != nil {
			return nil, fmt.Errorf("value %q: %w", name, err)
		}
		for k, x := range back {
			if math.IsInf(float64(x), 0) && !math.IsInf(float64(data[k]), 0) {
				return nil, fmt.Errorf("value %q: element %d, %g, is out of %s's range", name, k, data[k], dt)
			}
		}
		t = c
	default:
		return nil, fmt.Errorf("value %q: %s initializers are not rewritten, only floating-point ones", name, dt)
	}
	return tensor.ToProto(t, name)
}

// builtIn reports whether the algorithms run the built-in engine, whose
// sessions are cheap to open and whose values a caller may hold across
// runs of parts of a graph.
func (d *AlgorithmData) builtIn() bool { return d.Engine == "" || d.Engine == "go" }

// sampleCount is how many samples an algorithm reads: the source's, at
// most d.Samples and limit where they are set (> 0).
func (d *AlgorithmData) sampleCount(limit int) int {
	total := d.Source.Samples()
	for _, c := range []int{d.Samples, limit} {
		if c > 0 {
			total = min(total, c)
		}
	}
	return total
}

// eachBatch reads the algorithm data batch by batch, at most samples
// samples, and calls fn with each batch's first and past-last sample and
// its inputs.
func (d *AlgorithmData) eachBatch(samples int, fn func(start, end int, in map[string]*tensor.Tensor) error) error {
	total := d.sampleCount(samples)
	bs := max(d.BatchSize, 1)
	for start := 0; start < total; start += bs {
		end := min(start+bs, total)
		in, err := d.Source.Batch(start, end)
		if err != nil {
			return err
		}
		if err := fn(start, end, in); err != nil {
			return err
		}
	}
	return nil
}

// forEachBatch runs the float model on the algorithm data, at most
// samples samples, as far as the named values need, tapping them, and
// calls after at the end of each batch.
func (d *AlgorithmData) forEachBatch(ctx context.Context, m *onnxgraph.Model, samples int, taps []string, tap runtime.Tap, after func() error) error {
	s, err := runtime.Open(d.Engine, m, d.Runtime)
	if err != nil {
		return err
	}
	defer s.Close()
	return d.eachBatch(samples, func(start, end int, in map[string]*tensor.Tensor) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := s.Run(ctx, in, runtime.RunOptions{Tap: tap, TapValues: taps, TapsOnly: true}); err != nil {
			return fmt.Errorf("samples %d..%d: %w", start, end-1, err)
		}
		if err := after(); err != nil {
			return fmt.Errorf("samples %d..%d: %w", start, end-1, err)
		}
		return nil
	})
}

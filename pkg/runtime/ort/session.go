//go:build ort

package ort

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Optimization is a graph optimization level. The zero value is ONNX
// Runtime's own default, every optimization.
type Optimization int

// The graph optimization levels of ONNX Runtime.
const (
	OptimizeAll Optimization = iota
	OptimizeExtended
	OptimizeBasic
	OptimizeNone
)

func (o Optimization) String() string {
	switch o {
	case OptimizeAll:
		return "all"
	case OptimizeExtended:
		return "extended"
	case OptimizeBasic:
		return "basic"
	case OptimizeNone:
		return "none"
	}
	return fmt.Sprintf("optimization(%d)", int(o))
}

// ortLevel is the GraphOptimizationLevel enum value.
func (o Optimization) ortLevel() (int32, error) {
	switch o {
	case OptimizeAll:
		return 99, nil
	case OptimizeExtended:
		return 2, nil
	case OptimizeBasic:
		return 1, nil
	case OptimizeNone:
		return 0, nil
	}
	return 0, fmt.Errorf("unknown graph optimization level %d", int(o))
}

// ConfigEntry is one session configuration key and value
// (onnxruntime_session_options_config_keys.h).
type ConfigEntry struct{ Key, Value string }

// SessionOptions configures a session.
type SessionOptions struct {
	// IntraOpThreads is the number of threads inside one operator; 0 lets
	// ONNX Runtime pick (one per physical core).
	IntraOpThreads int
	// InterOpThreads is the number of threads across operators; it only
	// matters with Parallel. 0 lets ONNX Runtime pick.
	InterOpThreads int
	// Parallel runs independent branches concurrently.
	Parallel     bool
	Optimization Optimization
	// OptimizedModelPath, when set, is where ONNX Runtime writes the
	// optimized graph, for inspection.
	OptimizedModelPath string
	// ExternalDataDir is where external data of a model given as bytes is
	// looked up (a model given as a file uses the file's directory).
	ExternalDataDir string
	// Config entries are applied in order.
	Config []ConfigEntry
}

// Session is an ONNX Runtime inference session. Run may be called from
// several goroutines at once; Close must not overlap a Run.
type Session struct {
	lib     *Library
	h       uintptr
	inputs  []runtime.IOInfo
	outputs []runtime.IOInfo

	// cNames holds NUL-terminated copies of every input and output name, for
	// Run. The map keeps them alive, and the Go heap does not move objects;
	// they are not pinned, because a Pinner left pinned when a session is
	// dropped without Close makes the garbage collector panic.
	cNames map[string]unsafe.Pointer
	once   sync.Once
}

// NewSession loads a model file.
func (l *Library) NewSession(path string, o SessionOptions) (*Session, error) {
	return l.newSession(o, func(opts uintptr, out *uintptr) error {
		err := l.check("CreateSession", l.api.CreateSession(l.env, path, opts, out))
		if err != nil {
			return fmt.Errorf("model %s: %w", path, err)
		}
		return nil
	})
}

// NewSessionFromBytes loads a serialized model. External data, if any, is
// read from o.ExternalDataDir.
func (l *Library) NewSessionFromBytes(model []byte, o SessionOptions) (*Session, error) {
	if len(model) == 0 {
		return nil, errors.New("empty model")
	}
	if o.ExternalDataDir != "" {
		o.Config = append(slices.Clip(o.Config), ConfigEntry{"session.model_external_initializers_file_folder_path", o.ExternalDataDir})
	}
	return l.newSession(o, func(opts uintptr, out *uintptr) error {
		err := l.check("CreateSessionFromArray", l.api.CreateSessionFromArray(l.env, unsafe.Pointer(&model[0]), uintptr(len(model)), opts, out))
		goruntime.KeepAlive(model)
		return err
	})
}

func (l *Library) newSession(o SessionOptions, create func(opts uintptr, out *uintptr) error) (*Session, error) {
	var opts uintptr
	if err := l.check("CreateSessionOptions", l.api.CreateSessionOptions(&opts)); err != nil {
		return nil, err
	}
	defer l.api.ReleaseSessionOptions(opts)
	if err := l.applyOptions(opts, o); err != nil {
		return nil, err
	}
	s := &Session{lib: l}
	if err := create(opts, &s.h); err != nil {
		return nil, err
	}
	if err := s.describe(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (l *Library) applyOptions(opts uintptr, o SessionOptions) error {
	if o.IntraOpThreads < 0 || o.InterOpThreads < 0 {
		return fmt.Errorf("thread counts must not be negative (intra-op %d, inter-op %d)", o.IntraOpThreads, o.InterOpThreads)
	}
	level, err := o.Optimization.ortLevel()
	if err != nil {
		return err
	}
	mode := int32(0)
	if o.Parallel {
		mode = 1
	}
	steps := []struct {
		op     string
		status func() uintptr
	}{
		{"SetSessionLogSeverityLevel", func() uintptr { return l.api.SetSessionLogSeverityLevel(opts, logFatal) }},
		{"SetIntraOpNumThreads", func() uintptr { return l.api.SetIntraOpNumThreads(opts, int32(o.IntraOpThreads)) }},
		{"SetInterOpNumThreads", func() uintptr { return l.api.SetInterOpNumThreads(opts, int32(o.InterOpThreads)) }},
		{"SetSessionExecutionMode", func() uintptr { return l.api.SetSessionExecutionMode(opts, mode) }},
		{"SetSessionGraphOptimizationLevel", func() uintptr { return l.api.SetSessionGraphOptimizationLevel(opts, level) }},
	}
	for _, st := range steps {
		if err := l.check(st.op, st.status()); err != nil {
			return err
		}
	}
	if o.OptimizedModelPath != "" {
		if err := l.check("SetOptimizedModelFilePath", l.api.SetOptimizedModelFilePath(opts, o.OptimizedModelPath)); err != nil {
			return err
		}
	}
	for _, c := range o.Config {
		if err := l.check("AddSessionConfigEntry", l.api.AddSessionConfigEntry(opts, c.Key, c.Value)); err != nil {
			return fmt.Errorf("session config %s=%q: %w", c.Key, c.Value, err)
		}
	}
	return nil
}

// describe reads the names, element types and shapes of inputs and outputs.
func (s *Session) describe() error {
	l := s.lib
	s.cNames = map[string]unsafe.Pointer{}
	for _, side := range []struct {
		what    string
		count   func(uintptr, *uintptr) uintptr
		name    func(uintptr, uintptr, uintptr, *unsafe.Pointer) uintptr
		typ     func(uintptr, uintptr, *uintptr) uintptr
		infos   *[]runtime.IOInfo
		countOp string
	}{
		{"input", l.api.SessionGetInputCount, l.api.SessionGetInputName, l.api.SessionGetInputTypeInfo, &s.inputs, "SessionGetInputCount"},
		{"output", l.api.SessionGetOutputCount, l.api.SessionGetOutputName, l.api.SessionGetOutputTypeInfo, &s.outputs, "SessionGetOutputCount"},
	} {
		var n uintptr
		if err := l.check(side.countOp, side.count(s.h, &n)); err != nil {
			return err
		}
		for i := range n {
			var p unsafe.Pointer
			if err := l.check("SessionGet"+side.what+"Name", side.name(s.h, i, l.alloc, &p)); err != nil {
				return err
			}
			name := goString(p)
			if err := l.check("AllocatorFree", l.api.AllocatorFree(l.alloc, p)); err != nil {
				return err
			}
			var ti uintptr
			if err := l.check("SessionGet"+side.what+"TypeInfo", side.typ(s.h, i, &ti)); err != nil {
				return err
			}
			info, err := l.ioInfo(ti)
			l.api.ReleaseTypeInfo(ti)
			if err != nil {
				return fmt.Errorf("%s %q: %w", side.what, name, err)
			}
			info.Name = name
			*side.infos = append(*side.infos, info)
			s.cName(name)
		}
	}
	return nil
}

// cName returns the pinned C copy of name, making it on first use.
func (s *Session) cName(name string) unsafe.Pointer {
	if p, ok := s.cNames[name]; ok {
		return p
	}
	b := append([]byte(name), 0)
	p := unsafe.Pointer(&b[0])
	s.cNames[name] = p
	return p
}

// ioInfo reads an OrtTypeInfo of a tensor.
func (l *Library) ioInfo(ti uintptr) (runtime.IOInfo, error) {
	var info runtime.IOInfo
	var onnxType int32
	if err := l.check("GetOnnxTypeFromTypeInfo", l.api.GetOnnxTypeFromTypeInfo(ti, &onnxType)); err != nil {
		return info, err
	}
	const onnxTypeTensor = 1
	if onnxType != onnxTypeTensor {
		return info, fmt.Errorf("is a %s, only tensors are supported", onnxTypeName(onnxType))
	}
	var tsi uintptr // owned by ti
	if err := l.check("CastTypeInfoToTensorInfo", l.api.CastTypeInfoToTensorInfo(ti, &tsi)); err != nil {
		return info, err
	}
	dt, dims, err := l.typeAndShape(tsi)
	if err != nil {
		return info, err
	}
	info.DType, info.Shape = dt, dims
	if len(dims) > 0 {
		params := make([]unsafe.Pointer, len(dims))
		if err := l.check("GetSymbolicDimensions", l.api.GetSymbolicDimensions(tsi, unsafe.Pointer(&params[0]), uintptr(len(params)))); err != nil {
			return info, err
		}
		info.DimParams = make([]string, len(dims))
		for i, p := range params {
			info.DimParams[i] = goString(p)
		}
	}
	return info, nil
}

func onnxTypeName(t int32) string {
	names := [...]string{"unknown type", "tensor", "sequence", "map", "opaque", "sparse tensor", "optional"}
	if t >= 0 && int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("ONNX type %d", t)
}

// typeAndShape reads an OrtTensorTypeAndShapeInfo. Unknown dimensions are -1.
func (l *Library) typeAndShape(tsi uintptr) (tensor.DType, []int64, error) {
	var et int32
	if err := l.check("GetTensorElementType", l.api.GetTensorElementType(tsi, &et)); err != nil {
		return 0, nil, err
	}
	var rank uintptr
	if err := l.check("GetDimensionsCount", l.api.GetDimensionsCount(tsi, &rank)); err != nil {
		return 0, nil, err
	}
	dims := make([]int64, rank)
	if rank > 0 {
		if err := l.check("GetDimensions", l.api.GetDimensions(tsi, unsafe.Pointer(&dims[0]), rank)); err != nil {
			return 0, nil, err
		}
	}
	// ONNX Runtime numbers element types as ONNX TensorProto.DataType does.
	return tensor.DType(et), dims, nil
}

// Inputs describes the model inputs, in the model's order.
func (s *Session) Inputs() []runtime.IOInfo { return s.inputs }

// Outputs describes the model outputs, in the model's order.
func (s *Session) Outputs() []runtime.IOInfo { return s.outputs }

// Close releases the session. It is safe to call more than once.
func (s *Session) Close() error {
	s.once.Do(func() {
		if s.h != 0 {
			s.lib.api.ReleaseSession(s.h)
			s.h = 0
		}
	})
	return nil
}

// Run computes the named outputs (every output when names is nil). Inputs
// are handed to ONNX Runtime without copying; outputs are copied into Go
// memory. Cancelling ctx stops a run in progress.
func (s *Session) Run(ctx context.Context, inputs map[string]*tensor.Tensor, names []string) (map[string]*tensor.Tensor, error) {
	l := s.lib
	if s.h == 0 {
		return nil, errors.New("onnxruntime session is closed")
	}
	if names == nil {
		for _, o := range s.outputs {
			names = append(names, o.Name)
		}
	}
	outNames := make([]unsafe.Pointer, len(names))
	for i, n := range names {
		p, ok := s.cNames[n]
		if !ok {
			return nil, fmt.Errorf("model has no output %q", n)
		}
		outNames[i] = p
	}
	var pin goruntime.Pinner
	defer pin.Unpin()
	inNames := make([]unsafe.Pointer, 0, len(s.inputs))
	inVals := make([]uintptr, 0, len(s.inputs))
	defer func() {
		for _, v := range inVals {
			l.api.ReleaseValue(v)
		}
	}()
	for _, in := range s.inputs {
		t, ok := inputs[in.Name]
		if !ok || t == nil {
			return nil, fmt.Errorf("input %q (%s) is missing", in.Name, in.DType)
		}
		if err := checkInput(in, t); err != nil {
			return nil, err
		}
		v, err := l.newValue(t, &pin)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		inNames = append(inNames, s.cNames[in.Name])
		inVals = append(inVals, v)
	}
	if len(inputs) != len(s.inputs) {
		for _, name := range sortedKeys(inputs) {
			if !slices.ContainsFunc(s.inputs, func(i runtime.IOInfo) bool { return i.Name == name }) {
				return nil, fmt.Errorf("model has no input %q (inputs: %s)", name, ioNames(s.inputs))
			}
		}
	}
	outVals := make([]uintptr, len(names))
	defer func() {
		for _, v := range outVals {
			if v != 0 {
				l.api.ReleaseValue(v)
			}
		}
	}()
	var inNamesPtr, inValsPtr unsafe.Pointer
	if len(inVals) > 0 {
		inNamesPtr, inValsPtr = unsafe.Pointer(&inNames[0]), unsafe.Pointer(&inVals[0])
	}
	var outNamesPtr, outValsPtr unsafe.Pointer
	if len(names) > 0 {
		outNamesPtr, outValsPtr = unsafe.Pointer(&outNames[0]), unsafe.Pointer(&outVals[0])
	}
	err := l.withRunOptions(ctx, func(ro uintptr) error {
		return l.check("Run", l.api.Run(s.h, ro, inNamesPtr, inValsPtr, uintptr(len(inVals)), outNamesPtr, uintptr(len(names)), outValsPtr))
	})
	goruntime.KeepAlive(inNames)
	goruntime.KeepAlive(outNames)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("onnxruntime run: %w", ctx.Err())
		}
		return nil, err
	}
	out := make(map[string]*tensor.Tensor, len(names))
	for i, n := range names {
		t, err := l.tensorOf(outVals[i])
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// withRunOptions runs fn with an OrtRunOptions that is told to terminate
// when ctx is cancelled.
func (l *Library) withRunOptions(ctx context.Context, fn func(ro uintptr) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil {
		return fn(0)
	}
	var ro uintptr
	if err := l.check("CreateRunOptions", l.api.CreateRunOptions(&ro)); err != nil {
		return err
	}
	defer l.api.ReleaseRunOptions(ro)
	done := make(chan struct{})
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case <-ctx.Done():
			// The status only reports a null argument; nothing to do with it.
			_ = l.check("RunOptionsSetTerminate", l.api.RunOptionsSetTerminate(ro))
		case <-done:
		}
	}()
	err := fn(ro)
	close(done)
	<-watcher
	return err
}

// checkInput compares a tensor with the declared input, so that data that
// does not fit is an InputError naming the input (ONNX Runtime would also
// refuse it, with a less specific message).
func checkInput(in runtime.IOInfo, t *tensor.Tensor) error {
	fits := t.DType == in.DType
	if len(in.Shape) > 0 {
		fits = fits && len(t.Shape) == len(in.Shape)
		for i := 0; fits && i < len(in.Shape); i++ {
			fits = in.Shape[i] < 0 || int64(t.Shape[i]) == in.Shape[i]
		}
	}
	if fits {
		return nil
	}
	return &runtime.InputError{Input: in.Name, Expected: describeInput(in), Given: t.String()}
}

// describeInput writes a declared input like tensor.Tensor.String, with
// symbolic dimensions by name: float32[N 3].
func describeInput(in runtime.IOInfo) string {
	dims := make([]string, len(in.Shape))
	for i, d := range in.Shape {
		switch {
		case i < len(in.DimParams) && in.DimParams[i] != "":
			dims[i] = in.DimParams[i]
		case d < 0:
			dims[i] = "?"
		default:
			dims[i] = fmt.Sprint(d)
		}
	}
	return in.DType.String() + "[" + strings.Join(dims, " ") + "]"
}

func ioNames(infos []runtime.IOInfo) string {
	s := ""
	for i, in := range infos {
		if i > 0 {
			s += ", "
		}
		s += in.Name
	}
	return s
}

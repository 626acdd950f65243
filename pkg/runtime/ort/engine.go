//go:build ort

package ort

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// EngineName is the name the engine registers under and Engine returns.
const EngineName = "ort"

// Engine is a model running in ONNX Runtime as a runtime.Session.
//
// Taps: ONNX Runtime only hands out graph outputs, so a run with taps runs a
// copy of the model whose graph also outputs the tapped values. The copies
// are built on first use, one per distinct set of tapped values, and kept
// until Close. Each tapped value reaches the Tap once per Run, after the
// run, in the order of RunOptions.TapValues (graph order when nil).
type Engine struct {
	lib   *Library
	model *onnxgraph.Model
	opts  SessionOptions
	base  *Session

	mu   sync.Mutex
	taps map[string]*Session
}

var _ runtime.Session = (*Engine)(nil)

// Open compiles m for ONNX Runtime with the library LibraryPath resolves.
// Its signature is runtime.Constructor's.
func Open(m *onnxgraph.Model, opts runtime.Options) (runtime.Session, error) {
	lib, err := Default()
	if err != nil {
		return nil, err
	}
	return lib.Open(m, SessionOptions{IntraOpThreads: opts.Threads, InterOpThreads: 1})
}

// Open compiles m with explicit session options. The model is serialized
// from m.Proto, so edits not yet saved are what runs; external data is read
// from m.Dir.
//
// A model with float8 QuantizeLinear/DequantizeLinear runs with the graph
// optimizers that mishandle float8 in ONNX Runtime 1.23 disabled (see
// float8Optimizers; one info line in the log says so), every other
// optimization of so kept. A model with float4 constants that ONNX Runtime
// refuses gets an error that says so and how to write one it accepts.
func (l *Library) Open(m *onnxgraph.Model, so SessionOptions) (*Engine, error) {
	b, err := m.Marshal(m.Proto)
	if err != nil {
		return nil, fmt.Errorf("serialize model for onnxruntime: %w", err)
	}
	if so.ExternalDataDir == "" {
		so.ExternalDataDir = m.Dir
	}
	if so.Optimization != OptimizeNone && hasFloat8QDQ(m) {
		so = float8Options(so)
		attrs := []any{disableQuantQDQKey, 1, disableOptimizersKey, strings.Join(float8Optimizers, ";")}
		if m.Path != "" {
			attrs = append([]any{"model", m.Path}, attrs...)
		}
		slog.Info("onnxruntime: the model has float8 QuantizeLinear/DequantizeLinear; disabling the graph optimizers that mishandle float8 in ONNX Runtime 1.23 (other optimizations stay on)", attrs...)
	}
	s, err := l.NewSessionFromBytes(b, so)
	if err != nil {
		if f4 := float4Tensors(m); len(f4) > 0 {
			err = l.float4Error(f4, err)
		}
		if m.Path != "" {
			return nil, fmt.Errorf("model %s: %w", m.Path, err)
		}
		return nil, err
	}
	return &Engine{lib: l, model: m, opts: so, base: s, taps: map[string]*Session{}}, nil
}

// Engine returns "ort".
func (e *Engine) Engine() string { return EngineName }

// Inputs describes the model inputs as ONNX Runtime sees them.
func (e *Engine) Inputs() []runtime.IOInfo { return e.base.Inputs() }

// Outputs describes the model outputs as ONNX Runtime sees them.
func (e *Engine) Outputs() []runtime.IOInfo { return e.base.Outputs() }

// Close releases every session of the engine.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range sortedKeys(e.taps) {
		e.taps[k].Close()
	}
	e.taps = map[string]*Session{}
	return e.base.Close()
}

// Run computes the model outputs, and hands the tapped values to opts.Tap.
func (e *Engine) Run(ctx context.Context, inputs map[string]*tensor.Tensor, opts runtime.RunOptions) (map[string]*tensor.Tensor, error) {
	if opts.Tap == nil {
		return e.base.Run(ctx, inputs, nil)
	}
	tapped := opts.TapValues
	if tapped == nil {
		tapped = e.computedValues()
	}
	isOutput := map[string]bool{}
	var outNames []string
	for _, o := range e.base.Outputs() {
		isOutput[o.Name] = true
		outNames = append(outNames, o.Name)
	}
	var extra []string
	seen := map[string]bool{}
	for _, name := range tapped {
		if seen[name] || isOutput[name] {
			continue
		}
		seen[name] = true
		if _, ok := inputs[name]; ok {
			continue
		}
		v := e.model.Graph.Value(name)
		if v == nil && e.inSubgraph(name) {
			return nil, fmt.Errorf("tap: value %q is inside the subgraph of an If, Loop or Scan node, and ONNX Runtime can only output the main graph's values; use the built-in engine (--engine go) to observe it", name)
		}
		if v == nil || v.Graph != e.model.Graph {
			return nil, fmt.Errorf("tap: the model's main graph has no value %q", name)
		}
		extra = append(extra, name)
	}
	s := e.base
	if len(extra) > 0 {
		var err error
		if s, err = e.tapSession(extra); err != nil {
			return nil, err
		}
	}
	res, err := s.Run(ctx, inputs, append(outNames, extra...))
	if err != nil {
		return nil, err
	}
	for _, name := range tapped {
		t := res[name]
		if t == nil {
			t = inputs[name]
		}
		opts.Tap(name, t)
	}
	for _, name := range extra {
		delete(res, name)
	}
	return res, nil
}

// inSubgraph reports whether name is a value of one of the model's subgraphs.
func (e *Engine) inSubgraph(name string) bool {
	for _, g := range e.model.Graph.Graphs()[1:] {
		if g.Value(name) != nil {
			return true
		}
	}
	return false
}

// computedValues lists the outputs of every node of the main graph, in
// topological order: what a Tap sees when TapValues is nil.
func (e *Engine) computedValues() []string {
	var names []string
	for _, n := range e.model.Graph.Nodes {
		for _, v := range n.Outputs {
			if v != nil {
				names = append(names, v.Name)
			}
		}
	}
	return names
}

// tapSession returns the session of the model copy that also outputs extra.
func (e *Engine) tapSession(extra []string) (*Session, error) {
	key := strings.Join(extra, "\x00")
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.taps[key]; ok {
		return s, nil
	}
	b, err := tapModel(e.model, extra)
	if err != nil {
		return nil, err
	}
	s, err := e.lib.NewSessionFromBytes(b, e.opts)
	if err != nil {
		return nil, fmt.Errorf("model with tapped values as outputs: %w", err)
	}
	e.taps[key] = s
	return s, nil
}

// tapModel serializes a copy of m whose graph also outputs the named values.
// Each added output carries the value's declared type when the model has
// one; ONNX Runtime infers the rest.
func tapModel(m *onnxgraph.Model, extra []string) ([]byte, error) {
	mp := proto.Clone(m.Proto).(*onnxpb.ModelProto)
	g := mp.GetGraph()
	for _, name := range extra {
		vi := &onnxpb.ValueInfoProto{Name: proto.String(name)}
		v := m.Graph.Value(name)
		switch {
		case v != nil && v.Type != nil:
			vi.Type = proto.Clone(v.Type).(*onnxpb.TypeProto)
		case v != nil && v.DType() != tensor.Undefined:
			vi.Type = &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
				TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(v.DType()))}}}
		}
		g.Output = append(g.Output, vi)
	}
	b, err := m.Marshal(mp)
	if err != nil {
		return nil, fmt.Errorf("serialize model with tapped outputs: %w", err)
	}
	return b, nil
}

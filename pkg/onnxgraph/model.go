// Package onnxgraph loads and saves ONNX models and gives a read-only view
// of their graphs: nodes in topological order, values with producers and
// consumers, constants, declared shapes and the module scopes recovered from
// the exporter's metadata.
package onnxgraph

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// Model is a loaded ONNX model: the protobuf and the graph view over it.
// The view is built at load; callers that edit Proto must call Rebuild.
type Model struct {
	Proto *onnxpb.ModelProto
	// Path is the file the model was loaded from ("" when loaded from bytes).
	Path string
	// Dir is the directory external data locations are relative to.
	Dir   string
	Graph *Graph

	opsets map[string]int64
	// Functions are the model's local functions by "domain:name".
	functions map[string]*onnxpb.FunctionProto
	// stores hold the bytes of tensors kept out of memory without an
	// external data file of their own (see store).
	stores []store
}

// FileError is an error about a model file: it names the file.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("model %s: %v", e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// Load reads an ONNX model file. External data is checked now (locations
// inside the model's directory, files present and long enough) and read
// when a tensor is decoded. A file of 16 MiB or more is loaded lean: the
// raw bytes of its large initializers stay in the file until they are
// decoded (see loadLean), so its weights are never all in memory at once.
func Load(path string) (*Model, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() >= leanFileBytes && fi.Size() <= MaxProtoSize {
		m, err := loadLean(path, leanTensorBytes)
		if err != nil {
			return nil, &FileError{Path: path, Err: err}
		}
		m.Path = path
		return m, nil
	}
	b, err := ReadRegularFile(path, MaxProtoSize)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	m, err := load(b, filepath.Dir(path))
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	m.Path = path
	return m, nil
}

// LoadBytes decodes a serialized ModelProto. dir is where external data
// locations are looked up ("" when the model must have none).
func LoadBytes(b []byte, dir string) (*Model, error) {
	return load(b, dir)
}

func load(b []byte, dir string) (*Model, error) {
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, mp); err != nil {
		return nil, fmt.Errorf("not a valid ONNX protobuf (truncated or corrupt?): %w", err)
	}
	if mp.Graph == nil {
		return nil, errors.New("not an ONNX model: no graph")
	}
	return FromProto(mp, dir)
}

// FromProto wraps an in-memory ModelProto.
func FromProto(mp *onnxpb.ModelProto, dir string) (*Model, error) {
	return fromProto(mp, dir, nil)
}

func fromProto(mp *onnxpb.ModelProto, dir string, stores []store) (*Model, error) {
	m := &Model{Proto: mp, Dir: dir, stores: stores}
	if err := m.Rebuild(); err != nil {
		return nil, err
	}
	if err := m.checkTensors(); err != nil {
		return nil, err
	}
	return m, nil
}

// Rebuild recomputes the graph view after Proto was edited.
func (m *Model) Rebuild() error {
	m.opsets = map[string]int64{}
	for _, o := range m.Proto.GetOpsetImport() {
		m.opsets[NormalizeDomain(o.GetDomain())] = o.GetVersion()
	}
	m.functions = map[string]*onnxpb.FunctionProto{}
	for _, f := range m.Proto.GetFunctions() {
		m.functions[f.GetDomain()+":"+f.GetName()] = f
	}
	g, err := buildGraph(m, m.Proto.GetGraph(), nil, "")
	if err != nil {
		return err
	}
	m.Graph = g
	assignModules(m)
	return nil
}

// Opset returns the imported opset version of domain ("" or "ai.onnx" is
// the default domain), 0 when the model imports none.
func (m *Model) Opset(domain string) int64 { return m.opsets[NormalizeDomain(domain)] }

// Opsets returns the imported opsets by domain ("" for the default domain).
func (m *Model) Opsets() map[string]int64 {
	out := make(map[string]int64, len(m.opsets))
	for k, v := range m.opsets {
		out[k] = v
	}
	return out
}

// Function returns the local function a node with this domain and op type
// calls, or nil.
func (m *Model) Function(domain, opType string) *onnxpb.FunctionProto {
	return m.functions[domain+":"+opType]
}

// AllTensors calls fn for every TensorProto that holds data in the model:
// initializers of every graph (subgraphs and training graphs included) and
// tensor attributes of every node. Order is deterministic (file order).
func (m *Model) AllTensors(fn func(t *onnxpb.TensorProto)) { allTensors(m.Proto, fn) }

func allTensors(mp *onnxpb.ModelProto, fn func(t *onnxpb.TensorProto)) {
	var walkGraph func(g *onnxpb.GraphProto)
	var walkNodes func(nodes []*onnxpb.NodeProto)
	walkAttr := func(a *onnxpb.AttributeProto) {
		if a.T != nil {
			fn(a.T)
		}
		for _, t := range a.Tensors {
			fn(t)
		}
		if a.SparseTensor != nil {
			fn(a.SparseTensor.GetValues())
			fn(a.SparseTensor.GetIndices())
		}
		if a.G != nil {
			walkGraph(a.G)
		}
		for _, g := range a.Graphs {
			walkGraph(g)
		}
	}
	walkNodes = func(nodes []*onnxpb.NodeProto) {
		for _, n := range nodes {
			for _, a := range n.GetAttribute() {
				walkAttr(a)
			}
		}
	}
	walkGraph = func(g *onnxpb.GraphProto) {
		if g == nil {
			return
		}
		for _, t := range g.GetInitializer() {
			fn(t)
		}
		for _, s := range g.GetSparseInitializer() {
			fn(s.GetValues())
			fn(s.GetIndices())
		}
		walkNodes(g.GetNode())
	}
	walkGraph(mp.GetGraph())
	for _, ti := range mp.GetTrainingInfo() {
		walkGraph(ti.GetInitialization())
		walkGraph(ti.GetAlgorithm())
	}
	for _, f := range mp.GetFunctions() {
		walkNodes(f.GetNode())
	}
}

// ExternalRef is where a tensor's bytes live outside the model file.
type ExternalRef struct {
	Location string
	Offset   int64
	// Length is -1 when the tensor runs to the end of the file.
	Length int64
}

// IsExternal reports whether t keeps its data outside the model file.
func IsExternal(t *onnxpb.TensorProto) bool {
	return t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL
}

// ExternalRefOf parses t's external_data entries.
func ExternalRefOf(t *onnxpb.TensorProto) (ExternalRef, error) {
	ref := ExternalRef{Length: -1}
	for _, kv := range t.GetExternalData() {
		var err error
		switch kv.GetKey() {
		case "location":
			ref.Location = kv.GetValue()
		case "offset":
			ref.Offset, err = strconv.ParseInt(kv.GetValue(), 10, 64)
		case "length":
			ref.Length, err = strconv.ParseInt(kv.GetValue(), 10, 64)
		}
		if err != nil || ref.Offset < 0 || ref.Length < -1 {
			return ref, fmt.Errorf("tensor %q: bad external_data %s %q", t.GetName(), kv.GetKey(), kv.GetValue())
		}
	}
	if ref.Location == "" {
		return ref, fmt.Errorf("tensor %q: external data without a location", t.GetName())
	}
	return ref, nil
}

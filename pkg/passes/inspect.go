package passes

import (
	"sort"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// ModelSummary is what `coreaiq inspect` reports about a model. Its JSON
// form is part of the CLI contract.
type ModelSummary struct {
	Model           string           `json:"model,omitempty" yaml:"model,omitempty"`
	Producer        string           `json:"producer" yaml:"producer"`
	ProducerVersion string           `json:"producer_version" yaml:"producer_version"`
	IRVersion       int64            `json:"ir_version" yaml:"ir_version"`
	Opsets          map[string]int64 `json:"opsets" yaml:"opsets"`
	Inputs          []TensorInfo     `json:"inputs" yaml:"inputs"`
	Outputs         []TensorInfo     `json:"outputs" yaml:"outputs"`
	OpTypes         map[string]int   `json:"op_types" yaml:"op_types"`
	Nodes           []NodeInfo       `json:"nodes" yaml:"nodes"`
	Initializers    InitializerStats `json:"initializers" yaml:"initializers"`
	Modules         []ModuleInfo     `json:"modules" yaml:"modules"`
}

// TensorInfo describes a graph input or output.
type TensorInfo struct {
	Name  string `json:"name" yaml:"name"`
	DType string `json:"dtype" yaml:"dtype"`
	// Shape holds sizes as numbers and symbolic dims as strings; nil when
	// the rank is unknown.
	Shape []any `json:"shape" yaml:"shape"`
}

// NodeInfo describes one node.
type NodeInfo struct {
	Name       string   `json:"name" yaml:"name"`
	OpType     string   `json:"op_type" yaml:"op_type"`
	Domain     string   `json:"domain" yaml:"domain"`
	Module     string   `json:"module" yaml:"module"`
	ModuleType string   `json:"module_type" yaml:"module_type"`
	Inputs     []string `json:"inputs" yaml:"inputs"`
	Outputs    []string `json:"outputs" yaml:"outputs"`
}

// InitializerStats counts the model's constant tensors.
type InitializerStats struct {
	Count   int          `json:"count" yaml:"count"`
	Bytes   int64        `json:"bytes" yaml:"bytes"`
	ByDType []DTypeTotal `json:"by_dtype" yaml:"by_dtype"`
}

// DTypeTotal is the parameter count and storage of one element type.
type DTypeTotal struct {
	DType      string `json:"dtype" yaml:"dtype"`
	Tensors    int    `json:"tensors" yaml:"tensors"`
	Parameters int64  `json:"parameters" yaml:"parameters"`
	Bytes      int64  `json:"bytes" yaml:"bytes"`
}

// ModuleInfo is one module of the scope tree, listed depth first.
type ModuleInfo struct {
	Name  string `json:"name" yaml:"name"`
	Type  string `json:"type,omitempty" yaml:"type,omitempty"`
	Depth int    `json:"depth" yaml:"depth"`
	Nodes int    `json:"nodes" yaml:"nodes"`
}

// Summarize builds the inspect report of a model.
func Summarize(m *onnxgraph.Model) *ModelSummary {
	g := m.Graph
	s := &ModelSummary{
		Producer:        m.Proto.GetProducerName(),
		ProducerVersion: m.Proto.GetProducerVersion(),
		IRVersion:       m.Proto.GetIrVersion(),
		Opsets:          map[string]int64{},
		OpTypes:         map[string]int{},
		Inputs:          []TensorInfo{},
		Outputs:         []TensorInfo{},
		Nodes:           []NodeInfo{},
	}
	for _, o := range m.Proto.GetOpsetImport() {
		d := o.GetDomain()
		if d == "" {
			d = "ai.onnx"
		}
		s.Opsets[d] = o.GetVersion()
	}
	for _, v := range g.Inputs {
		s.Inputs = append(s.Inputs, tensorInfo(v))
	}
	for _, v := range g.Outputs {
		s.Outputs = append(s.Outputs, tensorInfo(v))
	}
	for _, n := range g.AllNodes() { // subgraph nodes too: they are quantized like the others
		key := n.OpType
		if n.Domain != "" {
			key = n.Domain + "." + n.OpType
		}
		s.OpTypes[key]++
		ni := NodeInfo{Name: n.Name, OpType: n.OpType, Domain: n.Domain, Module: n.Module, ModuleType: n.ModuleType,
			Inputs: n.Proto.GetInput(), Outputs: n.Proto.GetOutput()}
		if ni.Inputs == nil {
			ni.Inputs = []string{}
		}
		if ni.Outputs == nil {
			ni.Outputs = []string{}
		}
		s.Nodes = append(s.Nodes, ni)
	}
	s.Initializers = initializerStats(m)
	var walk func(mod *onnxgraph.Module, depth int)
	walk = func(mod *onnxgraph.Module, depth int) {
		s.Modules = append(s.Modules, ModuleInfo{Name: mod.Name, Type: mod.Type, Depth: depth, Nodes: mod.Nodes})
		for _, c := range mod.Children {
			walk(c, depth+1)
		}
	}
	walk(g.Modules(), 0)
	return s
}

func tensorInfo(v *onnxgraph.Value) TensorInfo {
	ti := TensorInfo{Name: v.Name, DType: v.DType().String()}
	if dims, ok := v.Shape(); ok {
		ti.Shape = []any{}
		for _, d := range dims {
			if d.Size >= 0 && d.Param == "" {
				ti.Shape = append(ti.Shape, d.Size)
			} else {
				ti.Shape = append(ti.Shape, d.String())
			}
		}
	}
	return ti
}

// initializerStats totals the initializers of the main graph and its subgraphs.
func initializerStats(m *onnxgraph.Model) InitializerStats {
	byType := map[tensor.DType]*DTypeTotal{}
	var st InitializerStats
	add := func(t *onnxpb.TensorProto) {
		dt := tensor.DType(t.GetDataType())
		n := int64(1)
		for _, d := range t.GetDims() {
			n *= d
		}
		var bytes int64
		if dt == tensor.String {
			for _, b := range t.GetStringData() {
				bytes += int64(len(b))
			}
		} else {
			bytes = int64(dt.RawSize(int(n)))
		}
		tot := byType[dt]
		if tot == nil {
			tot = &DTypeTotal{DType: dt.String()}
			byType[dt] = tot
		}
		tot.Tensors++
		tot.Parameters += n
		tot.Bytes += bytes
		st.Count++
		st.Bytes += bytes
	}
	var walk func(g *onnxpb.GraphProto)
	walk = func(g *onnxpb.GraphProto) {
		for _, t := range g.GetInitializer() {
			add(t)
		}
		for _, n := range g.GetNode() {
			for _, a := range n.GetAttribute() {
				if a.G != nil {
					walk(a.G)
				}
				for _, sg := range a.Graphs {
					walk(sg)
				}
			}
		}
	}
	walk(m.Proto.GetGraph())
	st.ByDType = []DTypeTotal{}
	for _, t := range byType {
		st.ByDType = append(st.ByDType, *t)
	}
	sort.Slice(st.ByDType, func(i, j int) bool { return st.ByDType[i].DType < st.ByDType[j].DType })
	return st
}

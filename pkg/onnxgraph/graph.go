package onnxgraph

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Graph is a read-only view of a GraphProto: nodes in topological order,
// values with their producer and consumers, and constants. Subgraphs of
// If/Loop/Scan nodes are Graphs too, with Parent set; names they use from
// an enclosing scope resolve to the enclosing graph's Values.
type Graph struct {
	Proto  *onnxpb.GraphProto
	Name   string
	Parent *Graph
	// Owner is the If/Loop/Scan node whose attribute Attr holds the graph;
	// nil for the main graph.
	Owner *Node
	Attr  string
	// Model is the model the graph belongs to.
	Model *Model

	// Nodes in topological order (the file's order wherever it already is one).
	Nodes []*Node
	// Inputs are the graph inputs that are not initializers, in file order.
	Inputs []*Value
	// Outputs are the graph outputs, in file order.
	Outputs []*Value
	// Initializers in file order.
	Initializers []*Value

	values map[string]*Value
	byName map[string]*Node
}

// Node is one NodeProto with its inputs and outputs resolved to Values.
type Node struct {
	Proto *onnxpb.NodeProto
	// Name is the node's name, or a stable generated "<OpType>_<index>"
	// when the file has none. A node inside a subgraph is named by its
	// path, "<owner>/<attribute>/<name>" (loop/body/add), which makes
	// names unique across the model.
	Name   string
	OpType string
	// Domain is "" for the default ONNX domain ("ai.onnx" is normalised to "").
	Domain string
	// Index is the node's position in GraphProto.node.
	Index int
	Graph *Graph

	// Inputs are nil where an optional input is omitted (an empty name).
	Inputs  []*Value
	Outputs []*Value
	// OuterInputs are values of enclosing graphs that the node's subgraphs read.
	OuterInputs []*Value
	// Subgraphs are the GRAPH and GRAPHS attributes, keyed by attribute name
	// (GRAPHS entries as "name[i]").
	Subgraphs map[string]*Graph

	// Module is the dotted module path the node belongs to ("" is the root).
	Module string
	// ModuleType is the module's class when the exporter recorded it.
	ModuleType string
}

// Value is a named tensor in a graph.
type Value struct {
	Name string
	// Type is the declared type (from inputs, outputs or value_info), nil if none.
	Type *onnxpb.TypeProto
	// Producer is the node that computes the value; nil for graph inputs,
	// initializers and outer-scope values.
	Producer  *Node
	Consumers []*Node
	// Const is the initializer or Constant node tensor when the value is constant.
	Const *onnxpb.TensorProto
	// IsInitializer is set for initializers (Const is then the initializer).
	IsInitializer bool
	IsGraphInput  bool
	IsGraphOutput bool
	// Graph is the graph that defines the value.
	Graph *Graph
}

// Dim is one dimension of a declared shape: a size, or a symbolic name.
type Dim struct {
	Size  int64  // -1 when symbolic or unknown
	Param string // the symbolic name, if any
}

func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Size < 0:
		return "?"
	}
	return fmt.Sprint(d.Size)
}

// DType is the declared element type, or Undefined when the value has no
// declared tensor type.
func (v *Value) DType() tensor.DType {
	if v.Const != nil {
		return tensor.DType(v.Const.GetDataType())
	}
	if tt := v.Type.GetTensorType(); tt != nil {
		return tensor.DType(tt.GetElemType())
	}
	return tensor.Undefined
}

// Shape is the declared shape; ok is false when the rank is unknown.
// Constants report their actual dimensions.
func (v *Value) Shape() (dims []Dim, ok bool) {
	if v.Const != nil {
		for _, d := range v.Const.GetDims() {
			dims = append(dims, Dim{Size: d})
		}
		return dims, true
	}
	tt := v.Type.GetTensorType()
	if tt == nil || tt.Shape == nil {
		return nil, false
	}
	for _, d := range tt.Shape.GetDim() {
		switch x := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			dims = append(dims, Dim{Size: -1, Param: x.DimParam})
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			dims = append(dims, Dim{Size: x.DimValue})
		default:
			dims = append(dims, Dim{Size: -1})
		}
	}
	return dims, true
}

// Defined reports whether the value is defined in its graph (computed, an
// input or an initializer), not an outer value that a subgraph passes
// through to its outputs under the same name.
func (v *Value) Defined() bool { return v.Producer != nil || v.IsGraphInput || v.IsInitializer }

// IsConst reports whether the value is an initializer or a Constant output.
func (v *Value) IsConst() bool { return v.Const != nil }

// Value returns the value called name, looking through enclosing graphs.
func (g *Graph) Value(name string) *Value {
	for s := g; s != nil; s = s.Parent {
		if v, ok := s.values[name]; ok {
			return v
		}
	}
	return nil
}

// AllNodes returns the nodes of g and of every subgraph, in an order
// that is topological across scopes: each subgraph's nodes (recursively,
// subgraphs in attribute order) come right before the node that owns them,
// after every outer node whose values they read.
func (g *Graph) AllNodes() []*Node {
	var out []*Node
	var walk func(g *Graph)
	walk = func(g *Graph) {
		for _, n := range g.Nodes {
			for _, key := range sortedKeys(n.Subgraphs) {
				walk(n.Subgraphs[key])
			}
			out = append(out, n)
		}
	}
	walk(g)
	return out
}

// Graphs returns g and every subgraph, parents first.
func (g *Graph) Graphs() []*Graph {
	out := []*Graph{g}
	for _, n := range g.Nodes {
		for _, key := range sortedKeys(n.Subgraphs) {
			out = append(out, n.Subgraphs[key].Graphs()...)
		}
	}
	return out
}

// Node returns the node called name (generated names included), or nil.
func (g *Graph) Node(name string) *Node { return g.byName[name] }

// Values returns every value defined in this graph, sorted by name.
func (g *Graph) Values() []*Value {
	out := make([]*Value, 0, len(g.values))
	for _, v := range g.values {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Attr returns the attribute called name, or nil.
func (n *Node) Attr(name string) *onnxpb.AttributeProto {
	for _, a := range n.Proto.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// Metadata returns the node's metadata_props value for key.
func (n *Node) Metadata(key string) (string, bool) {
	for _, p := range n.Proto.GetMetadataProps() {
		if p.GetKey() == key {
			return p.GetValue(), true
		}
	}
	return "", false
}

// Opset returns the opset version the model imports for the node's domain
// (0 when it imports none).
func (n *Node) Opset() int64 { return n.Graph.Model.Opset(n.Domain) }

// String names the node for error messages: `node "conv1" (Conv)`.
func (n *Node) String() string { return fmt.Sprintf("node %q (%s)", n.Name, n.OpType) }

// NormalizeDomain maps "ai.onnx" to "", the two spellings of the default domain.
func NormalizeDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

// CycleError reports nodes that depend on each other.
type CycleError struct {
	Graph string
	Nodes []string
}

func (e *CycleError) Error() string {
	const show = 10
	names := e.Nodes
	more := ""
	if len(names) > show {
		more = fmt.Sprintf(" and %d more", len(names)-show)
		names = names[:show]
	}
	return fmt.Sprintf("graph %q has a cycle through nodes %s%s", e.Graph, strings.Join(quoteAll(names), ", "), more)
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

// buildGraph makes the view of gp. parent is nil for the main graph.
func buildGraph(m *Model, gp *onnxpb.GraphProto, owner *Node, attr string) (*Graph, error) {
	g := &Graph{Proto: gp, Name: gp.GetName(), Owner: owner, Attr: attr, Model: m,
		values: map[string]*Value{}, byName: map[string]*Node{}}
	prefix := ""
	if owner != nil {
		g.Parent = owner.Graph
		prefix = owner.Name + "/" + attr + "/"
	}
	declared := map[string]*onnxpb.TypeProto{}
	for _, vi := range gp.GetValueInfo() {
		declared[vi.GetName()] = vi.GetType()
	}
	for _, vi := range gp.GetOutput() {
		declared[vi.GetName()] = vi.GetType()
	}
	define := func(name string) *Value {
		v := g.values[name]
		if v == nil {
			v = &Value{Name: name, Graph: g, Type: declared[name]}
			g.values[name] = v
		}
		return v
	}
	for _, init := range gp.GetInitializer() {
		if v := g.values[init.GetName()]; v != nil && v.IsInitializer {
			return nil, fmt.Errorf("graph %q has two initializers named %q", g.Name, init.GetName())
		}
		v := define(init.GetName())
		v.Const, v.IsInitializer = init, true
		g.Initializers = append(g.Initializers, v)
	}
	for _, si := range gp.GetSparseInitializer() {
		v := define(si.GetValues().GetName())
		v.IsInitializer = true
	}
	for _, vi := range gp.GetInput() {
		v := define(vi.GetName())
		v.IsGraphInput = true
		if vi.GetType() != nil {
			v.Type = vi.GetType()
		}
		if !v.IsInitializer {
			g.Inputs = append(g.Inputs, v)
		}
	}

	nodes := make([]*Node, len(gp.GetNode()))
	used := map[string]bool{}
	for _, np := range gp.GetNode() {
		if np.GetName() != "" {
			used[prefix+np.GetName()] = true
		}
	}
	for i, np := range gp.GetNode() {
		n := &Node{Proto: np, Name: prefix + np.GetName(), OpType: np.GetOpType(),
			Domain: NormalizeDomain(np.GetDomain()), Index: i, Graph: g}
		if np.GetName() == "" {
			n.Name = uniqueName(fmt.Sprintf("%s%s_%d", prefix, n.OpType, i), used)
		} else if _, dup := g.byName[n.Name]; dup {
			// Duplicate node names are legal in practice; keep lookups unambiguous.
			n.Name = uniqueName(fmt.Sprintf("%s_%d", n.Name, i), used)
		}
		g.byName[n.Name] = n
		nodes[i] = n
		if err := checkAttrTypes(n); err != nil {
			return nil, err
		}
		for _, out := range np.GetOutput() {
			if out == "" {
				n.Outputs = append(n.Outputs, nil)
				continue
			}
			v := define(out)
			if v.Producer != nil {
				return nil, fmt.Errorf("value %q is produced by both %s and %s", out, v.Producer, n)
			}
			if v.IsInitializer || v.IsGraphInput {
				what := "an initializer"
				if !v.IsInitializer {
					what = "a graph input"
				}
				return nil, fmt.Errorf("%s writes %q, which is also %s", n, out, what)
			}
			v.Producer = n
			n.Outputs = append(n.Outputs, v)
		}
		if n.OpType == "Constant" && n.Domain == "" && len(n.Outputs) == 1 && n.Outputs[0] != nil {
			if t, err := constantTensor(np); err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			} else if t != nil {
				n.Outputs[0].Const = t
			}
		}
	}
	for _, vi := range gp.GetOutput() {
		v := g.Value(vi.GetName())
		if v == nil {
			return nil, fmt.Errorf("graph %q declares the output %q, which no node produces and is neither an input nor an initializer", g.Name, vi.GetName())
		}
		if v.Graph != g {
			// An outer-scope value passed through a subgraph's output.
			v = define(vi.GetName())
		}
		v.IsGraphOutput = true
		g.Outputs = append(g.Outputs, v)
	}
	// Subgraphs come after this graph's own values exist so that their outer
	// references resolve; inputs resolve last for the same reason.
	for _, n := range nodes {
		for _, a := range n.Proto.GetAttribute() {
			var subs []*onnxpb.GraphProto
			switch {
			case a.G != nil:
				subs = []*onnxpb.GraphProto{a.G}
			case len(a.Graphs) > 0:
				subs = a.Graphs
			default:
				continue
			}
			for i, sp := range subs {
				key := a.GetName()
				if a.G == nil {
					key = fmt.Sprintf("%s[%d]", key, i)
				}
				sg, err := buildGraph(m, sp, n, key)
				if err != nil {
					return nil, fmt.Errorf("%s attribute %q: %w", n, a.GetName(), err)
				}
				if n.Subgraphs == nil {
					n.Subgraphs = map[string]*Graph{}
				}
				n.Subgraphs[key] = sg
				for _, ov := range sg.outerRefs() {
					if !slices.Contains(n.OuterInputs, ov) {
						n.OuterInputs = append(n.OuterInputs, ov)
					}
				}
			}
		}
	}
	for _, n := range nodes {
		for _, in := range n.Proto.GetInput() {
			if in == "" {
				n.Inputs = append(n.Inputs, nil)
				continue
			}
			v := g.Value(in)
			if v == nil {
				return nil, fmt.Errorf("%s: input %q is not a graph input, an initializer or the output of any node", n, in)
			}
			n.Inputs = append(n.Inputs, v)
			v.Consumers = appendOnce(v.Consumers, n)
		}
		for _, v := range n.OuterInputs {
			v.Consumers = appendOnce(v.Consumers, n)
		}
	}
	order, err := topoSort(g.Name, nodes)
	if err != nil {
		return nil, err
	}
	g.Nodes = order
	return g, nil
}

// outerRefs lists the values of enclosing graphs that g (and its own
// subgraphs) read, in first-use order.
func (g *Graph) outerRefs() []*Value {
	var out []*Value
	seen := map[*Value]bool{}
	for _, n := range g.FileOrder() {
		refs := append([]*Value(nil), n.OuterInputs...)
		for _, in := range n.Proto.GetInput() {
			if in == "" {
				continue
			}
			if _, local := g.values[in]; local {
				continue
			}
			if v := g.Value(in); v != nil {
				refs = append(refs, v)
			}
		}
		for _, v := range refs {
			if v.Graph != g && !seen[v] && !g.encloses(v.Graph) {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// encloses reports whether h is g or one of g's subgraphs.
func (g *Graph) encloses(h *Graph) bool {
	for s := h; s != nil; s = s.Parent {
		if s == g {
			return true
		}
	}
	return false
}

// FileOrder returns the nodes in file order (topological order is Nodes).
func (g *Graph) FileOrder() []*Node {
	out := make([]*Node, len(g.byName))
	i := 0
	for _, n := range g.byName {
		out[i] = n
		i++
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

func appendOnce(list []*Node, n *Node) []*Node {
	if len(list) > 0 && list[len(list)-1] == n {
		return list
	}
	if slices.Contains(list, n) {
		return list
	}
	return append(list, n)
}

func uniqueName(base string, used map[string]bool) string {
	name := base
	for i := 1; used[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	used[name] = true
	return name
}

// topoSort orders nodes so that every node follows the producers of its
// inputs, keeping file order among ready nodes (so a sorted file keeps its order).
func topoSort(graph string, nodes []*Node) ([]*Node, error) {
	pending := make(map[*Node]int, len(nodes))
	users := map[*Node][]*Node{}
	for _, n := range nodes {
		deps := map[*Node]bool{}
		for _, v := range append(slices.Clone(n.Inputs), n.OuterInputs...) {
			if v != nil && v.Producer != nil && v.Producer.Graph == n.Graph && !deps[v.Producer] {
				deps[v.Producer] = true
				users[v.Producer] = append(users[v.Producer], n)
			}
		}
		pending[n] = len(deps)
	}
	ready := &nodeHeap{}
	for _, n := range nodes {
		if pending[n] == 0 {
			ready.push(n)
		}
	}
	order := make([]*Node, 0, len(nodes))
	for ready.len() > 0 {
		n := ready.pop()
		order = append(order, n)
		for _, u := range users[n] {
			pending[u]--
			if pending[u] == 0 {
				ready.push(u)
			}
		}
	}
	if len(order) != len(nodes) {
		var stuck []string
		for _, n := range nodes {
			if pending[n] > 0 {
				stuck = append(stuck, n.Name)
			}
		}
		return nil, &CycleError{Graph: graph, Nodes: stuck}
	}
	return order, nil
}

// nodeHeap is a min-heap of nodes by file index.
type nodeHeap struct{ items []*Node }

func (h *nodeHeap) len() int { return len(h.items) }

func (h *nodeHeap) push(n *Node) {
	h.items = append(h.items, n)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h.items[p].Index <= h.items[i].Index {
			break
		}
		h.items[p], h.items[i] = h.items[i], h.items[p]
		i = p
	}
}

func (h *nodeHeap) pop() *Node {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.items) && h.items[l].Index < h.items[m].Index {
			m = l
		}
		if r < len(h.items) && h.items[r].Index < h.items[m].Index {
			m = r
		}
		if m == i {
			return top
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}

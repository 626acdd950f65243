package config

//go:generate go run ../../internal/testmodels/torchexport/gen testdata/torch

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
)

// OpCall is one torch op call as the exporter wrote it: one ONNX node, or
// several when the export decomposes the op (a Linear on a 3-D input is
// MatMul + Add; dynamo writes GELU as Div, Erf, Add, Mul, Mul). The guide's
// op types and op names address calls, not ONNX nodes: op_type_config
// linear covers the MatMul and its bias Add, and the tensor between them is
// internal to the call.
type OpCall struct {
	// Type is the torch op type ("linear", "add", "softmax"): from the aten
	// target in dynamo metadata, else inferred from the ONNX nodes.
	Type string
	// Types are every op_type_config key that names the call: Type, its
	// synonyms (cat/concat), and for inferred calls every torch op the
	// ONNX node may have come from (a MatMul is matmul, bmm or mm).
	Types []string
	Nodes []*onnxgraph.Node
	// Module is the module the call runs in ("" for the root).
	Module string
	// GraphName is the FX node name dynamo records ("linear_1"); "" for
	// exports without it.
	GraphName string
	// EagerName is the eager-mode name: the module path and the op type,
	// numbered within the module in execution order ("submodule_a.add_1").
	EagerName string
	// stateNames name the constant inputs of an inferred decomposition by
	// node (the LayerNorm's Mul reads the weight, its last Add the bias).
	stateNames map[*onnxgraph.Node]string
}

// Names lists the op names the call's node n answers to in execution mode
// mode: its ONNX node name (for a node inside a subgraph, its path
// "loop/body/add" and then its name in the subgraph, "add"), then the
// call's graph-mode or eager name.
func (c *OpCall) Names(n *onnxgraph.Node, mode ExecutionMode) []string {
	names := []string{n.Name}
	if local := n.Proto.GetName(); n.Graph.Owner != nil && local != "" && local != n.Name {
		names = append(names, local)
	}
	extra := c.GraphName
	if mode == Eager {
		extra = c.EagerName
	}
	if extra != "" && extra != n.Name {
		names = append(names, extra)
	}
	return names
}

// internal reports whether v is produced and consumed only inside the call
// (the MatMul → Add edge of a decomposed linear).
func (c *OpCall) internal(v *onnxgraph.Value) bool {
	if len(c.Nodes) < 2 || v == nil || v.Producer == nil || v.IsGraphOutput || !c.has(v.Producer) {
		return false
	}
	for _, u := range v.Consumers {
		if !c.has(u) {
			return false
		}
	}
	return true
}

func (c *OpCall) has(n *onnxgraph.Node) bool {
	for _, m := range c.Nodes {
		if m == n {
			return true
		}
	}
	return false
}

// slot is what one input of one node of a call is to the torch op.
type slot struct {
	// index is the position op_input_spec index keys use: the ONNX input
	// position for a one-node call, the torch argument position for a
	// decomposed one.
	index int
	// names are the torch argument names ("input", "weight", "other").
	names    []string
	internal bool
}

// slots names the inputs of every node of the call.
func (c *OpCall) slots() map[*onnxgraph.Node][]slot {
	out := map[*onnxgraph.Node][]slot{}
	if len(c.Nodes) == 1 {
		n := c.Nodes[0]
		s := make([]slot, len(n.Inputs))
		for i := range n.Inputs {
			s[i] = slot{index: i, names: nodeTorchArgs(n, i)}
		}
		out[n] = s
		return out
	}
	a, _, _ := ops.TorchOp(c.Type)
	args := a.Args
	if len(args) == 0 {
		args = []string{"input", "other"}
	}
	seen := map[*onnxgraph.Value]int{}
	acts, states := 0, 0
	for _, n := range c.Nodes {
		s := make([]slot, len(n.Inputs))
		for i, v := range n.Inputs {
			switch {
			case v == nil:
			case v.Producer != nil && c.has(v.Producer):
				s[i] = slot{index: -1, internal: true}
			case v.IsConst():
				s[i] = slot{index: -1}
				if name, ok := c.stateNames[n]; ok {
					if name != "" {
						s[i].names = []string{name}
					}
				} else if states < len(a.States) {
					s[i].names = []string{a.States[states]}
				} else if name := stateName(n, i); name != "" {
					s[i].names = []string{name}
				}
				states++
			default:
				idx, ok := seen[v]
				if !ok {
					idx = acts
					seen[v] = idx
					acts++
				}
				s[i] = slot{index: idx}
				if idx < len(args) {
					s[i].names = []string{args[idx]}
				}
			}
		}
		out[n] = s
	}
	return out
}

// opCalls groups the nodes of g into torch op calls. Dynamo exports name
// each node's op in metadata (name_scopes ends with the FX node name,
// class_hierarchy with the aten target), so nodes sharing an FX name are
// one call. Without metadata a call is inferred: MatMul on a constant
// weight whose only consumer is an Add of a constant (in the same module)
// is a linear, every other node is a call by itself.
func opCalls(g *onnxgraph.Graph) (calls []*OpCall, byNode map[*onnxgraph.Node]*OpCall) {
	byNode = map[*onnxgraph.Node]*OpCall{}
	byFX := map[string]*OpCall{}
	for _, n := range g.AllNodes() {
		if byNode[n] != nil {
			continue
		}
		scopes := onnxgraph.ParsePyStringList(metadata(n, onnxgraph.MetaNameScopes))
		classes := onnxgraph.ParsePyStringList(metadata(n, onnxgraph.MetaClassHierarchy))
		if len(scopes) > 0 && len(classes) == len(scopes) {
			fx := scopes[len(scopes)-1]
			if c, ok := byFX[fx]; ok {
				c.Nodes = append(c.Nodes, n)
				byNode[n] = c
				continue
			}
			typ, ok := torchOpType(classes[len(classes)-1])
			if !ok {
				typ = strings.ToLower(n.OpType)
			}
			c := &OpCall{Type: typ, Types: append([]string{typ}, ops.Synonyms(typ)...), Nodes: []*onnxgraph.Node{n}, Module: n.Module, GraphName: fx}
			byFX[fx] = c
			byNode[n] = c
			calls = append(calls, c)
			continue
		}
		c := &OpCall{Nodes: []*onnxgraph.Node{n}, Module: n.Module}
		c.Types = inferredTypes(n)
		if add := biasAdd(n); add != nil && byNode[add] == nil {
			c.Nodes = append(c.Nodes, add)
			c.Types = []string{"linear"}
			byNode[add] = c
		} else if d, nodes := decomposed(n, byNode); d != nil {
			c.Nodes, c.Types = nodes, []string{d.typ}
			c.stateNames = map[*onnxgraph.Node]string{}
			for _, m := range nodes {
				byNode[m] = c
				c.stateNames[m] = ""
			}
		}
		c.Type = c.Types[0]
		byNode[n] = c
		calls = append(calls, c)
	}
	count := map[string]int{}
	for _, c := range calls {
		key := c.Module + "\x00" + c.Type
		name := c.Type
		if k := count[key]; k > 0 {
			name = fmt.Sprintf("%s_%d", c.Type, k)
		}
		count[key]++
		if c.Module != "" {
			name = c.Module + "." + name
		}
		c.EagerName = name
	}
	return calls, byNode
}

// biasAdd returns the Add that adds a constant bias to a MatMul on a
// constant weight, when it is the MatMul's only consumer and in its module.
func biasAdd(n *onnxgraph.Node) *onnxgraph.Node {
	if n.Domain != "" || n.OpType != "MatMul" || !constInput(1)(n) || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil
	}
	v := n.Outputs[0]
	if v.IsGraphOutput || len(v.Consumers) != 1 {
		return nil
	}
	add := v.Consumers[0]
	if add.Domain != "" || add.OpType != "Add" || add.Module != n.Module || len(add.Inputs) != 2 {
		return nil
	}
	other := add.Inputs[0]
	if other == v {
		other = add.Inputs[1]
	}
	if other == nil || other == v || !other.IsConst() {
		return nil
	}
	return add
}

// inferredTypes are the torch op types an ONNX node may have come from
// (the op table's Torch names): those whose condition holds first (linear,
// conv2d, embedding), then the plain ones, each group sorted, the preferred
// plain one first when no condition holds; the lower-cased ONNX type when
// none.
func inferredTypes(n *onnxgraph.Node) []string {
	var cond, plain []string
	pref := ""
	if op, ok := ops.Of(n); ok {
		for _, t := range op.Torch {
			switch {
			case t.If == nil:
				plain = append(plain, t.Name)
				if t.Preferred {
					pref = t.Name
				}
			case t.If(n):
				cond = append(cond, t.Name)
			}
		}
	}
	sort.Strings(cond)
	sort.Strings(plain)
	if pref != "" && len(cond) == 0 {
		for i, p := range plain {
			if p == pref {
				plain[0], plain[i] = plain[i], plain[0]
			}
		}
	}
	out := append(cond, plain...)
	if len(out) == 0 {
		out = []string{strings.ToLower(n.OpType)}
	}
	return out
}

// decomposition is an op that exporters without op metadata write as a
// chain of ONNX nodes, each reading the previous one's output: TorchScript
// at opsets without Gelu (20) or LayerNormalization (17). They are the op
// table's patterns that name a torch op. The chain's constant inputs stay
// unnamed (the weight and bias of a decomposed LayerNorm), so the default
// op_state_spec leaves them in float, as prepare's patterns do.
type decomposition struct {
	typ string
	ops []string
}

var decompositions = func() []decomposition {
	var out []decomposition
	for _, p := range ops.Patterns() {
		if p.Torch != "" {
			out = append(out, decomposition{typ: p.Torch, ops: p.OpTypes()})
		}
	}
	return out
}()

// decomposed matches a decomposition starting at n: each next step is a
// consumer of the previous step's output in n's module, and every value
// produced inside the chain but the last is read only inside it.
func decomposed(n *onnxgraph.Node, taken map[*onnxgraph.Node]*OpCall) (*decomposition, []*onnxgraph.Node) {
	for i := range decompositions {
		d := &decompositions[i]
		if nodes := matchChain(n, d.ops, taken); nodes != nil {
			return d, nodes
		}
	}
	return nil, nil
}

func matchChain(n *onnxgraph.Node, ops []string, taken map[*onnxgraph.Node]*OpCall) []*onnxgraph.Node {
	if n.Domain != "" || n.OpType != ops[0] {
		return nil
	}
	nodes := []*onnxgraph.Node{n}
	for _, op := range ops[1:] {
		prev := nodes[len(nodes)-1]
		if len(prev.Outputs) != 1 || prev.Outputs[0] == nil {
			return nil
		}
		var next *onnxgraph.Node
		for _, c := range prev.Outputs[0].Consumers {
			if c.Domain == "" && c.OpType == op && c.Module == n.Module && taken[c] == nil && !containsNode(nodes, c) {
				next = c
				break
			}
		}
		if next == nil {
			return nil
		}
		nodes = append(nodes, next)
	}
	for _, m := range nodes[:len(nodes)-1] {
		v := m.Outputs[0]
		if v.IsGraphOutput {
			return nil
		}
		for _, c := range v.Consumers {
			if !containsNode(nodes, c) {
				return nil
			}
		}
	}
	return nodes
}

func containsNode(list []*onnxgraph.Node, n *onnxgraph.Node) bool {
	for _, m := range list {
		if m == n {
			return true
		}
	}
	return false
}

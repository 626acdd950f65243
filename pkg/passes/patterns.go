package passes

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// A pattern is one of the op table's multi-node patterns (ops.Pattern),
// parsed: a group of nodes that a backend runs as one op, whose values are
// quantized at the pattern's boundary only. The values inside never meet a
// QuantizeLinear; a Q/DQ pair there (between the mean and the variance of
// a LayerNorm, or on x/√2 inside a GELU) costs accuracy and no runtime
// uses it.
type pattern struct {
	name  string
	nodes []patternNode
	// fusion marks a pattern that is one op only to runtimes that fuse it
	// (Conv + Add: oneDNN and torch.ao's backends do, ONNX Runtime's x86
	// QDQ fusions do not and run a Conv without an output Q in float);
	// it applies with PatternsAll only.
	fusion bool
}

type patternNode struct {
	op   string
	args []patternArg
}

type argKind uint8

const (
	argInner  argKind = iota // output of an earlier pattern node
	argOuter                 // a value from outside the pattern
	argConst                 // any constant
	argNumber                // a constant scalar of the given value
)

type patternArg struct {
	kind argKind
	node int    // argInner: the statement's index
	name string // argOuter: the capture's name
	// computed (argOuter written ~name) asks for a value no constant
	// holds: an activation, not a weight.
	computed bool
	value    float64 // argNumber
}

// patternTable lists the patterns, larger ones first: when two patterns
// could claim the same node, the first in the table wins.
var patternTable = mustPatterns(ops.Patterns())

// mustPatterns parses the table and orders it: more nodes first, then by
// name, so that matching is deterministic and the largest pattern wins.
func mustPatterns(src []ops.Pattern) []pattern {
	var out []pattern
	for _, s := range src {
		p, err := parsePattern(s.Name, s.Statements)
		if err != nil {
			panic(err)
		}
		p.fusion = s.Fusion
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].nodes) != len(out[j].nodes) {
			return len(out[i].nodes) > len(out[j].nodes)
		}
		return out[i].name < out[j].name
	})
	return out
}

// parsePattern reads one pattern's statements.
func parsePattern(name string, stmts []string) (pattern, error) {
	p := pattern{name: name}
	defined := map[string]int{}
	used := map[int]bool{}
	for _, s := range stmts {
		lhs, rhs, ok := strings.Cut(s, "=")
		lhs, rhs = strings.TrimSpace(lhs), strings.TrimSpace(rhs)
		open, closing := strings.IndexByte(rhs, '('), strings.LastIndexByte(rhs, ')')
		if !ok || !isIdent(lhs) || open <= 0 || closing != len(rhs)-1 {
			return p, fmt.Errorf("pattern %s: %q is not `name = Op(args)`", name, s)
		}
		if _, dup := defined[lhs]; dup {
			return p, fmt.Errorf("pattern %s: %q defined twice", name, lhs)
		}
		n := patternNode{op: rhs[:open]}
		for _, a := range strings.Split(rhs[open+1:closing], ",") {
			a = strings.TrimSpace(a)
			switch {
			case a == "$":
				n.args = append(n.args, patternArg{kind: argConst})
			case strings.HasPrefix(a, "~") && isIdent(a[1:]):
				if _, ok := defined[a[1:]]; ok {
					return p, fmt.Errorf("pattern %s: %q marks a value of the pattern's own", name, a)
				}
				n.args = append(n.args, patternArg{kind: argOuter, name: a[1:], computed: true})
			case isIdent(a):
				if i, ok := defined[a]; ok {
					n.args = append(n.args, patternArg{kind: argInner, node: i})
					used[i] = true
				} else {
					n.args = append(n.args, patternArg{kind: argOuter, name: a})
				}
			default:
				v, err := strconv.ParseFloat(a, 64)
				if err != nil {
					return p, fmt.Errorf("pattern %s: argument %q of %q is not a name, ~name, $ or a number", name, a, s)
				}
				n.args = append(n.args, patternArg{kind: argNumber, value: v})
			}
		}
		defined[lhs] = len(p.nodes)
		p.nodes = append(p.nodes, n)
	}
	if len(p.nodes) < 2 {
		return p, fmt.Errorf("pattern %s: fewer than two nodes", name)
	}
	for i := range len(p.nodes) - 1 {
		if !used[i] {
			return p, fmt.Errorf("pattern %s: node %d (%s) is not read by the pattern", name, i, p.nodes[i].op)
		}
	}
	return p, nil
}

func isIdent(s string) bool {
	if s == "" || !unicode.IsLetter(rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' {
			return false
		}
	}
	return true
}

// PatternMatch is one pattern found in a graph.
type PatternMatch struct {
	Pattern string
	// Nodes are the graph's nodes in the pattern's statement order; the
	// last is the root, whose output is the pattern's output.
	Nodes []*onnxgraph.Node
	// Inside are the values produced and consumed inside the pattern.
	Inside []string
}

// Root is the pattern's last node.
func (pm *PatternMatch) Root() *onnxgraph.Node { return pm.Nodes[len(pm.Nodes)-1] }

// Patterns selects the patterns prepare applies.
type Patterns uint8

const (
	// PatternsOps applies the patterns of ops written out node by node
	// (LayerNorm, GELU, SiLU, HardSwish, MatMul + bias, attention scores):
	// the default.
	PatternsOps Patterns = iota
	// PatternsAll adds the runtime fusions: Conv/Gemm + Add, and a
	// Conv/Gemm/MatMul with the gated activation that alone reads its
	// output (fusedGate).
	PatternsAll
	// PatternsNone applies none.
	PatternsNone
)

// String is the name ParsePatterns reads.
func (p Patterns) String() string {
	switch p {
	case PatternsAll:
		return "all"
	case PatternsNone:
		return "none"
	}
	return "ops"
}

// ParsePatterns reads the --patterns flag's value: ops, all or none.
func ParsePatterns(s string) (Patterns, error) {
	switch s {
	case "ops", "":
		return PatternsOps, nil
	case "all":
		return PatternsAll, nil
	case "none":
		return PatternsNone, nil
	}
	return 0, fmt.Errorf("patterns %q: want ops, all or none", s)
}

// FindPatterns matches the pattern table against g: each node belongs to
// at most one match, the table's order deciding between overlapping ones;
// matches are listed in the order of their roots.
func FindPatterns(m *onnxgraph.Model, which Patterns) []*PatternMatch {
	claimed := map[*onnxgraph.Node]bool{}
	var out []*PatternMatch
	for _, p := range patternTable {
		if which == PatternsNone || (p.fusion && which != PatternsAll) {
			continue
		}
		for _, n := range m.Graph.Nodes {
			if claimed[n] {
				continue
			}
			pm := matchPattern(m, p, n)
			if pm == nil {
				continue
			}
			free := true
			for _, x := range pm.Nodes {
				free = free && !claimed[x]
			}
			if !free {
				continue
			}
			for _, x := range pm.Nodes {
				claimed[x] = true
			}
			out = append(out, pm)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Root().Index < out[j].Root().Index })
	return out
}

// binding is a partial match: the graph node of each statement and the
// value of each outside name.
type binding struct {
	nodes []*onnxgraph.Node
	outer map[string]*onnxgraph.Value
}

func (b binding) clone() binding {
	c := binding{nodes: append([]*onnxgraph.Node(nil), b.nodes...), outer: make(map[string]*onnxgraph.Value, len(b.outer))}
	for k, v := range b.outer {
		c.outer[k] = v
	}
	return c
}

// matchPattern tries p with its root at n.
func matchPattern(m *onnxgraph.Model, p pattern, n *onnxgraph.Node) *PatternMatch {
	b := binding{nodes: make([]*onnxgraph.Node, len(p.nodes)), outer: map[string]*onnxgraph.Value{}}
	b, ok := matchNode(m, p, len(p.nodes)-1, n, b)
	if !ok {
		return nil
	}
	seen := map[*onnxgraph.Node]bool{}
	for _, x := range b.nodes {
		if x == nil || seen[x] {
			return nil
		}
		seen[x] = true
	}
	pm := &PatternMatch{Pattern: p.name, Nodes: b.nodes}
	// Every value made inside must stay inside: read only by the
	// pattern's nodes and not a graph output.
	for _, x := range b.nodes[:len(b.nodes)-1] {
		for _, v := range x.Outputs {
			if v == nil {
				continue
			}
			if v.IsGraphOutput {
				return nil
			}
			for _, c := range v.Consumers {
				if !seen[c] {
					return nil
				}
			}
			pm.Inside = append(pm.Inside, v.Name)
		}
	}
	return pm
}

// matchNode matches statement i of p against n, extending b.
func matchNode(m *onnxgraph.Model, p pattern, i int, n *onnxgraph.Node, b binding) (binding, bool) {
	st := p.nodes[i]
	if n == nil || n.Domain != "" || n.OpType != st.op || len(n.Subgraphs) > 0 || len(n.Inputs) < len(st.args) {
		return b, false
	}
	if b.nodes[i] != nil {
		return b, b.nodes[i] == n
	}
	for _, v := range n.Inputs[len(st.args):] {
		if v != nil && !v.IsConst() {
			return b, false
		}
	}
	orders := [][]int{identityOrder(len(st.args))}
	if (st.op == "Add" || st.op == "Mul") && len(st.args) == 2 {
		orders = append(orders, []int{1, 0})
	}
	for _, order := range orders {
		c := b.clone()
		c.nodes[i] = n
		ok := true
		for k, a := range st.args {
			var next bool
			c, next = matchArg(m, p, a, n.Inputs[order[k]], c)
			if !next {
				ok = false
				break
			}
		}
		if ok {
			return c, true
		}
	}
	return b, false
}

func identityOrder(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

// matchArg matches one argument against the input value v.
func matchArg(m *onnxgraph.Model, p pattern, a patternArg, v *onnxgraph.Value, b binding) (binding, bool) {
	if v == nil {
		return b, false
	}
	switch a.kind {
	case argInner:
		if v.Producer == nil || len(v.Producer.Outputs) == 0 || v.Producer.Outputs[0] != v {
			return b, false
		}
		return matchNode(m, p, a.node, v.Producer, b)
	case argOuter:
		if a.computed && v.IsConst() {
			return b, false
		}
		if prev, ok := b.outer[a.name]; ok {
			return b, prev == v
		}
		b.outer[a.name] = v
		return b, true
	case argConst:
		return b, v.IsConst()
	case argNumber:
		x, ok := constScalar(m, v)
		return b, ok && math.Abs(x-a.value) <= 1e-3*math.Abs(a.value)
	}
	return b, false
}

// constScalar reads a constant holding one value.
func constScalar(m *onnxgraph.Model, v *onnxgraph.Value) (float64, bool) {
	if !v.IsConst() {
		return 0, false
	}
	t, err := tensor.FromProto(v.Const, m)
	if err != nil || tensor.NumElements(t.Shape) != 1 {
		return 0, false
	}
	f, err := t.AsFloat32()
	if err != nil || len(f) != 1 {
		return 0, false
	}
	return float64(f[0]), true
}

// findPatterns matches the pattern table unless turned off, and notes
// each match.
func (p *preparer) findPatterns() {
	p.inside, p.patternOf = map[string]*PatternMatch{}, map[string]*PatternMatch{}
	for _, pm := range FindPatterns(p.m, p.opts.Patterns) {
		for _, n := range pm.Nodes {
			p.patternOf[n.Name] = pm
		}
		for _, v := range pm.Inside {
			p.inside[v] = pm
		}
		p.note("pattern %s at %s: quantized at its boundary, no Q/DQ on its %s", pm.Pattern, nodeSpan(pm.Nodes), innerValues(pm.Inside))
	}
}

// gatedPatterns are the names of the gated activations' patterns
// (ops.Pattern.GateReads: SiLU, GELU, HardSwish) and of their rescaled
// variants.
var gatedPatterns = func() map[string]bool {
	out := map[string]bool{}
	for _, p := range ops.Patterns() {
		if len(p.GateReads) > 0 {
			out[p.Name], out[p.Name+ops.RescaledSuffix] = true, true
		}
	}
	return out
}()

// fusedGate describes the gated activation that a Conv, ConvTranspose,
// Gemm or MatMul n (or the bias Add ending a linear pattern) fuses under
// --patterns all, "" for none: its output v read by nothing but one gated
// activation, written out (a match of a gated pattern, every reader of v
// one of its nodes) or as an op (HardSwish, Gelu). oneDNN applies these
// as eltwise post-ops of the integer kernel, and torch.ao's x86 backend
// quantizes such a pair at the activation's output only, so the value
// between them gets no Q/DQ, as between a Conv and its Relu.
func (p *preparer) fusedGate(n *onnxgraph.Node, v *onnxgraph.Value) string {
	if p.opts.Patterns != PatternsAll {
		return ""
	}
	if q := ops.QuantOf(n); q == nil || q.Kind != ops.Compute {
		if pm := p.patternOf[n.Name]; pm == nil || pm.Pattern != "linear" || pm.Root() != n {
			return ""
		}
	}
	if c := v.Consumers[0]; len(v.Consumers) == 1 && c.Domain == "" && (c.OpType == "HardSwish" || c.OpType == "Gelu") {
		return c.String()
	}
	pm := p.patternOf[v.Consumers[0].Name]
	if pm == nil || !gatedPatterns[pm.Pattern] {
		return ""
	}
	for _, c := range v.Consumers {
		if p.patternOf[c.Name] != pm {
			return ""
		}
	}
	return fmt.Sprintf("pattern %s", pm.Pattern)
}

// nodeSpan names a match's nodes: the first and the root.
func nodeSpan(ns []*onnxgraph.Node) string {
	return fmt.Sprintf("%q … %q (%d nodes)", ns[0].Name, ns[len(ns)-1].Name, len(ns))
}

// innerValues names a pattern's inner values, "inner value \"s\"", up to
// three (a linear layer's product, attention scores: values a config's
// rule may address), and counts more, "9 inner values" (a LayerNorm's).
func innerValues(inside []string) string {
	switch {
	case len(inside) == 1:
		return fmt.Sprintf("inner value %q", inside[0])
	case len(inside) <= 3:
		q := make([]string, len(inside))
		for i, v := range inside {
			q[i] = strconv.Quote(v)
		}
		return "inner values " + strings.Join(q, ", ")
	}
	return fmt.Sprintf("%d inner values", len(inside))
}

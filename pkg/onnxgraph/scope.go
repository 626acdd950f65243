package onnxgraph

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Metadata keys the PyTorch dynamo exporter writes on every node.
const (
	MetaNameScopes     = "pkg.torch.onnx.name_scopes"
	MetaClassHierarchy = "pkg.torch.onnx.class_hierarchy"
)

// assignModules sets Node.Module and Node.ModuleType on every node of every
// graph, from (in order of preference) dynamo metadata, TorchScript scoped
// node names, and local-function calls.
func assignModules(m *Model) {
	var all []*Node
	var walk func(g *Graph)
	walk = func(g *Graph) {
		for _, n := range g.Nodes {
			all = append(all, n)
			for _, key := range sortedKeys(n.Subgraphs) {
				walk(n.Subgraphs[key])
			}
		}
	}
	walk(m.Graph)

	scoped := map[*Node]bool{}
	for _, n := range all {
		if scopes, ok := n.Metadata(MetaNameScopes); ok {
			names := ParsePyStringList(scopes)
			if len(names) >= 2 {
				n.Module = names[len(names)-2]
				if types := ParsePyStringList(mustMeta(n, MetaClassHierarchy)); len(types) == len(names) {
					n.ModuleType = types[len(types)-2]
				}
			}
			scoped[n] = true
			continue
		}
		n.Module = torchScriptModule(n.Proto.GetName())
	}
	// A module called twice gets scopes "relu" and "relu_1"; fold the
	// numbered copies back onto the module that exists.
	known := map[string]bool{}
	for _, n := range all {
		known[n.Module] = true
	}
	for _, n := range all {
		if scoped[n] {
			continue
		}
		n.Module = foldRepeatedScope(n.Module, known)
	}
	// A subgraph node the exporter left unscoped runs in the module of the
	// If/Loop/Scan that owns it (owners come before their subgraphs in all).
	for _, n := range all {
		if o := n.Graph.Owner; o != nil && n.Module == "" && !scoped[n] {
			n.Module, n.ModuleType = o.Module, o.ModuleType
		}
	}
	for _, n := range all {
		if f := m.Function(n.Proto.GetDomain(), n.OpType); f != nil && n.ModuleType == "" {
			n.ModuleType = f.GetName()
			if f.GetDomain() != "" {
				n.ModuleType = f.GetDomain() + "." + f.GetName()
			}
		}
	}
}

func mustMeta(n *Node, key string) string {
	v, _ := n.Metadata(key)
	return v
}

// torchScriptModule recovers the module path from a TorchScript scoped node
// name: "/layer1/layer1.0/conv1/Conv" names module "layer1.0.conv1". Each
// scope holds the module's variable name, which may already carry its
// parent's path ("layer1.0" under "layer1").
func torchScriptModule(name string) string {
	if !strings.HasPrefix(name, "/") {
		return ""
	}
	parts := strings.Split(name[1:], "/")
	if len(parts) < 2 {
		return ""
	}
	path := ""
	for _, p := range parts[:len(parts)-1] {
		if p == "" {
			continue
		}
		// A variable name like "mlp.1" (a numbered child of a container)
		// starts with its parent's own variable name, which ends path.
		if first, _, dotted := strings.Cut(p, "."); dotted && (path == first || strings.HasSuffix(path, "."+first)) {
			path = path[:len(path)-len(first)] + p
			continue
		}
		if path == "" {
			path = p
		} else {
			path += "." + p
		}
	}
	return path
}

var repeatSuffix = regexp.MustCompile(`_[0-9]+$`)

// foldRepeatedScope maps "a.relu_1.x" to "a.relu.x" when "a.relu" is a module
// some other node belongs to.
func foldRepeatedScope(module string, known map[string]bool) string {
	if module == "" {
		return module
	}
	parts := strings.Split(module, ".")
	changed := false
	for i, p := range parts {
		base := repeatSuffix.ReplaceAllString(p, "")
		if base == p || base == "" {
			continue
		}
		candidate := strings.Join(append(append([]string{}, parts[:i]...), base), ".")
		if known[candidate] {
			parts[i] = base
			changed = true
		}
	}
	if !changed {
		return module
	}
	return strings.Join(parts, ".")
}

// ParsePyStringList parses the Python repr of a list of strings, as the
// dynamo exporter writes it: "[”, 'layer1', 'layer1.0']". It returns nil
// for anything else.
func ParsePyStringList(s string) []string {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil
	}
	var out []string
	rest := strings.TrimSpace(s[1 : len(s)-1])
	for rest != "" {
		if rest[0] != '\'' && rest[0] != '"' {
			return nil
		}
		quote := rest[0]
		i := 1
		var b strings.Builder
		for ; i < len(rest) && rest[i] != quote; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				default:
					b.WriteByte(rest[i])
				}
				continue
			}
			b.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return nil
		}
		out = append(out, b.String())
		rest = strings.TrimSpace(rest[i+1:])
		if strings.HasPrefix(rest, ",") {
			rest = strings.TrimSpace(rest[1:])
		} else if rest != "" {
			return nil
		}
	}
	return out
}

// Module is one module of the scope tree.
type Module struct {
	Name string // dotted path; "" is the root
	Type string // class, when known
	// Nodes counts the nodes directly in this module.
	Nodes    int
	Children []*Module
}

// Modules returns the module tree of the main graph, children sorted by name.
func (g *Graph) Modules() *Module {
	root := &Module{}
	byName := map[string]*Module{"": root}
	var get func(name string) *Module
	get = func(name string) *Module {
		if m, ok := byName[name]; ok {
			return m
		}
		parentName := ""
		if i := strings.LastIndex(name, "."); i >= 0 {
			parentName = name[:i]
		}
		m := &Module{Name: name}
		byName[name] = m
		p := get(parentName)
		p.Children = append(p.Children, m)
		return m
	}
	for _, n := range g.Nodes {
		m := get(n.Module)
		m.Nodes++
		if m.Type == "" {
			m.Type = n.ModuleType
		}
	}
	var sortTree func(m *Module)
	sortTree = func(m *Module) {
		sort.Slice(m.Children, func(i, j int) bool { return lessModule(m.Children[i].Name, m.Children[j].Name) })
		for _, c := range m.Children {
			sortTree(c)
		}
	}
	sortTree(root)
	return root
}

// lessModule orders module paths with numeric components numerically, so
// that "layers.10" follows "layers.9".
func lessModule(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea == nil && eb == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

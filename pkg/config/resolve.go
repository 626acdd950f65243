package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Role is what a tensor is to a node.
type Role uint8

// The roles: activations flowing in and out, and state (constant inputs:
// weights, biases, normalisation parameters).
const (
	RoleInput Role = iota
	RoleOutput
	RoleState
)

func (r Role) String() string {
	switch r {
	case RoleInput:
		return "input"
	case RoleOutput:
		return "output"
	}
	return "state"
}

// Resolution is the quantization config applied to every node of a graph:
// the input of prepare.
type Resolution struct {
	// Nodes are the main graph's nodes in topological order.
	Nodes []*NodeResolution
	// Warnings are config keys that match nothing in the model, and
	// parts of the model the resolution does not reach, sorted by position.
	// The library never prints them.
	Warnings []*Diagnostic

	byName map[string]*NodeResolution
}

// Node returns the resolution of the node called name, or nil.
func (r *Resolution) Node(name string) *NodeResolution { return r.byName[name] }

// NodeResolution is the resolved config of one node.
type NodeResolution struct {
	Node *onnxgraph.Node
	// Call is the torch op call the node belongs to: its op type, and the
	// graph-mode and eager names op_name_config keys may use.
	Call *OpCall
	// Names are the op names the node answers to in the config's
	// execution mode: the ONNX node name first.
	Names []string
	// Scope is the module whose config entry applies ("" for the global
	// config or an entry matching the root module).
	Scope string
	// ModuleRule locates that entry (global_config, module_type_configs[...],
	// module_name_configs[...], only_for, without).
	ModuleRule Rule
	// OpRule locates the op config that applies: an op_name_config or
	// op_type_config entry, or the module config itself for its op_*_spec.
	OpRule Rule
	// Op is the op config that applies (nil when the module or op config
	// is null): what settings beyond the specs (palettization) read.
	Op *OpConfig
	// Tensors lists every input (non-constant: RoleInput, constant:
	// RoleState) and every output of the node, in that order.
	Tensors []*TensorResolution
}

// Quantized returns the tensors that get a spec.
func (n *NodeResolution) Quantized() []*TensorResolution {
	var out []*TensorResolution
	for _, t := range n.Tensors {
		if t.Spec != nil {
			out = append(out, t)
		}
	}
	return out
}

// TensorResolution is the spec one tensor slot of a node gets.
type TensorResolution struct {
	Role Role
	// Index is the position among the node's inputs (RoleInput, RoleState)
	// or outputs.
	Index int
	// Value is the ONNX tensor name.
	Value string
	// Key is the op_state_spec name of a state tensor ("weight", "bias"), or "".
	Key string
	// Spec is the resolved spec: axis, calculator and scale dtype filled in.
	// nil when the tensor is not quantized; Reason says why.
	Spec *spec.QuantizationSpec
	// Rule locates the config entry that decided (for a nil Spec, the entry
	// or field that disabled or omitted the tensor).
	Rule   Rule
	Reason string
	// Explicit is set when the deciding entry names this tensor (by index
	// or name, not "*" or a default): op_state_spec {bias: null} keeps a
	// bias in float instead of the default int32 bias.
	Explicit bool
	// Boundary is set when a module_*_spec decided: module specs apply
	// whether or not the op has a quantization rule.
	Boundary bool
}

// Label names the slot: "input 0", "weight", "state 3", "output 0".
func (t *TensorResolution) Label() string {
	if t.Role == RoleState && t.Key != "" {
		return t.Key
	}
	return fmt.Sprintf("%s %d", t.Role, t.Index)
}

// Resolve applies the config to every node of g with the guide's
// precedence (torch.ao's, which it builds on):
//
//   - a module_name_object_type_order_configs entry for the call (the
//     index-th call of its op type directly in the module) wins outright;
//   - else a module's config is the module_name_configs name equal to the
//     module or its nearest ancestor, else the first regex (matched at the
//     start of the name) matching the module or its nearest ancestor, else
//     the module_type_configs entry of the module's or its nearest
//     ancestor's class, else global_config; so a name entry covers the
//     module's children and outranks their types, and a more specific
//     level re-enables what a null disabled;
//   - inside that config, a node takes the op_name_config entry naming it
//     (plain names before regexes, which go in file order; a node answers
//     to its ONNX name and its call's graph-mode or eager name), else the
//     best op_type_config entry (its exact ONNX op type > its call's torch
//     op type > another torch op the call may be, then file order), else
//     the module's op_*_spec. An op config covers the whole call: the
//     tensors between the nodes of a decomposed op are not quantized;
//   - the module_*_spec of every configured module then override the op
//     specs of the tensors crossing that module's boundary (outer modules
//     first, so the innermost wins).
//
// Errors (an ErrorList, positioned at the rule) are per_channel/per_block
// specs without an axis on a tensor that has no default axis, and axes out
// of range for the tensor.
func Resolve(cfg *QuantizerConfig, g *onnxgraph.Graph) (*Resolution, error) {
	return ResolveWith(cfg, g, ResolveOptions{})
}

// ResolveOptions tell the resolution what the quantizer supports.
type ResolveOptions struct {
	// Quantizable reports whether prepare quantizes slot (role, index) of
	// n when an op-level spec asks for it. Op-level specs on other slots
	// are listed as not quantized, with the reason, and a config entry
	// that reaches only such ops is warned about. nil means every slot.
	Quantizable func(n *onnxgraph.Node, role Role, index int) bool
	// QuantizeInside resolves the tensors between the nodes of a
	// decomposed op like any other (prepare's patterns turned off).
	QuantizeInside bool
}

// ResolveWith is Resolve with options.
func ResolveWith(cfg *QuantizerConfig, g *onnxgraph.Graph, opts ResolveOptions) (*Resolution, error) {
	r := &resolver{cfg: cfg, g: g, opts: opts, types: moduleTypes(g), eff: map[string]*effective{},
		usedEntries: map[*ModuleEntry]bool{}, usedOps: map[*OpEntry]bool{}, applied: map[*ModuleConfig]bool{},
		usedSpec: map[*SpecEntry]bool{}, maps: map[*SpecMap]string{}, opNodes: map[*OpEntry][]*NodeResolution{},
		slots: map[*onnxgraph.Node][]slot{}}
	r.calls, r.callOf = opCalls(g)
	for _, c := range r.calls {
		for n, s := range c.slots() {
			r.slots[n] = s
		}
	}
	r.orderedOf = orderedCalls(cfg.Ordered, r.calls)
	res := &Resolution{byName: map[string]*NodeResolution{}}
	for _, n := range g.AllNodes() {
		nr := r.node(n)
		res.Nodes = append(res.Nodes, nr)
		res.byName[n.Name] = nr
	}
	r.boundaries(res)
	for _, nr := range res.Nodes {
		for _, t := range nr.Tensors {
			r.finish(nr.Node, t)
			r.supported(nr.Node, t)
		}
	}
	res.Warnings = sortDiagnostics(r.warnings(res))
	if len(r.errs) > 0 {
		return nil, ErrorList(sortDiagnostics(r.errs))
	}
	return res, nil
}

type resolver struct {
	cfg         *QuantizerConfig
	g           *onnxgraph.Graph
	opts        ResolveOptions
	calls       []*OpCall
	callOf      map[*onnxgraph.Node]*OpCall
	slots       map[*onnxgraph.Node][]slot
	orderedOf   map[*OpCall]*OrderedEntry
	usedSpec    map[*SpecEntry]bool
	maps        map[*SpecMap]string
	opNodes     map[*OpEntry][]*NodeResolution
	types       map[string]string
	eff         map[string]*effective
	usedEntries map[*ModuleEntry]bool
	usedOps     map[*OpEntry]bool
	applied     map[*ModuleConfig]bool
	errs        []*Diagnostic
	// inferred are the module boundaries whose index order the export
	// does not record, for a warning where index keys rely on it.
	inferred []inferredOrder
}

// inferredOrder is one module's inputs or outputs numbered by first use or
// production, not by the forward's signature.
type inferredOrder struct {
	module, field string
	group         *SpecMap
	values        []*onnxgraph.Value
}

// effective is the module config that applies to a module.
type effective struct {
	// scope is the module the entry matched: the module itself or the
	// ancestor it inherits the config from.
	scope string
	cfg   *ModuleConfig
	rule  Rule
}

// moduleTypes maps module names to classes: from dynamo's scope and class
// lists (which name every enclosing module), then from Node.ModuleType.
func moduleTypes(g *onnxgraph.Graph) map[string]string {
	types := map[string]string{}
	for _, n := range g.AllNodes() {
		names := onnxgraph.ParsePyStringList(metadata(n, onnxgraph.MetaNameScopes))
		classes := onnxgraph.ParsePyStringList(metadata(n, onnxgraph.MetaClassHierarchy))
		if len(names) == len(classes) {
			for i := 0; i+1 < len(names); i++ {
				if types[names[i]] == "" {
					types[names[i]] = classes[i]
				}
			}
		}
	}
	for _, n := range g.AllNodes() {
		if n.ModuleType != "" && types[n.Module] == "" {
			types[n.Module] = n.ModuleType
		}
	}
	return types
}

func metadata(n *onnxgraph.Node, key string) string {
	v, _ := n.Metadata(key)
	return v
}

// scopeDepth is 0 for the root, 1 for "layer1", 2 for "layer1.0", ...
func scopeDepth(m string) int {
	if m == "" {
		return 0
	}
	return strings.Count(m, ".") + 1
}

func parentModule(m string) string {
	if i := strings.LastIndex(m, "."); i >= 0 {
		return m[:i]
	}
	return ""
}

// effectiveFor finds the module config of module m, torch.ao's order:
// a module_name_configs name equal to m or to its nearest ancestor (a
// module name entry covers the module's children), else the first regex
// matching m or its nearest ancestor, else a module_type_configs entry for
// the class of m or of its nearest ancestor, else global_config.
func (r *resolver) effectiveFor(m string) *effective {
	if e, ok := r.eff[m]; ok {
		return e
	}
	var chain []string
	for x := m; x != ""; x = parentModule(x) {
		chain = append(chain, x)
	}
	found := func(x string, me *ModuleEntry) *effective {
		r.usedEntries[me] = true
		return &effective{scope: x, cfg: me.Config, rule: me.Rule}
	}
	var e *effective
	for _, x := range chain {
		for _, me := range r.cfg.ModuleNames {
			if e == nil && me.Re == nil && me.Key == x {
				e = found(x, me)
			}
		}
	}
	for _, x := range chain {
		for _, me := range r.cfg.ModuleNames {
			if e == nil && me.Re != nil && me.Re.MatchString(x) {
				e = found(x, me)
			}
		}
	}
	for _, x := range chain {
		for _, me := range r.cfg.ModuleTypes {
			if e == nil && classMatches(me.Key, r.types[x]) {
				e = found(x, me)
			}
		}
	}
	if e == nil {
		e = &effective{scope: "", cfg: r.cfg.Global, rule: r.cfg.GlobalRule}
	}
	r.eff[m] = e
	return e
}

// classMatches reports whether a module_type_configs key names class: the
// fully qualified class name, or for a key without a dot (the guide's
// mymodelSelfAttention) the class name after the module path.
func classMatches(key, class string) bool {
	if class == "" {
		return false
	}
	return key == class || (!strings.Contains(key, ".") && strings.HasSuffix(class, "."+key))
}

// orderedCalls assigns module_name_object_type_order_configs entries to
// calls: the index-th call (in execution order) of the op type directly in
// the module.
func orderedCalls(entries []*OrderedEntry, calls []*OpCall) map[*OpCall]*OrderedEntry {
	out := map[*OpCall]*OrderedEntry{}
	for _, oe := range entries {
		k := 0
		for _, c := range calls {
			if c.Module != oe.Module || !callIsType(c, oe.OpType) {
				continue
			}
			if k == oe.Index {
				out[c] = oe
			}
			k++
		}
	}
	return out
}

// callIsType reports whether an op type key (already normalised) names
// call c: one of its torch op types, or the ONNX op type of its nodes.
func callIsType(c *OpCall, key string) bool {
	for _, t := range c.Types {
		if t == key {
			return true
		}
	}
	for _, n := range c.Nodes {
		if exactOpType(key, n) {
			return true
		}
	}
	return false
}

// opEntryTier says how well an op_type_config entry matches node n of call
// c: 3 the exact ONNX op type of n, 2 the call's torch op type, 1 another
// torch op the call may be, 0 no match. Higher tiers win; within a tier
// the first entry in the file wins.
func opEntryTier(oe *OpEntry, n *onnxgraph.Node, c *OpCall) int {
	if exactOpType(oe.Key, n) {
		return 3
	}
	for i, t := range c.Types {
		if t == oe.Type {
			if i == 0 {
				return 2
			}
			return 1
		}
	}
	return 0
}

// opNameMatches reports whether an op_name_config entry names one of names.
func opNameMatches(oe *OpEntry, names []string) bool {
	for _, name := range names {
		if (oe.Re == nil && oe.Key == name) || (oe.Re != nil && oe.Re.MatchString(name)) {
			return true
		}
	}
	return false
}

// node resolves one node's op-level specs.
func (r *resolver) node(n *onnxgraph.Node) *NodeResolution {
	ef := r.effectiveFor(n.Module)
	c := r.callOf[n]
	nr := &NodeResolution{Node: n, Call: c, Names: c.Names(n, r.cfg.ExecutionMode), Scope: ef.scope, ModuleRule: ef.rule, OpRule: ef.rule}
	var oc *OpConfig
	disabled, reason := false, ""
	if oe := r.orderedOf[c]; oe != nil {
		nr.OpRule, oc = oe.Rule, oe.Config
		if oc == nil {
			disabled, reason = true, "op config is null"
		}
	} else if ef.cfg == nil {
		disabled, reason = true, "module config is null"
	} else {
		r.applied[ef.cfg] = true
		var chosen *OpEntry
		for _, oe := range ef.cfg.OpNames {
			if chosen == nil && oe.Re == nil && opNameMatches(oe, nr.Names) {
				chosen = oe
			}
		}
		for _, oe := range ef.cfg.OpNames {
			if chosen == nil && oe.Re != nil && opNameMatches(oe, nr.Names) {
				chosen = oe
			}
		}
		if chosen == nil {
			best := 0
			for _, oe := range ef.cfg.OpTypes {
				if t := opEntryTier(oe, n, c); t > best {
					chosen, best = oe, t
				}
			}
		}
		if chosen != nil {
			r.usedOps[chosen] = true
			r.opNodes[chosen] = append(r.opNodes[chosen], nr)
			nr.OpRule = chosen.Rule
			oc = chosen.Config
			if oc == nil {
				disabled, reason = true, "op config is null"
			}
		} else {
			oc = ef.cfg.opConfig()
		}
	}
	nr.Op = oc
	slots := r.slots[n]
	internal := fmt.Sprintf("inside the %s op (%d ONNX nodes): the tensors between its nodes are not quantized", c.Type, len(c.Nodes))
	for i, v := range n.Inputs {
		if v == nil {
			continue
		}
		sl := slots[i]
		t := &TensorResolution{Role: RoleInput, Index: i, Value: v.Name}
		group, field := (*SpecMap)(nil), "op_input_spec"
		var names []string
		if v.IsConst() {
			t.Role, t.Key = RoleState, stateName(n, i)
			if len(c.Nodes) > 1 || t.Key == "" {
				t.Key = firstName(sl.names)
			}
			field = "op_state_spec"
			names = append([]string{t.Key}, sl.names...)
			if oc != nil {
				group = oc.State
			}
		} else {
			names = append(tensorNames(n, false, i, sl.index, len(c.Nodes) == 1), sl.names...)
			if oc != nil {
				group = oc.Input
			}
		}
		switch {
		case disabled:
			t.Rule, t.Reason = nr.OpRule, reason
		case sl.internal && !r.opts.QuantizeInside:
			t.Rule, t.Reason = nr.OpRule, internal
		default:
			r.lookup(t, group, field, sl.index, names)
		}
		nr.Tensors = append(nr.Tensors, t)
	}
	for i, v := range n.Outputs {
		if v == nil {
			continue
		}
		t := &TensorResolution{Role: RoleOutput, Index: i, Value: v.Name}
		switch {
		case disabled:
			t.Rule, t.Reason = nr.OpRule, reason
		case c.internal(v) && !r.opts.QuantizeInside:
			t.Rule, t.Reason = nr.OpRule, internal
		default:
			names := tensorNames(n, true, i, i, true)
			if i == 0 {
				names = append(names, outputNames...)
			}
			r.lookup(t, oc.Output, "op_output_spec", i, names)
		}
		nr.Tensors = append(nr.Tensors, t)
	}
	return nr
}

func firstName(names []string) string {
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

// lookup sets t from group (op_input_spec, ...): an entry for its index or
// a name, else "*".
func (r *resolver) lookup(t *TensorResolution, group *SpecMap, field string, index int, names []string) {
	if t.Role == RoleState {
		index = -1
	}
	if group != nil {
		r.maps[group] = field
	}
	switch e, ok := group.Lookup(index, names...); {
	case group.Disabled:
		t.Spec, t.Rule, t.Reason, t.Explicit = nil, group.Rule, field+" is null", true
	case !ok:
		what := fmt.Sprintf("%s %d", t.Role, t.Index)
		if t.Role == RoleState {
			what = "this state tensor"
			if t.Key != "" {
				what = fmt.Sprintf("%q", t.Key)
			}
		}
		t.Spec, t.Rule, t.Reason = nil, group.Rule, fmt.Sprintf("%s has no key for %s", field, what)
	default:
		r.usedSpec[e] = true
		t.Explicit = !e.Star && !e.Implicit
		if e.Spec == nil {
			t.Spec, t.Rule, t.Reason = nil, e.Rule, fmt.Sprintf("%s[%s] is null", field, e.Key())
		} else {
			t.Spec, t.Rule, t.Reason = e.Spec, e.Rule, ""
		}
	}
}

// supported drops op-level specs on slots the quantizer does not quantize
// (ResolveOptions.Quantizable), saying why.
func (r *resolver) supported(n *onnxgraph.Node, t *TensorResolution) {
	if t.Spec == nil || t.Boundary || r.opts.Quantizable == nil || r.opts.Quantizable(n, t.Role, t.Index) {
		return
	}
	what := fmt.Sprintf("%s %d", t.Role, t.Index)
	if t.Role == RoleState {
		what = "this state tensor"
	}
	t.Spec, t.Reason = nil, fmt.Sprintf("%s has no quantization rule for %s; op-level specs reach only what `coreaiq ops` lists (module_*_spec reach any op)", n.OpType, what)
}

// boundaries applies module_input_spec, module_output_spec and
// module_state_spec of every configured module, outer modules first.
func (r *resolver) boundaries(res *Resolution) {
	seen := map[string]*effective{}
	for _, e := range r.eff {
		if e.cfg != nil && e.cfg.hasBoundary() {
			seen[e.scope] = e
		}
	}
	scopes := make([]string, 0, len(seen))
	for s := range seen {
		scopes = append(scopes, s)
	}
	sort.Slice(scopes, func(i, j int) bool {
		if di, dj := scopeDepth(scopes[i]), scopeDepth(scopes[j]); di != dj {
			return di < dj
		}
		return scopes[i] < scopes[j]
	})
	for _, s := range scopes {
		mc := seen[s].cfg
		inS := func(n *onnxgraph.Node) bool {
			return n != nil && (s == "" || n.Module == s || strings.HasPrefix(n.Module, s+"."))
		}
		var ins, outs []*onnxgraph.Value
		seenIn, seenOut := map[*onnxgraph.Value]bool{}, map[*onnxgraph.Value]bool{}
		for _, n := range r.g.AllNodes() {
			if !inS(n) {
				continue
			}
			for _, v := range n.Inputs {
				if v != nil && !v.IsConst() && !inS(v.Producer) && !seenIn[v] {
					seenIn[v] = true
					ins = append(ins, v)
				}
			}
			for _, v := range n.Outputs {
				if v == nil || seenOut[v] {
					continue
				}
				escapes := v.IsGraphOutput
				for _, c := range v.Consumers {
					escapes = escapes || !inS(c)
				}
				if escapes {
					seenOut[v] = true
					outs = append(outs, v)
				}
			}
		}
		if s == "" {
			// The root's inputs are the forward's arguments: the graph
			// inputs, in their order.
			ins = nil
			for _, v := range r.g.Inputs {
				if seenIn[v] {
					ins = append(ins, v)
				}
			}
		}
		override := func(t *TensorResolution, group *SpecMap, field string, index int, names []string) {
			r.maps[group] = field
			if !group.Disabled {
				if _, ok := group.Lookup(index, names...); !ok {
					return
				}
			}
			r.lookup(t, group, field, index, names)
			t.Boundary = true
		}
		if call := r.functionCall(s); call != nil {
			// A module exported as a local function is one call whose
			// inputs are the forward's arguments in order: a tensor
			// passed twice (q, k and v in self-attention) has an index
			// per argument.
			for _, t := range res.byName[call.Name].Tensors {
				if t.Role == RoleInput {
					v := call.Inputs[t.Index]
					override(t, mc.ModuleInput, "module_input_spec", t.Index, []string{v.Name})
				}
			}
			ins = nil
		}
		if s != "" {
			r.inferred = append(r.inferred, inferredOrder{s, "module_input_spec", mc.ModuleInput, ins},
				inferredOrder{s, "module_output_spec", mc.ModuleOutput, outs})
		}
		for i, v := range ins {
			for _, c := range v.Consumers {
				if !inS(c) {
					continue
				}
				for _, t := range res.byName[c.Name].Tensors {
					if t.Role == RoleInput && c.Inputs[t.Index] == v {
						override(t, mc.ModuleInput, "module_input_spec", i, []string{v.Name})
					}
				}
			}
		}
		for i, v := range outs {
			for _, t := range res.byName[v.Producer.Name].Tensors {
				if t.Role == RoleOutput && v.Producer.Outputs[t.Index] == v {
					override(t, mc.ModuleOutput, "module_output_spec", i, []string{v.Name})
				}
			}
		}
		for _, nr := range res.Nodes {
			if !inS(nr.Node) {
				continue
			}
			for _, t := range nr.Tensors {
				if t.Role == RoleState {
					override(t, mc.ModuleState, "module_state_spec", -1, []string{t.Key})
				}
			}
		}
	}
}

// functionCall returns the node calling a local function when it is the
// only node of module m (a module exported as a function), else nil.
func (r *resolver) functionCall(m string) *onnxgraph.Node {
	if m == "" {
		return nil
	}
	var only *onnxgraph.Node
	for _, n := range r.g.AllNodes() {
		if n.Module == m || strings.HasPrefix(n.Module, m+".") {
			if only != nil {
				return nil
			}
			only = n
		}
	}
	if only == nil || r.g.Model.Function(only.Proto.GetDomain(), only.OpType) == nil {
		return nil
	}
	return only
}

// finish checks a chosen spec against its tensor and fills in the
// defaults: the axis from the op, the calculator by role, the scale dtype.
func (r *resolver) finish(n *onnxgraph.Node, t *TensorResolution) {
	if t.Spec == nil {
		return
	}
	var v *onnxgraph.Value
	if t.Role == RoleOutput {
		v = n.Outputs[t.Index]
	} else {
		v = n.Inputs[t.Index]
	}
	switch dt := v.DType(); dt {
	case tensor.Undefined, tensor.Float, tensor.Float16, tensor.BFloat16, tensor.Double:
	default:
		t.Spec, t.Reason = nil, fmt.Sprintf("not a float tensor (%s)", dt)
		return
	}
	s := t.Spec.Resolved(t.Role == RoleState)
	if g := s.Granularity; g.Type != spec.PerTensor {
		dims, known := v.Shape()
		rank := len(dims)
		where := fmt.Sprintf("%s %s %q", n, t.Label(), v.Name)
		switch {
		case g.Axis == nil && !known:
			r.errorAt(t.Rule, "%s: %s without axis needs a tensor of known rank; set granularity.axis", where, g.Type)
			return
		case g.Axis == nil:
			axis, ok := defaultAxis(n, t.Index, rank, g.Type)
			if !ok || t.Role != RoleState {
				r.errorAt(t.Rule, "%s: %s without axis: %s has no default axis for this tensor (rank %d); set granularity.axis", where, g.Type, n.OpType, rank)
				return
			}
			s.Granularity.Axis = &axis
		case known:
			axis := *g.Axis
			if axis < 0 {
				axis += rank
			}
			if axis < 0 || axis >= rank {
				r.errorAt(t.Rule, "%s: granularity axis %d is out of range for a tensor of rank %d", where, *g.Axis, rank)
				return
			}
			s.Granularity.Axis = &axis
		}
	}
	t.Spec = s
}

func (r *resolver) errorAt(rule Rule, format string, args ...any) {
	r.errs = append(r.errs, &Diagnostic{File: rule.File, Line: max(rule.Line, 1), Col: max(rule.Col, 1), Msg: fmt.Sprintf(format, args...)})
}

// warnings lists config keys that matched nothing.
func (r *resolver) warnings(res *Resolution) []*Diagnostic {
	var out []*Diagnostic
	warn := func(rule Rule, hint, format string, args ...any) {
		out = append(out, &Diagnostic{File: rule.File, Line: max(rule.Line, 1), Col: max(rule.Col, 1), Msg: fmt.Sprintf(format, args...), Hint: hint})
	}
	modules, classes := allModules(r.g), sortedValues(r.types)
	for _, e := range r.cfg.ModuleNames {
		if !r.usedEntries[e] {
			warn(e.Rule, didYouMean(e.Key, modules), "%s matches no module in the model", e.Rule.Path)
		}
	}
	for _, e := range r.cfg.ModuleTypes {
		if r.usedEntries[e] {
			continue
		}
		if len(classes) == 0 {
			warn(e.Rule, "", "%s matches no module: the model records no module types (no pkg.torch.onnx.class_hierarchy metadata or local functions; a TorchScript export has scoped names only, so use module_name_configs)", e.Rule.Path)
		} else {
			warn(e.Rule, didYouMean(e.Key, classes), "%s matches no module type in the model (types: %s)", e.Rule.Path, strings.Join(classes, ", "))
		}
	}
	var applied []*ModuleConfig
	for mc := range r.applied {
		applied = append(applied, mc)
	}
	var opNames []string
	for _, nr := range res.Nodes {
		opNames = append(opNames, nr.Names...)
	}
	graphNames := false
	for _, c := range r.calls {
		graphNames = graphNames || c.GraphName != ""
	}
	for _, mc := range applied {
		for _, oe := range mc.OpTypes {
			if !r.usedOps[oe] {
				warn(oe.Rule, "", "%s matches no node where that config applies", oe.Rule.Path)
			}
		}
		for _, oe := range mc.OpNames {
			if !r.usedOps[oe] && r.cfg.ExecutionMode == Graph && !graphNames {
				warn(oe.Rule, didYouMean(oe.Key, opNames), "%s matches no node where that config applies: this model records no graph-mode op names (linear_1), which only torch's dynamo exporter writes (pkg.torch.onnx.name_scopes node metadata; a TorchScript export has none, and its ONNX nodes do not say which torch op and call they come from), so op names here are the ONNX node names, or with execution_mode: eager the eager names (submodule_a.add_1)",
					oe.Rule.Path)
			} else if !r.usedOps[oe] {
				warn(oe.Rule, didYouMean(oe.Key, opNames), "%s matches no node where that config applies (op names in %s mode: ONNX node names and %s)",
					oe.Rule.Path, r.cfg.ExecutionMode, map[ExecutionMode]string{Graph: "graph-mode FX names such as linear_1", Eager: "eager names such as submodule_a.add_1"}[r.cfg.ExecutionMode])
			}
		}
		for _, list := range [][]*OpEntry{mc.OpTypes, mc.OpNames} {
			for _, oe := range list {
				if oe.Config != nil && r.usedOps[oe] && !r.reaches(r.opNodes[oe]) {
					warn(oe.Rule, "", "%s: specs not applied: %s has no quantization rule (coreaiq ops lists the supported ops)", oe.Rule.Path, r.opNodes[oe][0].Node.OpType)
				}
			}
		}
	}
	used := map[*OrderedEntry]bool{}
	for _, oe := range r.orderedOf {
		used[oe] = true
	}
	for _, oe := range r.cfg.Ordered {
		if !used[oe] {
			warn(oe.Rule, "", "%s: module %q runs no %s call number %d", oe.Rule.Path, oe.Module, oe.Type, oe.Index)
		}
	}
	for m, field := range r.maps {
		for _, e := range m.Entries {
			if e.Star || e.Implicit || r.usedSpec[e] {
				continue
			}
			why := ""
			if strings.HasPrefix(field, "module_") && e.Index >= 0 {
				why = ": a module's inputs and outputs are the distinct tensors crossing its boundary, numbered in order of first use (the graph inputs' order for the root), so a tensor passed as several arguments (q, k and v in self-attention) is one input"
			}
			warn(e.Rule, "", "%s key %s matches no tensor where it applies%s", field, e.Key(), why)
		}
	}
	calcWarned := map[Rule]bool{}
	for _, nr := range res.Nodes {
		for _, t := range nr.Tensors {
			if t.Spec == nil || t.Role != RoleState || calcWarned[t.Rule] {
				continue
			}
			if c := t.Spec.Calculator.Type; c == spec.Percentile || c == spec.Entropy {
				calcWarned[t.Rule] = true
				warn(t.Rule, "", "qparam_calculator %s has no effect on weights such as %q of %s: a weight's range is its data's min/max, or with mse the range search over its values; %s applies to activations", c, t.Value, nr.Node, c)
			}
		}
	}
	for _, io := range r.inferred {
		if io.group == nil || len(io.values) < 2 {
			continue
		}
		for _, e := range io.group.Entries {
			if e.Index < 0 || e.Implicit || !r.usedSpec[e] {
				continue
			}
			names := make([]string, len(io.values))
			for i, v := range io.values {
				names[i] = fmt.Sprintf("%d = %s", i, v.Name)
			}
			what := "inputs are numbered by first use"
			if io.field == "module_output_spec" {
				what = "outputs are numbered in production order"
			}
			warn(e.Rule, "", "%s index keys on module %q: its %s (%s), not by the forward's signature, which the export does not record (dynamo's graph_signature covers the root module only)",
				io.field, io.module, what, strings.Join(names, ", "))
			break
		}
	}
	if r.cfg.ExecutionMode == Eager {
		warn(r.cfg.ExecutionModeRule, "", "execution_mode eager: op_name_config keys use eager names (module.op_N); Q/DQ placement stays as in graph mode, since the ONNX model is a static graph (one Q/DQ pair per tensor, shared qparams through MaxPool and reshapes)")
	}
	return out
}

// reaches reports whether an op entry's nodes have a slot the quantizer
// quantizes.
func (r *resolver) reaches(nodes []*NodeResolution) bool {
	if r.opts.Quantizable == nil {
		return true
	}
	for _, nr := range nodes {
		for _, t := range nr.Tensors {
			if r.opts.Quantizable(nr.Node, t.Role, t.Index) {
				return true
			}
		}
	}
	return false
}

// allModules lists every module of g, ancestors included, sorted.
func allModules(g *onnxgraph.Graph) []string {
	set := map[string]bool{}
	for _, n := range g.AllNodes() {
		for m := n.Module; m != ""; m = parentModule(m) {
			set[m] = true
		}
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

func sortedValues(m map[string]string) []string {
	set := map[string]bool{}
	for _, v := range m {
		if v != "" {
			set[v] = true
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

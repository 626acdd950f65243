package config

import (
	"fmt"
	"regexp"

	"github.com/coreaiq/coreaiq/pkg/spec"
)

// Rule locates the config entry that chose a spec: the file (or
// "preset:NAME" for an embedded preset), the line and column of the key,
// and the YAML path to it. Line 0 means a built-in default that no text
// states (an empty config file).
type Rule struct {
	File string `json:"file" yaml:"file"`
	Line int    `json:"line" yaml:"line"`
	Col  int    `json:"col" yaml:"col"`
	Path string `json:"path" yaml:"path"`
}

// String is "file:line (path)".
func (r Rule) String() string {
	if r.Line == 0 {
		return fmt.Sprintf("%s (%s)", r.File, r.Path)
	}
	return fmt.Sprintf("%s:%d (%s)", r.File, r.Line, r.Path)
}

// Location is "file:line", or the file alone for a built-in default.
func (r Rule) Location() string {
	if r.Line == 0 {
		return r.File
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

// QuantizerConfig is coreai-opt's QuantizerConfig: a global module config
// and overrides by module type and by module name.
type QuantizerConfig struct {
	// Global applies to every module without a more specific entry; nil
	// when disabled (global_config: null).
	Global *ModuleConfig
	// GlobalRule locates global_config (or its default).
	GlobalRule Rule
	// ModuleTypes are module_type_configs in file order; keys are exact
	// class names (torch.nn.modules.linear.Linear).
	ModuleTypes []*ModuleEntry
	// ModuleNames are module_name_configs in file order. A key made of
	// name characters only is a module name; any other key is a regex
	// matched at the start of a module name (torch.ao's re.match).
	ModuleNames []*ModuleEntry
	// Ordered are module_name_object_type_order_configs: the index-th call
	// of an op type directly in a module (torch.ao's
	// set_module_name_object_type_order). They outrank everything else.
	Ordered []*OrderedEntry
	// ExecutionMode picks which op names op_name_config keys use besides
	// ONNX node names: graph-mode FX names (default) or eager names.
	ExecutionMode ExecutionMode
	// ExecutionModeRule locates execution_mode, when the file sets it.
	ExecutionModeRule Rule
}

// ExecutionMode is coreai-opt's execution_mode.
type ExecutionMode uint8

// The execution modes.
const (
	Graph ExecutionMode = iota
	Eager
)

func (m ExecutionMode) String() string {
	if m == Eager {
		return "eager"
	}
	return "graph"
}

// OrderedEntry is one module_name_object_type_order_configs item.
type OrderedEntry struct {
	Module string
	// Type is the op type key as written and OpType its torch op type.
	Type   string
	OpType string
	Index  int
	// Config is nil when the entry disables the op.
	Config *OpConfig
	Rule   Rule
}

// ModuleEntry is one module_type_configs or module_name_configs entry.
type ModuleEntry struct {
	Key string
	// Re is the compiled key of a module_name_configs entry that is a
	// regex; nil for a plain module name.
	Re *regexp.Regexp
	// Config is nil when the entry disables the module (null or empty).
	Config *ModuleConfig
	Rule   Rule
}

// ModuleConfig is coreai-opt's ModuleQuantizerConfig.
type ModuleConfig struct {
	// OpInput, OpOutput and OpState are the module's default op specs
	// (op_input_spec, op_output_spec, op_state_spec), with the guide's
	// defaults filled in when the field is omitted.
	OpInput, OpOutput, OpState *SpecMap
	// OpTypes is op_type_config in file order (keys validated: ONNX op
	// types, torch op types, torch/aten names).
	OpTypes []*OpEntry
	// OpNames is op_name_config in file order: plain op names, or regexes
	// matched at the start of a name.
	OpNames []*OpEntry
	// ModuleInput, ModuleOutput and ModuleState are the module boundary
	// specs; empty (not disabled) when omitted.
	ModuleInput, ModuleOutput, ModuleState *SpecMap
	// Palette is the module's palettization in a
	// kmeans_palettization_config (nil in a quantization_config).
	Palette *Palettization
	// QATSchedule is set when the config had a qat_schedule, which
	// post-training quantization ignores (reported as a notice).
	QATSchedule bool
	Rule        Rule
}

// OpEntry is one op_type_config or op_name_config entry.
type OpEntry struct {
	Key string
	// Type is the op type an op_type_config key stands for: the key, or
	// the torch op type of torch.add / aten.linear.default.
	Type string
	// Re is the compiled key of an op_name_config entry that is a regex;
	// nil for a plain op name.
	Re *regexp.Regexp
	// Config is nil when the entry disables the op.
	Config *OpConfig
	Rule   Rule
}

// OpConfig is coreai-opt's OpQuantizerConfig. Omitted fields get the
// guide's defaults (OpQuantizerConfig() is W8A8), not the module's.
type OpConfig struct {
	Input, Output, State *SpecMap
	// Palette is the op's palettization in a kmeans_palettization_config.
	Palette *Palettization
	Rule    Rule
}

// KeyKind is what a SpecMap's keys are, besides "*".
type KeyKind uint8

// The key kinds. A map never mixes indices and names.
const (
	KeysStar    KeyKind = iota // only "*" (or empty)
	KeysIndices                // 0, 1, ...
	KeysNames                  // "X", "weight", ...
)

// SpecMap is one tensor-group field: op_input_spec, op_state_spec,
// module_input_spec, ...
type SpecMap struct {
	// Disabled is set by null or an empty value: nothing in the group is
	// quantized.
	Disabled bool
	Kind     KeyKind
	Entries  []*SpecEntry
	// Rule locates the field itself.
	Rule Rule
}

// SpecEntry is one key of a SpecMap.
type SpecEntry struct {
	// Star is the "*" key.
	Star bool
	// Index is the tensor index for index keys, -1 otherwise.
	Index int
	// Name is the tensor name for name keys.
	Name string
	// Spec is nil when the key disables its tensor.
	Spec *spec.QuantizationSpec
	Rule Rule
	// Implicit marks the guide's default entries, which no text states.
	Implicit bool
}

// Key is the entry's key as written.
func (e *SpecEntry) Key() string {
	switch {
	case e.Star:
		return "*"
	case e.Index >= 0:
		return fmt.Sprint(e.Index)
	}
	return e.Name
}

// Lookup finds the entry for a tensor: an entry naming its index or one of
// its names wins over "*". ok is false when no entry applies (and the map is
// not disabled).
func (m *SpecMap) Lookup(index int, names ...string) (e *SpecEntry, ok bool) {
	if m == nil || m.Disabled {
		return nil, false
	}
	var star *SpecEntry
	for _, e := range m.Entries {
		switch {
		case e.Star:
			if star == nil {
				star = e
			}
		case e.Index >= 0:
			if index >= 0 && e.Index == index {
				return e, true
			}
		default:
			for _, n := range names {
				if n != "" && e.Name == n {
					return e, true
				}
			}
		}
	}
	return star, star != nil
}

// defaultOpConfig is OpQuantizerConfig(): every input and output with the
// default activation spec, weights with the default weight spec.
func defaultOpConfig(r Rule) *OpConfig {
	return &OpConfig{
		Input:  defaultSpecMap(r, "op_input_spec", "*", spec.DefaultActivationSpec()),
		Output: defaultSpecMap(r, "op_output_spec", "*", spec.DefaultActivationSpec()),
		State:  defaultSpecMap(r, "op_state_spec", "weight", spec.DefaultWeightSpec()),
		Rule:   r,
	}
}

// defaultModuleConfig is ModuleQuantizerConfig() at rule r.
func defaultModuleConfig(r Rule) *ModuleConfig {
	op := defaultOpConfig(r)
	return &ModuleConfig{
		OpInput: op.Input, OpOutput: op.Output, OpState: op.State,
		ModuleInput:  emptySpecMap(r, "module_input_spec"),
		ModuleOutput: emptySpecMap(r, "module_output_spec"),
		ModuleState:  emptySpecMap(r, "module_state_spec"),
		Rule:         r,
	}
}

func defaultSpecMap(parent Rule, field, key string, s *spec.QuantizationSpec) *SpecMap {
	r := parent
	r.Path = joinPath(parent.Path, field) + " (default)"
	e := &SpecEntry{Index: -1, Spec: s, Rule: r, Implicit: true}
	kind := KeysStar
	if key == "*" {
		e.Star = true
	} else {
		e.Name = key
		kind = KeysNames
	}
	return &SpecMap{Kind: kind, Entries: []*SpecEntry{e}, Rule: r}
}

func emptySpecMap(parent Rule, field string) *SpecMap {
	r := parent
	r.Path = joinPath(parent.Path, field) + " (default)"
	return &SpecMap{Rule: r}
}

// opConfig is the module's own op_*_spec fields as an OpConfig.
func (m *ModuleConfig) opConfig() *OpConfig {
	return &OpConfig{Input: m.OpInput, Output: m.OpOutput, State: m.OpState, Palette: m.Palette, Rule: m.Rule}
}

// hasBoundary reports whether the module sets any module_*_spec.
func (m *ModuleConfig) hasBoundary() bool {
	for _, s := range []*SpecMap{m.ModuleInput, m.ModuleOutput, m.ModuleState} {
		if s != nil && (s.Disabled || len(s.Entries) > 0) {
			return true
		}
	}
	return false
}

// clone copies the module config so that a preset's config can be edited
// without touching the preset.
func (m *ModuleConfig) clone() *ModuleConfig {
	if m == nil {
		return nil
	}
	c := *m
	c.OpTypes = append([]*OpEntry(nil), m.OpTypes...)
	c.OpNames = append([]*OpEntry(nil), m.OpNames...)
	return &c
}

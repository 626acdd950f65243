package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// Config is one config file: tool settings and the quantization config.
type Config struct {
	// File is the path the config was read from (or the name given to Parse).
	File string
	// Dir is the directory relative paths in the file are resolved against.
	Dir string
	// File holds the tool settings the file states (paths already joined
	// with Dir). Settings() layers flags and environment over them.
	FileSettings FileSettings
	// Quant is the quantization config: quantization_config with presets,
	// only_for and without applied, and the guide's defaults filled in.
	Quant *QuantizerConfig
	// Palette is kmeans_palettization_config (see palettize.go), nil when
	// the file has none.
	Palette *QuantizerConfig
	// Notices are accepted keys that post-training quantization ignores
	// (qat_schedule), reported so that nothing is dropped silently.
	Notices []*Diagnostic
	// Algorithms is the algorithms block (none on when absent).
	Algorithms *Algorithms
}

// FileSettings are the tool settings of the config file (DESIGN.md §1).
// Zero values mean "not in the file".
type FileSettings struct {
	Model     string
	Output    string
	Report    string
	Engine    string
	Threads   int
	Data      []string
	Samples   int
	BatchSize int
	// Target is the `target:` key and TargetRule its location.
	Target     string
	TargetRule Rule
	// Images is the calibration.images block, nil when absent.
	Images *Images
	// set records which viper keys the file states ("calibration.samples").
	set map[string]any
}

// LoadFile reads and validates a config file. Errors are an ErrorList:
// every problem at once, each with file:line:col, sorted by line.
func LoadFile(path string) (*Config, error) {
	data, err := onnxgraph.ReadRegularFile(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(data, path)
}

// MaxFileSize is the largest config file read: 1 MiB, far more than any
// per-layer config of a large model needs, and small enough that parsing
// stays a fraction of a second.
const MaxFileSize = 1 << 20

// maxReported caps the errors one config reports; the last entry says how
// many more there were.
const maxReported = 50

// Parse decodes and validates a config held in memory; file names it in
// messages and its directory anchors relative paths.
func Parse(data []byte, file string) (*Config, error) {
	d := &decoder{file: file}
	cfg := &Config{File: file, Dir: filepath.Dir(file)}
	cfg.FileSettings.set = map[string]any{}
	root, perr := parseYAML(data, file)
	if perr != nil {
		return nil, ErrorList{perr}
	}
	var qcKey, qcVal, pcKey, pcVal *yaml.Node
	if !isNull(root) {
		root = deref(root)
		if root == nil || root.Kind != yaml.MappingNode {
			d.errorf(root, "", "a config file is a mapping of keys (model, quantization_config, ...), not %s", kindName(root))
		}
		for _, e := range d.mapping(root) {
			if !d.known(e, "config file", topFields) {
				continue
			}
			switch k := e.key.Value; k {
			case "model", "output", "report":
				if s, ok := d.str(e.val, k); ok {
					p := cfg.path(s)
					cfg.FileSettings.set[k] = p
					switch k {
					case "model":
						cfg.FileSettings.Model = p
					case "output":
						cfg.FileSettings.Output = p
					case "report":
						cfg.FileSettings.Report = p
					}
				}
			case "engine":
				if s, ok := d.str(e.val, k); ok {
					if !contains(engineNames, s) {
						d.errorf(e.val, didYouMean(s, engineNames), "engine %q: want go or ort", s)
					} else {
						cfg.FileSettings.Engine = s
						cfg.FileSettings.set[k] = s
					}
				}
			case "threads":
				if n, ok := d.integer(e.val, k); ok {
					if n < 0 {
						d.errorf(e.val, "", "threads must be 0 (all cores) or more, got %d", n)
					} else {
						cfg.FileSettings.Threads = n
						cfg.FileSettings.set[k] = n
					}
				}
			case "target":
				d.target(cfg, e)
			case "calibration":
				d.calibration(cfg, e.val)
			case "quantization_spec":
				d.specLibrary(e.val)
			case "quantization_config":
				qcKey, qcVal = e.key, e.val
			case algorithmsKey:
				cfg.Algorithms = d.algorithms(e.key, e.val)
			case "kmeans_palettization_config":
				pcKey, pcVal = e.key, e.val
			default:
				d.unread(e)
			}
		}
	}
	cfg.Quant = d.quantizerConfig(qcKey, qcVal)
	if pcKey != nil {
		cfg.Palette = d.configTree(pcKey, pcVal, paletteTree())
		if qcKey == nil {
			cfg.Quant = paletteOnly(d.rule(pcKey, "quantization_config"))
		}
	}
	if cfg.Algorithms == nil {
		cfg.Algorithms = &Algorithms{}
	}
	cfg.Notices = sortDiagnostics(d.notices)
	if len(d.errs) > 0 {
		errs := sortDiagnostics(d.errs)
		if len(errs) > maxReported {
			last := errs[maxReported-1]
			more := &Diagnostic{File: last.File, Line: last.Line, Col: last.Col,
				Msg: fmt.Sprintf("... and %d more errors", len(errs)-maxReported+1)}
			errs = append(errs[:maxReported-1:maxReported-1], more)
		}
		return nil, ErrorList(errs)
	}
	return cfg, nil
}

// path resolves a path written in the config against the config's directory.
func (c *Config) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// DataEntry is one calibration data entry, [NAME=]FILE[:axis=K]: the
// input it feeds ("" for a one-input model or a file that names its
// inputs), the file, and the axis the samples lie along in a .npy file (0
// unless given: a recurrent state [layers, batch, hidden] has it on 1).
type DataEntry struct {
	Name, File string
	Axis       int
}

var axisSuffix = regexp.MustCompile(`:axis=(-?[0-9]+)$`)

// ParseDataEntry reads [NAME=]FILE[:axis=K].
func ParseDataEntry(entry string) (DataEntry, error) {
	var e DataEntry
	if m := axisSuffix.FindStringSubmatchIndex(entry); m != nil {
		axis, err := strconv.Atoi(entry[m[2]:m[3]])
		if err != nil || axis < 0 {
			return e, fmt.Errorf("data %q: the batch axis must be 0 or more", entry)
		}
		e.Axis, entry = axis, entry[:m[0]]
	}
	if name, file, ok := strings.Cut(entry, "="); ok {
		if name == "" {
			return e, fmt.Errorf("data %q: no input name before \"=\"", entry)
		}
		e.Name, e.File = name, file
	} else {
		e.File = entry
	}
	if e.File == "" {
		return e, fmt.Errorf("data %q names no file", entry)
	}
	return e, nil
}

// String writes the entry back in the form ParseDataEntry reads.
func (e DataEntry) String() string {
	s := e.File
	if e.Name != "" {
		s = e.Name + "=" + s
	}
	if e.Axis != 0 || axisSuffix.MatchString(s) {
		s += ":axis=" + strconv.Itoa(e.Axis)
	}
	return s
}

// dataPath resolves the FILE part of a calibration data entry against the
// config's directory, keeping its NAME= prefix and axis.
func (c *Config) dataPath(entry string) (string, error) {
	e, err := ParseDataEntry(entry)
	if err != nil {
		return entry, err
	}
	e.File = c.path(e.File)
	return e.String(), nil
}

// decoder turns yaml.Nodes into config types, collecting every error.
type decoder struct {
	file    string
	errs    []*Diagnostic
	notices []*Diagnostic
	visits  int
}

func (d *decoder) errorf(n *yaml.Node, hint, format string, args ...any) {
	d.errs = append(d.errs, d.diag(n, hint, format, args...))
}

func (d *decoder) diag(n *yaml.Node, hint, format string, args ...any) *Diagnostic {
	line, col := 1, 1
	if n != nil && n.Line > 0 {
		line, col = n.Line, max(n.Column, 1)
	}
	return &Diagnostic{File: d.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

func (d *decoder) unknownKey(k *yaml.Node, where string, valid []string) {
	d.errorf(k, didYouMean(k.Value, valid), "unknown key %q in %s (valid: %s)", k.Value, where, strings.Join(valid, ", "))
}

func (d *decoder) rule(n *yaml.Node, path string) Rule {
	r := Rule{File: d.file, Path: path}
	if n != nil {
		r.Line, r.Col = n.Line, n.Column
	}
	return r
}

// wantMapping checks that n (aliases followed) is a mapping.
func (d *decoder) wantMapping(n *yaml.Node, what string) bool {
	v := deref(n)
	if v == nil || v.Kind != yaml.MappingNode {
		d.errorf(n, "", "%s: want a mapping, got %s", what, kindName(n))
		return false
	}
	return true
}

func (d *decoder) calibration(cfg *Config, n *yaml.Node) {
	if isNull(n) || !d.wantMapping(n, "calibration") {
		return
	}
	cal := map[string]any{}
	for _, e := range d.mapping(n) {
		if !d.known(e, "calibration", calibrationFields) {
			continue
		}
		switch k := e.key.Value; k {
		case "data":
			var list []string
			v := deref(e.val)
			if v != nil && v.Kind == yaml.SequenceNode {
				for _, item := range v.Content {
					if s, ok := d.str(item, "calibration.data item"); ok {
						p, err := cfg.dataPath(s)
						if err != nil {
							d.errorf(item, "", "calibration.%v", err)
						}
						list = append(list, p)
					}
				}
			} else if s, ok := d.str(e.val, "calibration.data (a path or a list of paths)"); ok {
				p, err := cfg.dataPath(s)
				if err != nil {
					d.errorf(e.val, "", "calibration.%v", err)
				}
				list = []string{p}
			}
			cfg.FileSettings.Data = list
			cal["data"] = list
		case "images":
			cfg.FileSettings.Images = d.images(cfg, e.val)
		case "samples", "batch_size":
			if i, ok := d.integer(e.val, "calibration."+k); ok {
				if i <= 0 {
					d.errorf(e.val, "", "calibration.%s must be positive, got %d", k, i)
					continue
				}
				if k == "samples" {
					cfg.FileSettings.Samples = i
				} else {
					cfg.FileSettings.BatchSize = i
				}
				cal[k] = i
			}
		default:
			d.unread(e)
		}
	}
	if len(cal) > 0 {
		cfg.FileSettings.set["calibration"] = cal
	}
}

// specLibrary validates quantization_spec: named specs, usually anchored
// and used through aliases.
func (d *decoder) specLibrary(n *yaml.Node) {
	if isNull(n) || !d.wantMapping(n, "quantization_spec") {
		return
	}
	for _, e := range d.mapping(n) {
		if isNull(e.val) {
			d.errorf(e.key, "", "quantization_spec %q is empty: a spec needs at least a dtype", e.key.Value)
			continue
		}
		d.spec(e.val, joinPath("quantization_spec", e.key.Value))
	}
}

// quantizerConfig decodes quantization_config. Absent or empty, it is
// QuantizerConfig(): W8A8 everywhere.
func (d *decoder) quantizerConfig(key, n *yaml.Node) *QuantizerConfig {
	return d.configTree(key, n, quantizerTree())
}

// configTree is one top-level config of the guide's shape (global_config,
// module_type_configs, module_name_configs, only_for, without) whose module
// configs t decodes: quantization_config and kmeans_palettization_config
// share it, and so their precedence and null semantics.
func (d *decoder) configTree(key, n *yaml.Node, t tree) *QuantizerConfig {
	path := t.path
	base := d.rule(key, path)
	globalRule := base
	globalRule.Path = path + ".global_config (default)"
	qc := &QuantizerConfig{Global: t.defaults(globalRule), GlobalRule: globalRule}
	if isNullOrEmpty(n) || !d.wantMapping(n, path) {
		return qc
	}
	var global, onlyFor, without, types, names, ordered, mode *entry
	for _, e := range d.mapping(n) {
		e := e
		if !d.known(e, path, t.keys) {
			continue
		}
		switch e.key.Value {
		case "preset":
			if p := d.presetRef(e.val); p != nil {
				qc = p
			}
		case "execution_mode":
			mode = &e
		case "module_name_object_type_order_configs":
			ordered = &e
		case "global_config":
			global = &e
		case "only_for":
			onlyFor = &e
		case "without":
			without = &e
		case "module_type_configs":
			types = &e
		case "module_name_configs":
			names = &e
		default:
			d.unread(e)
		}
	}
	// Setters apply in the guide's chaining order: the preset, then
	// global_config, then only_for/without, then the explicit module entries
	// (which override entries only_for/without made for the same key).
	if mode != nil {
		qc.ExecutionModeRule = d.rule(mode.key, path+".execution_mode")
		if s, ok := d.str(mode.val, "execution_mode"); ok {
			switch s {
			case executionModes[Graph]:
				qc.ExecutionMode = Graph
			case executionModes[Eager]:
				qc.ExecutionMode = Eager
			default:
				d.errorf(mode.val, didYouMean(s, executionModes), "execution_mode %q: want %s", s, strings.Join(executionModes, " or "))
			}
		}
	}
	if global != nil {
		qc.GlobalRule = d.rule(global.key, path+".global_config")
		qc.Global = nil
		if !isNull(global.val) && d.wantMapping(global.val, "global_config") {
			qc.Global = t.module(d, global.val, qc.GlobalRule)
		}
	}
	if onlyFor != nil {
		r := d.rule(onlyFor.key, path+".only_for")
		tys, nms := d.targets(onlyFor.val, "only_for")
		if qc.Global == nil && (len(tys) > 0 || len(nms) > 0) {
			d.errorf(onlyFor.key, "", "only_for moves the global config onto its targets, but the global config is disabled; set preset or global_config")
		}
		moved := qc.Global
		qc.Global, qc.GlobalRule = nil, r
		for _, t := range tys {
			qc.ModuleTypes = d.setEntry(qc.ModuleTypes, &ModuleEntry{Key: t.Value, Config: moved, Rule: d.rule(t, joinPath(r.Path, t.Value))})
		}
		for _, t := range nms {
			if re, ok := d.moduleRegex(t); ok {
				qc.ModuleNames = d.setEntry(qc.ModuleNames, &ModuleEntry{Key: t.Value, Re: re, Config: moved, Rule: d.rule(t, joinPath(r.Path, t.Value))})
			}
		}
	}
	if without != nil {
		r := d.rule(without.key, path+".without")
		tys, nms := d.targets(without.val, "without")
		for _, t := range tys {
			qc.ModuleTypes = d.setEntry(qc.ModuleTypes, &ModuleEntry{Key: t.Value, Rule: d.rule(t, joinPath(r.Path, t.Value))})
		}
		for _, t := range nms {
			if re, ok := d.moduleRegex(t); ok {
				qc.ModuleNames = d.setEntry(qc.ModuleNames, &ModuleEntry{Key: t.Value, Re: re, Rule: d.rule(t, joinPath(r.Path, t.Value))})
			}
		}
	}
	if types != nil && !isNull(types.val) && d.wantMapping(types.val, "module_type_configs") {
		for _, e := range d.mapping(types.val) {
			r := d.rule(e.key, joinPath(path+".module_type_configs", e.key.Value))
			var mc *ModuleConfig
			if !isNull(e.val) && d.wantMapping(e.val, r.Path) {
				mc = t.module(d, e.val, r)
			}
			qc.ModuleTypes = d.setEntry(qc.ModuleTypes, &ModuleEntry{Key: e.key.Value, Config: mc, Rule: r})
		}
	}
	if names != nil && !isNull(names.val) && d.wantMapping(names.val, "module_name_configs") {
		for _, e := range d.mapping(names.val) {
			r := d.rule(e.key, joinPath(path+".module_name_configs", e.key.Value))
			re, ok := d.moduleRegex(e.key)
			var mc *ModuleConfig
			if !isNull(e.val) && d.wantMapping(e.val, r.Path) {
				mc = t.module(d, e.val, r)
			}
			if ok {
				qc.ModuleNames = d.setEntry(qc.ModuleNames, &ModuleEntry{Key: e.key.Value, Re: re, Config: mc, Rule: r})
			}
		}
	}
	if ordered != nil {
		qc.Ordered = d.orderedEntries(ordered, path+".module_name_object_type_order_configs")
	}
	return qc
}

// orderedEntries decodes module_name_object_type_order_configs: a list of
// {module_name, object_type, index, config}, torch.ao's
// set_module_name_object_type_order. An item repeating an earlier
// (module_name, object_type, index) replaces it.
func (d *decoder) orderedEntries(e *entry, path string) []*OrderedEntry {
	v := deref(e.val)
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		d.errorf(e.val, "", "%s: want a list of {module_name, object_type, index, config}, got %s", path, kindName(e.val))
		return nil
	}
	var out []*OrderedEntry
	for i, item := range v.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if !d.wantMapping(item, ipath) {
			continue
		}
		oe := &OrderedEntry{Rule: d.rule(deref(item), ipath), Index: -1}
		var cfg *yaml.Node
		hasCfg, ok := false, true
		for _, f := range d.mapping(item) {
			if !d.known(f, ipath, orderedFields) {
				ok = false
				continue
			}
			switch f.key.Value {
			case "module_name":
				oe.Module, _ = d.str(f.val, ipath+".module_name")
			case "object_type":
				t, good := d.str(f.val, ipath+".object_type")
				if good && !validOpTypeKey(t) {
					d.errorf(f.val, didYouMean(t, opTypeKeys()), "unknown op type %q: want an ONNX op type, a torch functional name (linear, add) or aten/torch name", t)
					good = false
				}
				oe.Type, oe.OpType = t, opTypeOfKey(t)
				ok = ok && good
			case "index":
				n, good := d.integer(f.val, ipath+".index")
				if good && n < 0 {
					d.errorf(f.val, "", "%s.index must be 0 or more, got %d", ipath, n)
					good = false
				}
				oe.Index = n
				ok = ok && good
			case "config":
				cfg, hasCfg = f.val, true
			default:
				d.unread(f)
			}
		}
		if oe.Type == "" || oe.Index < 0 || !hasCfg {
			d.errorf(item, "", "%s needs object_type, index and config (module_name defaults to the root, \"\")", ipath)
			continue
		}
		oe.Config = d.opConfig(cfg, oe.Rule)
		if !ok {
			continue
		}
		replaced := false
		for j, old := range out {
			if old.Module == oe.Module && old.OpType == oe.OpType && old.Index == oe.Index {
				out[j], replaced = oe, true
			}
		}
		if !replaced {
			out = append(out, oe)
		}
	}
	return out
}

// setEntry is set_module_type/set_module_name: a key already present gets
// the new value in place (its position in the match order stays).
func (d *decoder) setEntry(list []*ModuleEntry, e *ModuleEntry) []*ModuleEntry {
	for i, old := range list {
		if old.Key == e.Key {
			d.notices = append(d.notices, &Diagnostic{File: old.Rule.File, Line: max(old.Rule.Line, 1), Col: max(old.Rule.Col, 1),
				Msg: fmt.Sprintf("%s does nothing: %s (line %d) sets the same module", old.Rule.Path, e.Rule.Path, e.Rule.Line)})
			out := append([]*ModuleEntry(nil), list...)
			out[i] = e
			return out
		}
	}
	return append(list, e)
}

// targets reads only_for/without: {module_types: [...], module_names: [...]}.
func (d *decoder) targets(n *yaml.Node, what string) (types, names []*yaml.Node) {
	if isNullOrEmpty(n) {
		return nil, nil
	}
	if v := deref(n); v != nil && v.Kind == yaml.SequenceNode {
		d.errorf(n, "", "%s: want a mapping {module_types: [...], module_names: [...]}, got a list (a class name and a module name cannot be told apart)", what)
		return nil, nil
	}
	if !d.wantMapping(n, what) {
		return nil, nil
	}
	for _, e := range d.mapping(n) {
		if !d.known(e, what, targetFields) {
			continue
		}
		var list []*yaml.Node
		v := deref(e.val)
		switch {
		case isNull(v):
		case v.Kind == yaml.SequenceNode:
			for _, item := range v.Content {
				if _, ok := d.str(item, what+"."+e.key.Value+" item"); ok {
					list = append(list, deref(item))
				}
			}
		default:
			if _, ok := d.str(e.val, what+"."+e.key.Value+" (a name or a list of names)"); ok {
				list = append(list, v)
			}
		}
		switch e.key.Value {
		case "module_types":
			types = append(types, list...)
		case "module_names":
			names = append(names, list...)
		default:
			d.unread(e)
		}
	}
	return types, names
}

// moduleRegex compiles a module_name_configs key: nil for a plain module
// name (see namePattern). ok is false when the regex does not compile.
func (d *decoder) moduleRegex(k *yaml.Node) (*regexp.Regexp, bool) {
	re, err := namePattern(k.Value)
	if err != nil {
		d.errorf(k, "", "module name pattern %q does not compile: %v", k.Value, err)
		return nil, false
	}
	return re, true
}

// compileAnchored compiles a regex that must match a whole name (the
// algorithms block's exclude lists). The error describes the pattern as
// written, not the anchored form.
func compileAnchored(pattern string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

// plainName matches keys that are names, not regexes: letters, digits and
// the characters module paths and node names use. In a plain name "." is a
// dot, not a wildcard.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]*$`)

// namePattern compiles a name key. A plain name gives nil: it is compared
// as a string. Any other key is a regex matched at the start of a name, as
// torch.ao's re.match does ("foo.*" matches "foo.bar.conv0"; add "$" to
// match a whole name). The error describes the pattern as written.
func namePattern(pattern string) (*regexp.Regexp, error) {
	if plainName.MatchString(pattern) {
		return nil, nil
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return regexp.Compile(`^(?:` + pattern + `)`)
}

// OpNameKey is the op_name_config key that names exactly the op called
// name: the name itself when it is plain, else a regex matching only it.
func OpNameKey(name string) string {
	if plainName.MatchString(name) {
		return name
	}
	return regexp.QuoteMeta(name) + "$"
}

// presetRef resolves `preset: NAME` to a copy of the preset's config.
func (d *decoder) presetRef(n *yaml.Node) *QuantizerConfig {
	name, ok := d.str(n, "preset")
	if !ok {
		return nil
	}
	p, err := Preset(name)
	if err != nil {
		d.errorf(n, didYouMean(name, PresetNames()), "unknown preset %q (presets: %s)", name, strings.Join(PresetNames(), ", "))
		return nil
	}
	return p
}

// moduleConfig decodes a ModuleQuantizerConfig mapping; r locates it.
func (d *decoder) moduleConfig(n *yaml.Node, r Rule) *ModuleConfig {
	entries := d.mapping(n)
	mc := defaultModuleConfig(r)
	for _, e := range entries {
		if e.key.Value == "preset" {
			if p := d.presetRef(e.val); p != nil {
				if p.Global == nil {
					d.errorf(e.val, "", "preset %q has no global config to use here", e.key.Value)
				} else {
					mc = p.Global.clone()
				}
			}
		}
	}
	mc.Rule = r
	for _, e := range entries {
		if !d.known(e, "a module config", moduleFields) {
			continue
		}
		path := joinPath(r.Path, e.key.Value)
		kr := d.rule(e.key, path)
		switch e.key.Value {
		case "preset":
		case "op_input_spec":
			mc.OpInput = d.specMap(e, kr, tensorActivation, true)
		case "op_output_spec":
			mc.OpOutput = d.specMap(e, kr, tensorActivation, true)
		case "op_state_spec":
			mc.OpState = d.specMap(e, kr, tensorState, false)
		case "module_input_spec":
			mc.ModuleInput = d.specMap(e, kr, tensorActivation, true)
		case "module_output_spec":
			mc.ModuleOutput = d.specMap(e, kr, tensorActivation, true)
		case "module_state_spec":
			mc.ModuleState = d.specMap(e, kr, tensorState, false)
		case "op_type_config":
			mc.OpTypes = d.opTypeEntries(e.val, path, d.opConfig)
		case "op_name_config":
			mc.OpNames = d.opNameEntries(e.val, path, d.opConfig)
		case "qat_schedule":
			mc.QATSchedule = true
			d.notices = append(d.notices, d.diag(e.key, "", "qat_schedule is ignored: post-training quantization has no training schedule"))
		default:
			d.unread(e)
		}
	}
	return mc
}

// opTypeEntries decodes op_type_config at path, each entry's value by op.
func (d *decoder) opTypeEntries(n *yaml.Node, path string, op func(*yaml.Node, Rule) *OpConfig) []*OpEntry {
	if isNull(n) || !d.wantMapping(n, path) {
		return nil
	}
	var out []*OpEntry
	for _, oe := range d.mapping(n) {
		if !validOpTypeKey(oe.key.Value) {
			d.errorf(oe.key, didYouMean(oe.key.Value, opTypeKeys()),
				"unknown op type %q: want an ONNX op type (Conv, MatMul, Softmax), a torch functional name (linear, conv2d, softmax) or domain.OpType", oe.key.Value)
			continue
		}
		or := d.rule(oe.key, joinPath(path, oe.key.Value))
		out = append(out, &OpEntry{Key: oe.key.Value, Type: opTypeOfKey(oe.key.Value), Config: op(oe.val, or), Rule: or})
	}
	return out
}

// opNameEntries decodes op_name_config at path, each entry's value by op.
func (d *decoder) opNameEntries(n *yaml.Node, path string, op func(*yaml.Node, Rule) *OpConfig) []*OpEntry {
	if isNull(n) || !d.wantMapping(n, path) {
		return nil
	}
	var out []*OpEntry
	for _, oe := range d.mapping(n) {
		re, err := namePattern(oe.key.Value)
		if err != nil {
			d.errorf(oe.key, "", "op name pattern %q does not compile: %v", oe.key.Value, err)
			continue
		}
		or := d.rule(oe.key, joinPath(path, oe.key.Value))
		out = append(out, &OpEntry{Key: oe.key.Value, Re: re, Config: op(oe.val, or), Rule: or})
	}
	return out
}

// opConfig decodes an OpQuantizerConfig; null or empty disables the op (nil).
func (d *decoder) opConfig(n *yaml.Node, r Rule) *OpConfig {
	if isNull(n) || !d.wantMapping(n, r.Path) {
		return nil
	}
	oc := defaultOpConfig(r)
	for _, e := range d.mapping(n) {
		if moduleFields.has(e.key.Value) && !opFields.has(e.key.Value) {
			d.errorf(e.key, "", "%s belongs in a module config; an op config has only %s", e.key.Value, strings.Join(opFields.names(), ", "))
			continue
		}
		if !d.known(e, "an op config", opFields) {
			continue
		}
		kr := d.rule(e.key, joinPath(r.Path, e.key.Value))
		switch e.key.Value {
		case "op_input_spec":
			oc.Input = d.specMap(e, kr, tensorActivation, true)
		case "op_output_spec":
			oc.Output = d.specMap(e, kr, tensorActivation, true)
		case "op_state_spec":
			oc.State = d.specMap(e, kr, tensorState, false)
		default:
			d.unread(e)
		}
	}
	return oc
}

type tensorKind uint8

const (
	tensorActivation tensorKind = iota
	tensorState
)

// specMap decodes one tensor-group field.
func (d *decoder) specMap(e entry, r Rule, kind tensorKind, indices bool) *SpecMap {
	m := &SpecMap{Rule: r}
	if isNullOrEmpty(e.val) {
		m.Disabled = true
		return m
	}
	if !d.wantMapping(e.val, e.key.Value) {
		return m
	}
	for _, te := range d.mapping(e.val) {
		k := te.key
		se := &SpecEntry{Index: -1, Rule: d.rule(k, joinPath(r.Path, k.Value))}
		switch {
		case k.ShortTag() == "!!int":
			idx, ok := d.integer(k, e.key.Value+" key")
			if !ok {
				continue
			}
			if !indices {
				d.errorf(k, "", "%s keys are state names (weight, bias) or \"*\", not indices", e.key.Value)
				continue
			}
			if idx < 0 {
				d.errorf(k, "", "%s index %d is negative", e.key.Value, idx)
				continue
			}
			se.Index = idx
			if m.Kind == KeysNames {
				d.errorf(k, "", "%s mixes index and name keys; use one kind (with \"*\")", e.key.Value)
				continue
			}
			m.Kind = KeysIndices
		case k.Value == "*":
			se.Star = true
		default:
			if k.ShortTag() != "!!str" {
				d.errorf(k, "", "%s key: want \"*\", an index or a name, got %s", e.key.Value, kindName(k))
				continue
			}
			if !strings.HasPrefix(e.key.Value, "module_") && !validTensorName(k.Value) {
				d.errorf(k, didYouMean(k.Value, knownTensorNames()), "%s key %q names no tensor of any op: want \"*\", an index, a torch argument name (input, other, weight, bias), an ONNX input name (X, A, B) or input_<i>/output_<i>", e.key.Value, k.Value)
				continue
			}
			se.Name = k.Value
			if m.Kind == KeysIndices {
				d.errorf(k, "", "%s mixes index and name keys; use one kind (with \"*\")", e.key.Value)
				continue
			}
			m.Kind = KeysNames
		}
		if !isNull(te.val) {
			se.Spec = d.spec(te.val, se.Rule.Path)
			if se.Spec != nil && kind == tensorActivation {
				switch g := se.Spec.Granularity; {
				case g.Type == spec.PerBlock:
					d.errorf(k, "", "%s: per_block granularity is for weights, not activations", se.Rule.Path)
					se.Spec = nil
				case g.Type == spec.PerChannel && g.Axis == nil:
					d.errorf(k, "", "%s: per_channel on activations needs an explicit axis (the default axes are for weights)", se.Rule.Path)
					se.Spec = nil
				}
			}
		}
		m.Entries = append(m.Entries, se)
	}
	return m
}

// spec decodes a QuantizationSpec with the guide's defaults: int8,
// symmetric, per tensor, calculator and scale dtype picked at resolution.
func (d *decoder) spec(n *yaml.Node, path string) *spec.QuantizationSpec {
	if !d.wantMapping(n, path) {
		return nil
	}
	s := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric}
	ok := true
	for _, e := range d.mapping(n) {
		if !d.known(e, "a quantization spec", specFields) {
			ok = false
			continue
		}
		switch k := e.key.Value; k {
		case "dtype", "scale_dtype":
			v, good := d.str(e.val, k)
			if !good {
				ok = false
				continue
			}
			dt, err := spec.ParseDType(v)
			if err != nil {
				d.errorf(e.val, didYouMean(strings.TrimPrefix(v, "torch."), spec.DTypes()), "%s: %v", k, err)
				ok = false
				continue
			}
			if k == "dtype" {
				s.DType = dt
			} else {
				s.ScaleDType = dt
			}
		case "qscheme":
			v, good := d.str(e.val, k)
			if !good {
				ok = false
				continue
			}
			q, err := spec.ParseQScheme(v)
			if err != nil {
				d.errorf(e.val, didYouMean(v, spec.QSchemes()), "qscheme: %v (want %s)", err, strings.Join(spec.QSchemes(), ", "))
				ok = false
				continue
			}
			s.QScheme = q
		case "granularity":
			g, good := d.granularity(e.val)
			ok = ok && good
			s.Granularity = g
		case "qparam_calculator", "qparam_calculator_cls":
			c, good := d.calculator(e.val)
			ok = ok && good
			s.Calculator = c
		default:
			d.unread(e)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	if err := s.Validate(); err != nil {
		d.errorf(n, "", "%s: %v", path, err)
		return nil
	}
	return s
}

func (d *decoder) granularity(n *yaml.Node) (spec.Granularity, bool) {
	var g spec.Granularity
	parseType := func(v *yaml.Node) bool {
		s, ok := d.str(v, "granularity type")
		if !ok {
			return false
		}
		t, err := spec.ParseGranularityType(s)
		if err != nil {
			d.errorf(v, didYouMean(s, spec.GranularityTypes()), "%v (want %s)", err, strings.Join(spec.GranularityTypes(), ", "))
			return false
		}
		g.Type = t
		return true
	}
	if v := deref(n); v != nil && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		return g, parseType(n)
	}
	if !d.wantMapping(n, "granularity (a mapping like {type: per_block, block_size: 32})") {
		return g, false
	}
	ok, typed := true, false
	for _, e := range d.mapping(n) {
		if !d.known(e, "granularity", granularityFields) {
			ok = false
			continue
		}
		switch e.key.Value {
		case "type":
			typed = true
			ok = parseType(e.val) && ok
		case "axis":
			if isNull(e.val) {
				continue
			}
			a, good := d.integer(e.val, "granularity axis")
			if good && (a < -8 || a > 7) {
				d.errorf(e.val, "", "granularity axis %d is out of range: ONNX weights have at most 8 dimensions (use -8..7)", a)
				good = false
			}
			if good {
				g.Axis = &a
			}
			ok = ok && good
		case "block_size":
			b, good := d.integer(e.val, "block_size")
			if good && b <= 0 {
				d.errorf(e.val, "", "block_size must be positive, got %d", b)
				good = false
			}
			g.BlockSize = b
			ok = ok && good
		default:
			d.unread(e)
			ok = false
		}
	}
	if !typed {
		d.errorf(n, "", "granularity needs a type (%s)", strings.Join(spec.GranularityTypes(), ", "))
		return g, false
	}
	return g, ok
}

func (d *decoder) calculator(n *yaml.Node) (spec.Calculator, bool) {
	var c spec.Calculator
	parseType := func(v *yaml.Node) bool {
		s, ok := d.str(v, "qparam calculator")
		if !ok {
			return false
		}
		t, err := spec.ParseCalculatorType(s)
		if err != nil {
			d.errorf(v, didYouMean(s, spec.CalculatorTypes()), "%v (want %s)", err, strings.Join(spec.CalculatorTypes(), ", "))
			return false
		}
		c.Type = t
		return true
	}
	if v := deref(n); v != nil && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		return c, parseType(n)
	}
	if !d.wantMapping(n, "qparam_calculator (a name or {type: moving_average, averaging_constant: 0.01})") {
		return c, false
	}
	ok, typed := true, false
	params := map[string]*yaml.Node{}
	for _, e := range d.mapping(n) {
		if !d.known(e, "qparam_calculator", calculatorFields) {
			ok = false
			continue
		}
		switch k := e.key.Value; k {
		case "type":
			typed = true
			ok = parseType(e.val) && ok
		case "averaging_constant", "percentile":
			f, good := d.number(e.val, k)
			if good && k == "averaging_constant" && (f <= 0 || f > 1) {
				d.errorf(e.val, "", "averaging_constant must be in (0, 1], got %g", f)
				good = false
			}
			if good && k == "percentile" && (f <= 0 || f > 100) {
				d.errorf(e.val, "", "percentile must be in (0, 100], got %g", f)
				good = false
			}
			if k == "averaging_constant" {
				c.AveragingConstant = f
			} else {
				c.Percentile = f
			}
			params[k] = e.key
			ok = ok && good
		case "num_bins":
			b, good := d.integer(e.val, k)
			if good && b <= 0 {
				d.errorf(e.val, "", "num_bins must be positive, got %d", b)
				good = false
			}
			c.NumBins = b
			params[k] = e.key
			ok = ok && good
		default:
			d.unread(e)
			ok = false
		}
	}
	if !typed {
		d.errorf(n, "", "qparam_calculator needs a type (%s)", strings.Join(spec.CalculatorTypes(), ", "))
		return c, false
	}
	applies := map[spec.CalculatorType][]string{
		spec.MovingAverage: {"averaging_constant"},
		spec.Percentile:    {"percentile", "num_bins"},
		spec.Entropy:       {"num_bins"},
		spec.MSE:           {"num_bins"},
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !contains(applies[c.Type], k) {
			d.errorf(params[k], "", "%s does not apply to the %s calculator", k, c.Type)
			ok = false
		}
	}
	return c, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

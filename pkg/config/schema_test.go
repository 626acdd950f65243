package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/coreaiq/coreaiq/pkg/spec"
)

// compiledSchema compiles JSONSchema with a validator independent of the
// generator, which also checks the schema against the draft's metaschema.
func compiledSchema(tb testing.TB) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("coreaiq.schema.json", doc); err != nil {
		tb.Fatal(err)
	}
	sch, err := c.Compile("coreaiq.schema.json")
	if err != nil {
		tb.Fatalf("the schema does not compile: %v", err)
	}
	return sch
}

// schemaJudges reports whether the schema accepts a YAML config, as an
// editor's YAML language server sees it: anchors, aliases and merges
// expanded, keys as strings. Text that is not well-formed YAML is
// rejected; of a stream of documents the first is judged.
func schemaJudges(sch *jsonschema.Schema, text []byte) error {
	var v any
	dec := yaml.NewDecoder(bytes.NewReader(text))
	for i := 0; ; i++ {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not loadable YAML: %w", err)
		}
		if i == 0 {
			v = doc
		}
	}
	b, err := json.Marshal(jsonValue(v))
	if err != nil {
		return fmt.Errorf("no JSON form: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// jsonValue turns a YAML value into its JSON form (mapping keys as strings).
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = jsonValue(e)
		}
		return out
	case map[any]any:
		out := map[string]any{}
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	}
	return v
}

// validateOnly are the rules only `config validate` checks, each with the
// messages that state it; the README lists them under "Editors and CI".
var validateOnly = []struct{ rule, msg string }{
	{"one YAML document per file", `holds one YAML document`},
	{"regexes compile (RE2 syntax)", `does not compile|is not a valid regex`},
	{"a spec's fields agree (float dtypes are symmetric; block_size and axis fit the granularity)", `needs an integer dtype|per_block granularity needs block_size|block_size applies to per_block|axis applies to per_channel`},
	{"calculator parameters belong to the calculator type", `does not apply to the`},
	{"a spec map uses index keys or name keys, not both; an index is a YAML integer; module_state_spec takes none", `mixes index and name keys|keys are state names|names no tensor`},
	{"palettization fields agree (group_size, per_grouped_channel, cluster_dim)", `per_grouped_channel needs group_size|applies to per_grouped_channel|is not a multiple of cluster_dim`},
	{"only_for needs an enabled global config; a module's preset needs a global config", `only_for moves the global config|has no global config to use here`},
	{"calibration data entries read as [NAME=]FILE[:axis=K]", `calibration\.data`},
	{"calibration.images mean and std fit the color's channels and a float dtype", `values; color|feeds raw pixels`},
}

// validateOnlyRule names the validate-only rule msg states, "" for none.
func validateOnlyRule(msg string) string {
	for _, r := range validateOnly {
		if regexp.MustCompile(r.msg).MatchString(msg) {
			return r.rule
		}
	}
	return ""
}

// configCorpus is every config the repository holds: configs/, the
// examples, every testdata folder, the presets and the fuzz corpus.
func configCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") && rel != "." {
			return filepath.SkipDir
		}
		inCorpus := strings.HasPrefix(rel, "configs"+string(filepath.Separator)) ||
			strings.HasPrefix(rel, "examples"+string(filepath.Separator)) ||
			slices.Contains(strings.Split(rel, string(filepath.Separator)), "testdata")
		if d.IsDir() || !inCorpus || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range PresetNames() {
		b, _ := PresetYAML(name)
		out["preset:"+name] = b
	}
	for i, s := range fuzzConfigSeeds {
		out[fmt.Sprintf("FuzzLoadConfig seed %d", i)] = []byte(s)
	}
	corpus, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzLoadConfig", "*"))
	for _, f := range corpus {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text, ok := fuzzBytes(b)
		if !ok {
			t.Fatalf("%s: not a go test fuzz v1 []byte entry", f)
		}
		out[f] = text
	}
	return out
}

// fuzzBytes reads the one []byte value of a go test fuzz v1 corpus file.
func fuzzBytes(b []byte) ([]byte, bool) {
	_, body, ok := strings.Cut(string(b), "\n")
	body = strings.TrimSpace(body)
	inner, found := strings.CutPrefix(body, "[]byte(")
	if !ok || !found || !strings.HasSuffix(inner, ")") {
		return nil, false
	}
	var s string
	if _, err := fmt.Sscanf(strings.TrimSuffix(inner, ")"), "%q", &s); err != nil {
		return nil, false
	}
	return []byte(s), true
}

// TestSchemaAgreesWithValidate: every config in the repository is judged
// the same by the schema and by the validator (Parse, what `config
// validate` checks without a model), except where the validator rejects by
// a rule the schema cannot state.
func TestSchemaAgreesWithValidate(t *testing.T) {
	sch := compiledSchema(t)
	corpus := configCorpus(t)
	names := make([]string, 0, len(corpus))
	for n := range corpus {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 40 {
		t.Fatalf("corpus has %d configs; the walk missed some", len(names))
	}
	count := map[verdict]int{}
	for _, name := range names {
		v, problems := judge(sch, name, corpus[name])
		count[v]++
		for _, p := range problems {
			t.Errorf("%s: %s", name, p)
		}
	}
	accepted, rejected, only := count[bothAccept], count[bothReject], count[validateOnlyReject]
	t.Logf("%d configs: %d accepted by both, %d rejected by both, %d rejected by validate-only rules", len(names), accepted, rejected, only)
}

type verdict int

const (
	bothAccept verdict = iota
	bothReject
	validateOnlyReject
	disagree
)

// judge has the validator (Parse, what `config validate` checks without a
// model) and the schema judge one config; problems are the ways they
// disagree beyond the validate-only rules.
func judge(sch *jsonschema.Schema, name string, text []byte) (verdict, []string) {
	_, verr := Parse(text, name)
	serr := schemaJudges(sch, text)
	switch {
	case verr == nil && serr == nil:
		return bothAccept, nil
	case verr != nil && serr != nil:
		return bothReject, nil
	case verr == nil:
		return disagree, []string{fmt.Sprintf("config validate accepts it, the schema rejects it: %v", serr)}
	}
	var list ErrorList
	if !errors.As(verr, &list) {
		return disagree, []string{verr.Error()}
	}
	var problems []string
	for _, d := range list {
		if validateOnlyRule(d.Msg) == "" {
			problems = append(problems, fmt.Sprintf("the schema accepts it, config validate rejects it by a rule the schema should state: %v", d))
		}
	}
	if problems != nil {
		return disagree, problems
	}
	return validateOnlyReject, nil
}

// FuzzSchemaAgreesWithValidate: on any input, the schema and the validator
// agree but for the validate-only rules.
func FuzzSchemaAgreesWithValidate(f *testing.F) {
	for _, s := range fuzzConfigSeeds {
		f.Add([]byte(s))
	}
	for _, name := range PresetNames() {
		b, _ := PresetYAML(name)
		f.Add(b)
	}
	sch := compiledSchema(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, problems := judge(sch, "fuzz.yaml", data); problems != nil {
			t.Fatalf("%q: %s", data, strings.Join(problems, "; "))
		}
	})
}

// keyTable is one kind of mapping: its key table, where its schema sits
// and a config that holds one (the mapping's lines replace %s at indent
// spaces), with the keys it needs besides the probed one.
type keyTable struct {
	name   string
	fs     fields
	schema []string // path in the schema JSON to the mapping's object
	host   string
	indent int
	base   func(probe string) [][2]string
}

func keyTables() []keyTable {
	none := func(string) [][2]string { return nil }
	fixed := func(kv ...[2]string) func(string) [][2]string { return func(string) [][2]string { return kv } }
	grouped := func(p string) [][2]string {
		if p == "group_size" {
			return [][2]string{{"granularity", "per_grouped_channel"}}
		}
		return nil
	}
	tables := []keyTable{
		{"config file", topFields, nil, "%s", 0, none},
		{"calibration", calibrationFields, []string{"$defs", "calibration"}, "calibration:\n  %s", 2, none},
		{"calibration.images", imageFields, []string{"$defs", "images"}, "calibration:\n  images:\n    %s", 4,
			func(p string) [][2]string {
				if p == "dir" || p == "glob" {
					return nil
				}
				return [][2]string{{"dir", "photos"}}
			}},
		{"quantization_config", treeFields, []string{"$defs", "quantizationConfig"}, "quantization_config:\n  %s", 2, none},
		{"kmeans_palettization_config", paletteTreeFields, []string{"$defs", "kmeansPalettizationConfig"}, "kmeans_palettization_config:\n  %s", 2, none},
		{"without", targetFields, []string{"$defs", "targets"}, "quantization_config:\n  without:\n    %s", 4, none},
		{"module_name_object_type_order_configs item", orderedFields, []string{"$defs", "orderedEntry"},
			"quantization_config:\n  module_name_object_type_order_configs:\n    - %s", 6,
			fixed([2]string{"object_type", "Conv"}, [2]string{"index", "0"}, [2]string{"config", "null"})},
		{"a module config", moduleFields, []string{"$defs", "moduleConfig"}, "quantization_config:\n  global_config:\n    %s", 4, none},
		{"an op config", opFields, []string{"$defs", "opConfig"},
			"quantization_config:\n  global_config:\n    op_type_config:\n      Conv:\n        %s", 8, none},
		{"a quantization spec", specFields, []string{"$defs", "quantizationSpec"}, "quantization_spec:\n  s:\n    %s", 4,
			func(p string) [][2]string {
				if p == "dtype" {
					return nil
				}
				return [][2]string{{"dtype", "int8"}}
			}},
		{"granularity", granularityFields, []string{"$defs", "granularity"}, "quantization_spec:\n  s:\n    granularity:\n      %s", 6,
			func(p string) [][2]string {
				if p == "block_size" {
					return [][2]string{{"type", "per_block"}}
				}
				return [][2]string{{"type", "per_channel"}}
			}},
		{"qparam_calculator", calculatorFields, []string{"$defs", "calculator"}, "quantization_spec:\n  s:\n    qparam_calculator:\n      %s", 6,
			func(p string) [][2]string {
				if p == "averaging_constant" {
					return [][2]string{{"type", "moving_average"}}
				}
				return [][2]string{{"type", "percentile"}}
			}},
		{"a palettization module config", paletteModuleFields, []string{"$defs", "paletteModuleConfig"},
			"kmeans_palettization_config:\n  global_config:\n    %s", 4, grouped},
		{"a palettization op config", paletteFields, []string{"$defs", "paletteOpConfig"},
			"kmeans_palettization_config:\n  global_config:\n    op_type_config:\n      Conv:\n        %s", 8, grouped},
		{algorithmsKey, algorithmTableFields(), []string{"$defs", "algorithms"}, "algorithms:\n  %s", 2, none},
	}
	for _, name := range AlgorithmNames() {
		tables = append(tables, keyTable{algorithmsKey + "." + name, algorithmFields(algorithmTable[name]),
			[]string{"$defs", "algorithms", "properties", name}, "algorithms:\n  " + name + ":\n    %s", 4, none})
	}
	return tables
}

// algorithmTableFields are the algorithms block's keys as a table.
func algorithmTableFields() fields {
	var fs fields
	for _, n := range AlgorithmNames() {
		fs = append(fs, field{name: n})
	}
	return fs
}

// with is the mapping's entries for probing key with value: the keys the
// host needs besides key, and key (none for "").
func (k keyTable) with(key, value string) [][2]string {
	var out [][2]string
	for _, e := range k.base(key) {
		if e[0] != key {
			out = append(out, e)
		}
	}
	if key != "" {
		out = append(out, [2]string{key, value})
	}
	return out
}

// render writes the host config with the mapping's entries.
func (k keyTable) render(entries [][2]string) string {
	var lines []string
	for _, e := range entries {
		lines = append(lines, e[0]+": "+e[1])
	}
	return fmt.Sprintf(k.host, strings.Join(lines, "\n"+strings.Repeat(" ", k.indent))) + "\n"
}

// schemaObject finds the object schema at path in the schema JSON (inside
// an anyOf when the mapping may also be null or a flag).
func schemaObject(t *testing.T, root map[string]any, path []string) map[string]any {
	t.Helper()
	node := root
	for _, p := range path {
		next, ok := node[p].(map[string]any)
		if !ok {
			t.Fatalf("schema has no %s", strings.Join(path, "/"))
		}
		node = next
	}
	if _, ok := node["properties"]; ok {
		return node
	}
	for _, alt := range append(anySlice(node["anyOf"]), anySlice(node["oneOf"])...) {
		if m, ok := alt.(map[string]any); ok {
			if _, ok := m["properties"]; ok {
				return m
			}
		}
	}
	t.Fatalf("schema at %s is not an object", strings.Join(path, "/"))
	return nil
}

func anySlice(v any) []any { s, _ := v.([]any); return s }

var unknownKeyMsg = regexp.MustCompile(`^unknown key "zz_unknown" in (.*) \(valid: (.*)\)$`)

// TestSchemaKeysAreTheDecoders: for every kind of mapping, the keys the
// schema lists are exactly those the decoder accepts. An unknown key is
// refused by both, and the decoder's list of valid keys is the schema's;
// every schema key reaches the decoder (a wrong value is an error at its
// line, never "unknown key" or an unread table key); every default the
// schema states is a value both accept.
func TestSchemaKeysAreTheDecoders(t *testing.T) {
	sch := compiledSchema(t)
	var root map[string]any
	if err := json.Unmarshal(JSONSchema(), &root); err != nil {
		t.Fatal(err)
	}
	for _, k := range keyTables() {
		t.Run(k.name, func(t *testing.T) {
			obj := schemaObject(t, root, k.schema)
			props := obj["properties"].(map[string]any)
			var schemaKeys []string
			for p := range props {
				schemaKeys = append(schemaKeys, p)
			}
			sort.Strings(schemaKeys)
			if got := k.fs.names(); !slices.Equal(sorted(got), schemaKeys) {
				t.Errorf("key table %v, schema %v", got, schemaKeys)
			}
			if ap, ok := obj["additionalProperties"].(bool); !ok || ap {
				t.Errorf("the schema lets other keys through (additionalProperties %v)", obj["additionalProperties"])
			}

			doc := k.render(k.with("", ""))
			if _, err := Parse([]byte(doc), "probe.yaml"); err != nil {
				t.Fatalf("host config rejected by the validator:\n%s%v", doc, err)
			}
			if err := schemaJudges(sch, []byte(doc)); err != nil {
				t.Fatalf("host config rejected by the schema:\n%s%v", doc, err)
			}

			doc = k.render(k.with("zz_unknown", "1"))
			_, err := Parse([]byte(doc), "probe.yaml")
			var list ErrorList
			if !errors.As(err, &list) || len(list) != 1 {
				t.Fatalf("unknown key: want one error, got %v", err)
			}
			m := unknownKeyMsg.FindStringSubmatch(list[0].Msg)
			if m == nil {
				t.Fatalf("unknown key: %v", list[0])
			}
			if valid := strings.Split(m[2], ", "); !slices.Equal(sorted(valid), schemaKeys) {
				t.Errorf("the decoder's valid keys %v, the schema's %v", valid, schemaKeys)
			}
			if schemaJudges(sch, []byte(doc)) == nil {
				t.Errorf("the schema accepts an unknown key:\n%s", doc)
			}

			for _, key := range schemaKeys {
				doc := k.render(k.with(key, "[[]]"))
				line := 1 + strings.Count(doc[:strings.Index(doc, key+": [[]]")], "\n")
				cfg, err := Parse([]byte(doc), "probe.yaml")
				prop := props[key].(map[string]any)
				if _, anyValue := prop["description"]; anyValue && len(prop) == 1 {
					// The schema takes any value (qat_schedule): the decoder
					// accepts it too and says it is ignored.
					if err != nil || len(cfg.Notices) == 0 || cfg.Notices[0].Line != line {
						t.Errorf("%s takes any value: want a notice at line %d, got %v", key, line, err)
					}
					continue
				}
				if !errors.As(err, &list) {
					t.Errorf("%s: [[]] accepted by the decoder", key)
					continue
				}
				atLine := false
				for _, d := range list {
					if strings.Contains(d.Msg, "unknown key") || strings.Contains(d.Msg, "internal error") {
						t.Errorf("%s: %v", key, d)
					}
					atLine = atLine || d.Line == line
				}
				if !atLine {
					t.Errorf("%s: no error at line %d: %v", key, line, err)
				}
				if schemaJudges(sch, []byte(doc)) == nil {
					t.Errorf("%s: [[]] accepted by the schema", key)
				}
			}

			for _, key := range schemaKeys {
				for _, p := range boundaryProbes(props[key].(map[string]any)) {
					doc := k.render(k.with(key, p.value))
					_, verr := Parse([]byte(doc), "probe.yaml")
					serr := schemaJudges(sch, []byte(doc))
					if (verr == nil) != p.ok || (serr == nil) != p.ok {
						t.Errorf("%s: %s: want accepted %v; decoder: %v; schema: %v", key, p.value, p.ok, verr, serr)
					}
				}
			}

			for _, key := range schemaKeys {
				def, ok := props[key].(map[string]any)["default"]
				if !ok {
					continue
				}
				v, _ := json.Marshal(def)
				doc := k.render(k.with(key, string(v)))
				if _, err := Parse([]byte(doc), "probe.yaml"); err != nil {
					t.Errorf("%s: the default %s is refused by the decoder: %v", key, v, err)
				}
				if err := schemaJudges(sch, []byte(doc)); err != nil {
					t.Errorf("%s: the default %s is refused by the schema: %v", key, v, err)
				}
			}
		})
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// TestSchemaEnumsAreAccepted: every value the schema enumerates (op types
// with their torch names, dtypes, qschemes, calculators, presets, targets)
// is one the decoder accepts, in the place the schema offers it.
func TestSchemaEnumsAreAccepted(t *testing.T) {
	sch := compiledSchema(t)
	var root map[string]any
	if err := json.Unmarshal(JSONSchema(), &root); err != nil {
		t.Fatal(err)
	}
	defs := root["$defs"].(map[string]any)
	// enumOf is the enum of a def, or of the one alternative with an enum.
	enumOf := func(node any) []string {
		for _, alt := range append([]any{node}, anySlice(node.(map[string]any)["anyOf"])...) {
			if e, ok := alt.(map[string]any)["enum"]; ok {
				var out []string
				for _, v := range e.([]any) {
					out = append(out, v.(string))
				}
				return out
			}
		}
		t.Fatalf("no enum in %v", node)
		return nil
	}
	cases := []struct {
		def  string
		doc  func(v string) string
		want int // at least this many values
	}{
		{"opType", func(v string) string {
			return fmt.Sprintf("quantization_config:\n  global_config:\n    op_type_config:\n      %q: null\n", v)
		}, 100},
		{"dataDType", func(v string) string { return fmt.Sprintf("quantization_spec:\n  s: {dtype: %q}\n", v) }, len(spec.DTypeSpellings(spec.DType.IsData))},
		{"scaleDType", func(v string) string {
			return fmt.Sprintf("quantization_spec:\n  s: {dtype: int8, scale_dtype: %q}\n", v)
		}, len(spec.DTypeSpellings(spec.DType.IsScale))},
		{"qscheme", func(v string) string { return fmt.Sprintf("quantization_spec:\n  s: {dtype: int8, qscheme: %q}\n", v) }, len(spec.QSchemes())},
		{"calculatorType", func(v string) string {
			return fmt.Sprintf("quantization_spec:\n  s: {dtype: int8, qparam_calculator: %q}\n", v)
		}, len(spec.CalculatorSpellings())},
		{"preset", func(v string) string { return fmt.Sprintf("quantization_config:\n  preset: %q\n", v) }, len(PresetNames())},
	}
	for _, c := range cases {
		values := enumOf(defs[c.def])
		if len(values) < c.want {
			t.Errorf("%s: %d values, want at least %d", c.def, len(values), c.want)
		}
		for _, v := range values {
			doc := c.doc(v)
			if _, err := Parse([]byte(doc), "enum.yaml"); err != nil {
				t.Errorf("%s %q: the schema offers it, the decoder refuses it: %v", c.def, v, err)
			}
			if err := schemaJudges(sch, []byte(doc)); err != nil {
				t.Errorf("%s %q: %v", c.def, v, err)
			}
		}
	}
	for _, name := range TargetNames() {
		if _, err := Parse([]byte("target: "+name+"\n"), "enum.yaml"); err != nil {
			t.Errorf("target %s: %v", name, err)
		}
	}
	// Near misses are refused by both.
	for _, doc := range []string{
		"quantization_config:\n  global_config:\n    op_type_config:\n      Konv: null\n",
		"quantization_spec:\n  s: {dtype: int7}\n",
		"quantization_spec:\n  s: {dtype: int8, scale_dtype: int8}\n",
		"quantization_spec:\n  s: {dtype: float32}\n",
		"quantization_spec:\n  s: {dtype: int8, qscheme: symetric}\n",
		"quantization_spec:\n  s: {dtype: int8, qscheme: QUANTIZATIONSCHEME.SYMMETRIC}\n",
		"quantization_spec:\n  s: {dtype: int8, qparam_calculator: Static}\n",
		"quantization_config:\n  preset: w3a8\n",
		"target: ort-x64\n",
	} {
		if _, err := Parse([]byte(doc), "enum.yaml"); err == nil {
			t.Errorf("the decoder accepts\n%s", doc)
		}
		if schemaJudges(sch, []byte(doc)) == nil {
			t.Errorf("the schema accepts\n%s", doc)
		}
	}
	// Spellings beyond the enumerations that both accept.
	for _, doc := range []string{
		"quantization_spec:\n  s: {dtype: int8, qscheme: QuantizationScheme.SYMMETRIC_WITH_CLIPPING}\n",
		"quantization_spec:\n  s: {dtype: int8, qscheme: Asymmetric}\n",
		"quantization_config:\n  global_config:\n    op_type_config:\n      torch.nn.functional.linear: null\n      aten.linear.default: null\n      com.microsoft.QGemm: null\n",
	} {
		if _, err := Parse([]byte(doc), "enum.yaml"); err != nil {
			t.Errorf("the decoder refuses\n%s%v", doc, err)
		}
		if err := schemaJudges(sch, []byte(doc)); err != nil {
			t.Errorf("the schema refuses\n%s%v", doc, err)
		}
	}
}

type probe struct {
	value string
	ok    bool
}

// boundaryProbes are values on and just past the numeric bounds the schema
// states for a key (directly or in one of its alternatives), and whether
// they are valid.
func boundaryProbes(prop map[string]any) []probe {
	var out []probe
	for _, s := range append([]any{prop}, anySlice(prop["anyOf"])...) {
		m, _ := s.(map[string]any)
		// f writes v moved by steps: whole numbers for integers, thousandths
		// for numbers (exact in int64 up to the largest bound, 1<<62).
		f := func(v float64, steps int64) string {
			if m["type"] == "integer" {
				return fmt.Sprint(int64(v) + steps)
			}
			return fmt.Sprint(v + float64(steps)/1000)
		}
		if lo, ok := m["minimum"].(float64); ok {
			out = append(out, probe{f(lo, 0), true}, probe{f(lo, -1), false})
		}
		if hi, ok := m["maximum"].(float64); ok {
			out = append(out, probe{f(hi, 0), true}, probe{f(hi, 1), false})
		}
		if lo, ok := m["exclusiveMinimum"].(float64); ok {
			out = append(out, probe{f(lo, 0), false}, probe{f(lo, 1), true})
		}
	}
	return out
}

// schemaModeline is the first line of every file in configs/: YAML language
// servers check and complete the file against the generated schema.
const schemaModeline = "# yaml-language-server: $schema=../coreaiq.schema.json"

// TestConfigsNameTheSchema: every config in configs/ starts with the
// modeline, whose path leads to the generated schema.
func TestConfigsNameTheSchema(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no configs/*/*.yaml")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		if first != schemaModeline {
			t.Errorf("%s: first line %q, want %q", f, first, schemaModeline)
			continue
		}
		target := filepath.Join(filepath.Dir(f), strings.TrimPrefix(first, "# yaml-language-server: $schema="))
		if _, err := os.Stat(target); err != nil {
			t.Errorf("%s: the modeline's schema: %v", f, err)
		}
	}
}

package config

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

//go:generate sh -c "cd ../.. && go run ./cmd/coreaiq config schema > configs/coreaiq.schema.json"

// SchemaDraft is the JSON Schema dialect JSONSchema writes.
const SchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// JSONSchema is the JSON Schema (draft 2020-12) of a config file, generated
// from the decoder's key tables and enumerations: editors complete and
// check configs with it. Rules it cannot state (regexes, cross-references,
// names that depend on the model) are left to `coreaiq config validate`.
func JSONSchema() []byte {
	root := object(topFields)
	root.Type = []string{"object", "null"} // an empty file is the default config
	root.Schema = SchemaDraft
	root.Title = "coreaiq config file"
	root.Description = "coreaiq's config: tool settings, quantization_config (coreai-opt's QuantizerConfig), " +
		"kmeans_palettization_config and algorithms. `coreaiq config validate FILE` checks what this schema cannot."
	root.Defs = schemaDefs()
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		panic("config: the schema does not marshal: " + err.Error()) // only plain values are in it
	}
	return append(b, '\n')
}

// schemaDefs are the $defs the key tables refer to.
func schemaDefs() map[string]*jsonSchema {
	images := object(imageFields)
	images.OneOf = []*jsonSchema{{Required: []string{"dir"}}, {Required: []string{"glob"}}}
	ordered := object(orderedFields)
	ordered.Required = []string{"object_type", "index", "config"}
	granularity := object(granularityFields)
	granularity.Required = []string{"type"}
	calculator := object(calculatorFields)
	calculator.Required = []string{"type"}
	zero := 0
	emptyList := listOf(nil)
	emptyList.MaxItems = &zero

	algorithms := typed("object")
	algorithms.Properties = map[string]*jsonSchema{}
	algorithms.AdditionalProperties = nothing()
	for _, name := range AlgorithmNames() {
		a := algorithmTable[name]
		algorithms.Properties[name] = &jsonSchema{Description: a.doc + " (true: defaults; false or null: off)",
			AnyOf: []*jsonSchema{null(), boolean(), object(algorithmFields(a))}}
	}

	// Spec map keys: "*", a tensor name of some op (ONNX schema or torch
	// argument name), input_<i>/output_<i>, and for inputs and outputs an
	// index: untyped, because a YAML language server checks 0 as a number
	// (a pattern passes any number) and JSON tools as the string "0".
	names := enum(append([]string{"*"}, knownTensorNames()...)...)
	slot := &jsonSchema{Type: "string", Pattern: `^(input|output)_[0-9]+$`}
	index := &jsonSchema{Pattern: `^[0-9]+$`}

	return map[string]*jsonSchema{
		"calibration":               object(calibrationFields),
		"images":                    images,
		"quantizationConfig":        object(treeFields),
		"kmeansPalettizationConfig": object(paletteTreeFields),
		"moduleConfig":              object(moduleFields),
		"opConfig":                  object(opFields),
		"paletteModuleConfig":       object(paletteModuleFields),
		"paletteOpConfig":           object(paletteFields),
		"orderedEntry":              ordered,
		"targets":                   anyOf(null(), emptyList, object(targetFields)),
		"algorithms":                algorithms,
		"quantizationSpec":          object(specFields),
		"activationSpec":            activationSpec(),
		"activationSpecs":           orEmpty(mapOf(anyOf(names, slot, index), orNull(ref("activationSpec")))),
		"stateSpecs":                orEmpty(mapOf(anyOf(names, slot), orNull(ref("quantizationSpec")))),
		"boundaryActivationSpecs":   orEmpty(mapOf(anyKey, orNull(ref("activationSpec")))),
		"boundaryStateSpecs":        orEmpty(mapOf(anyKey, orNull(ref("quantizationSpec")))),
		"granularity":               anyOf(enum(spec.GranularityTypes()...), granularity),
		"calculator":                anyOf(ref("calculatorType"), calculator),
		"calculatorType":            enum(spec.CalculatorSpellings()...),
		"qscheme":                   qschemeSchema(),
		"dataDType":                 enum(withTorchPrefix(spec.DTypeSpellings(spec.DType.IsData))...),
		"scaleDType":                enum(withTorchPrefix(spec.DTypeSpellings(spec.DType.IsScale))...),
		"preset":                    enum(append(PresetNames(), sortedKeys(presetAliases)...)...),
		"opType":                    opTypeSchema(),
	}
}

// activationSpec is a quantization spec for activations: per tensor, or
// per channel along an explicit axis (the default axes are the weights').
func activationSpec() *jsonSchema {
	perChannel := &jsonSchema{Properties: map[string]*jsonSchema{"type": enum(spec.PerChannel.String())}, Required: []string{"type"}}
	needsAxis := &jsonSchema{Properties: map[string]*jsonSchema{"axis": typed("integer")}, Required: []string{"axis"}}
	granularity := anyOf(
		enum(spec.PerTensor.String()),
		&jsonSchema{Type: "object",
			Properties: map[string]*jsonSchema{"type": enum(spec.PerTensor.String(), spec.PerChannel.String())},
			AnyOf:      []*jsonSchema{{Not: perChannel}, needsAxis}})
	return &jsonSchema{AllOf: []*jsonSchema{ref("quantizationSpec"),
		{Properties: map[string]*jsonSchema{"granularity": described(granularity, "activations are per_tensor, or per_channel with an explicit axis")}}}}
}

// qschemeSchema: the names in any case, with or without the guide's
// prefix; the enum lists the plain names for completion.
func qschemeSchema() *jsonSchema {
	var alts []string
	for _, n := range spec.QSchemeSpellings() {
		var b strings.Builder
		for _, r := range n {
			if u := strings.ToUpper(string(r)); u != string(r) {
				b.WriteString("[" + string(r) + u + "]")
			} else {
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		alts = append(alts, b.String())
	}
	pattern := &jsonSchema{Type: "string", Pattern: "^(" + regexp.QuoteMeta(spec.QSchemePrefix) + ")?(" + strings.Join(alts, "|") + ")$"}
	return anyOf(enum(spec.QSchemeSpellings()...), pattern)
}

// opTypeSchema: an op_type_config key or object_type is an ONNX op type or
// torch functional name (enumerated, for completion), or a dotted name
// (torch.add, aten.linear.default, or domain.OpType of a custom domain).
func opTypeSchema() *jsonSchema {
	keys := opTypeKeys()
	for _, k := range ops.TargetNames() {
		if !contains(keys, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return anyOf(enum(keys...), &jsonSchema{Type: "string", Pattern: `^.+\.[^.]+$`})
}

// nothing is the schema false: no value (no key besides the table's).
func nothing() *jsonSchema { f := false; return &jsonSchema{boolean: &f} }

// object is a mapping of exactly the table's keys, each described.
func object(fs fields) *jsonSchema {
	s := typed("object")
	s.Properties = map[string]*jsonSchema{}
	for _, f := range fs {
		v := *f.value
		if v.boolean != nil && *v.boolean {
			v.boolean = nil // {} is true too, and can carry the description
		}
		v.Description = f.doc
		if f.def != nil {
			v.Default, _ = json.Marshal(f.def)
		}
		s.Properties[f.name] = &v
	}
	s.AdditionalProperties = nothing()
	return s
}

func described(s *jsonSchema, doc string) *jsonSchema { s.Description = doc; return s }

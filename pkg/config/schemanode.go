package config

import (
	"encoding/json"
	"math"
)

// jsonSchema is one node of a JSON Schema (draft 2020-12): the value a
// config key holds, as the key tables (keys.go) state it and `coreaiq
// config schema` prints it. A node with a non-nil boolean is the schema
// true or false.
type jsonSchema struct {
	Schema               string                 `json:"$schema,omitempty"`
	ID                   string                 `json:"$id,omitempty"`
	Title                string                 `json:"title,omitempty"`
	Ref                  string                 `json:"$ref,omitempty"`
	Description          string                 `json:"description,omitempty"`
	Type                 any                    `json:"type,omitempty"` // a name or a list of names
	Enum                 []any                  `json:"enum,omitempty"`
	Default              json.RawMessage        `json:"default,omitempty"`
	Minimum              *float64               `json:"minimum,omitempty"`
	Maximum              *float64               `json:"maximum,omitempty"`
	ExclusiveMinimum     *float64               `json:"exclusiveMinimum,omitempty"`
	ExclusiveMaximum     *float64               `json:"exclusiveMaximum,omitempty"`
	Pattern              string                 `json:"pattern,omitempty"`
	MinItems             *int                   `json:"minItems,omitempty"`
	MaxItems             *int                   `json:"maxItems,omitempty"`
	Items                *jsonSchema            `json:"items,omitempty"`
	Properties           map[string]*jsonSchema `json:"properties,omitempty"`
	PropertyNames        *jsonSchema            `json:"propertyNames,omitempty"`
	AdditionalProperties *jsonSchema            `json:"additionalProperties,omitempty"`
	Required             []string               `json:"required,omitempty"`
	AnyOf                []*jsonSchema          `json:"anyOf,omitempty"`
	OneOf                []*jsonSchema          `json:"oneOf,omitempty"`
	AllOf                []*jsonSchema          `json:"allOf,omitempty"`
	Not                  *jsonSchema            `json:"not,omitempty"`
	Defs                 map[string]*jsonSchema `json:"$defs,omitempty"`
	boolean              *bool
}

// MarshalJSON writes a boolean schema as true or false.
func (s *jsonSchema) MarshalJSON() ([]byte, error) {
	if s.boolean != nil {
		return json.Marshal(*s.boolean)
	}
	type plain jsonSchema
	return json.Marshal((*plain)(s))
}

// The schema builders the key tables are written with.

// anything is the schema true: every value.
func anything() *jsonSchema { t := true; return &jsonSchema{boolean: &t} }

func ref(def string) *jsonSchema { return &jsonSchema{Ref: "#/$defs/" + def} }

func typed(t string) *jsonSchema { return &jsonSchema{Type: t} }

func str() *jsonSchema { return typed("string") }

func boolean() *jsonSchema { return typed("boolean") }

func null() *jsonSchema { return typed("null") }

// enum is a string out of names.
func enum(names ...string) *jsonSchema {
	s := str()
	for _, n := range names {
		s.Enum = append(s.Enum, n)
	}
	return s
}

// intIn is an integer in [lo, hi]; hi = math.MaxInt means no upper bound.
func intIn(lo, hi int) *jsonSchema {
	s := typed("integer")
	l := float64(lo)
	s.Minimum = &l
	if hi != math.MaxInt {
		h := float64(hi)
		s.Maximum = &h
	}
	return s
}

// numberIn is a number in (lo, hi]; hi = +Inf means no upper bound.
func numberIn(lo, hi float64) *jsonSchema {
	s := typed("number")
	s.ExclusiveMinimum = &lo
	if !math.IsInf(hi, 1) {
		s.Maximum = &hi
	}
	return s
}

func listOf(item *jsonSchema) *jsonSchema { s := typed("array"); s.Items = item; return s }

// anyOf is a value one of the alternatives takes.
func anyOf(alts ...*jsonSchema) *jsonSchema { return &jsonSchema{AnyOf: alts} }

// orNull also takes null.
func orNull(s *jsonSchema) *jsonSchema { return anyOf(s, null()) }

// mapOf is a mapping whose keys keys takes (anyKey: any key) and whose
// values are value.
func mapOf(keys, value *jsonSchema) *jsonSchema {
	s := typed("object")
	s.PropertyNames = keys
	s.AdditionalProperties = value
	return s
}

// anyKey leaves a mapping's keys free. Not {"type": "string"}: a YAML
// language server checks a key such as 0 as the number it is written as,
// and the decoder takes any scalar key where keys are names.
var anyKey *jsonSchema

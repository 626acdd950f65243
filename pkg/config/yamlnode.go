package config

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits that keep hostile YAML (alias bombs, self-referencing anchors)
// from taking unbounded time.
const (
	maxVisits     = 200_000
	maxAliasDepth = 64
)

// entry is one key/value pair of a mapping after merges are applied.
type entry struct {
	key *yaml.Node // the scalar key, for positions and the key text
	val *yaml.Node // the value, aliases not yet followed
}

// parseYAML reads one YAML document. An empty file gives a nil root.
func parseYAML(data []byte, file string) (*yaml.Node, *Diagnostic) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Diagnostic{File: file, Line: max(extra.Line, 1), Col: max(extra.Column, 1),
			Msg: "a config file holds one YAML document; found a second one"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(file, err)
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

var yamlLineRe = regexp.MustCompile(`line (\d+)(?:, column (\d+))?`)

// yamlError turns a yaml.v3 syntax error into a positioned diagnostic
// (line 1 when the parser names none).
func yamlError(file string, err error) *Diagnostic {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, col := 1, 1
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		if m[2] != "" {
			col, _ = strconv.Atoi(m[2])
		}
		msg = strings.TrimSpace(strings.Replace(msg, m[0]+":", "", 1))
	}
	return &Diagnostic{File: file, Line: max(line, 1), Col: max(col, 1), Msg: "invalid YAML: " + msg}
}

// deref follows aliases. It returns nil for an alias chain that is too deep.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i >= maxAliasDepth {
			return nil
		}
		n = n.Alias
	}
	return n
}

// isNull reports a YAML null: `key:`, `key: null`, `key: ~`.
func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// isNullOrEmpty reports null or an empty mapping or list: the guide's
// "None disables" and "empty also signifies null".
func isNullOrEmpty(n *yaml.Node) bool {
	n = deref(n)
	if isNull(n) {
		return true
	}
	return (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && len(n.Content) == 0
}

func keyID(k *yaml.Node) string {
	if k.ShortTag() == "!!int" {
		return "i:" + k.Value
	}
	return "s:" + k.Value
}

// mapping lists the entries of mapping node n (aliases followed), applying
// `<<` merges: keys written in n win over merged ones, and earlier merge
// sources win over later ones, as in YAML 1.1. Duplicate keys and non-scalar
// keys are errors.
func (d *decoder) mapping(n *yaml.Node) []entry {
	return d.mappingDepth(deref(n), 0)
}

func (d *decoder) mappingDepth(n *yaml.Node, depth int) []entry {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	if depth > maxAliasDepth {
		d.errorf(n, "", "merge keys nest too deeply (a mapping merges itself?)")
		return nil
	}
	explicit := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !isMergeKey(k) && k.Kind == yaml.ScalarNode {
			explicit[keyID(k)] = true
		}
	}
	var out []entry
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.visit(k) {
			return out
		}
		if isMergeKey(k) {
			var sources []*yaml.Node
			switch src := deref(v); {
			case src != nil && src.Kind == yaml.MappingNode:
				sources = []*yaml.Node{src}
			case src != nil && src.Kind == yaml.SequenceNode:
				for _, s := range src.Content {
					sources = append(sources, deref(s))
				}
			}
			for _, src := range sources {
				if src == nil || src.Kind != yaml.MappingNode {
					d.errorf(v, "", "a << merge takes a mapping or a list of mappings")
					break
				}
				for _, e := range d.mappingDepth(src, depth+1) {
					id := keyID(e.key)
					if explicit[id] || seen[id] {
						continue
					}
					seen[id] = true
					out = append(out, e)
				}
			}
			if len(sources) == 0 {
				d.errorf(v, "", "a << merge takes a mapping or a list of mappings")
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "", "mapping keys must be plain values, not %s", kindName(k))
			continue
		}
		id := keyID(k)
		if seen[id] {
			d.errorf(k, "", "duplicate key %q", k.Value)
			continue
		}
		seen[id] = true
		out = append(out, entry{key: k, val: v})
	}
	return out
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge"
}

// visit counts work so that alias expansion stays bounded.
func (d *decoder) visit(n *yaml.Node) bool {
	d.visits++
	if d.visits == maxVisits {
		d.errorf(n, "", "config too large: more than %d entries once anchors are expanded", maxVisits)
	}
	return d.visits < maxVisits
}

func kindName(n *yaml.Node) string {
	n = deref(n)
	if n == nil {
		return "a recursive alias"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!str":
			return "a string"
		}
		return "a " + strings.TrimPrefix(n.ShortTag(), "!!")
	}
	return "an unexpected node"
}

// str reads a string scalar; anything else is a type error at n.
func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	v := deref(n)
	if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		d.errorf(n, "", "%s: want a string, got %s", what, kindName(n))
		return "", false
	}
	return v.Value, true
}

// integer reads an integer scalar.
func (d *decoder) integer(n *yaml.Node, what string) (int, bool) {
	v := deref(n)
	var i int
	if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&i) != nil {
		d.errorf(n, "", "%s: want an integer, got %s", what, kindName(n))
		return 0, false
	}
	return i, true
}

// number reads an integer or float scalar.
func (d *decoder) number(n *yaml.Node, what string) (float64, bool) {
	v := deref(n)
	var f float64
	if v == nil || v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&f) != nil {
		d.errorf(n, "", "%s: want a number, got %s", what, kindName(n))
		return 0, false
	}
	return f, true
}

// joinPath extends a YAML path with a key, quoting keys that are not plain
// identifiers: quantization_config.module_name_configs["layer1.0"].
func joinPath(parent, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return parent + "[" + strconv.Quote(key) + "]"
	case parent == "":
		return key
	}
	return parent + "." + key
}

package config

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed presets/*.yaml
var presetFS embed.FS

// DefaultPreset is the preset an empty config means.
const DefaultPreset = "w8a8"

// PresetInfo describes one embedded preset.
type PresetInfo struct {
	Name string `json:"name" yaml:"name"`
	// Description is the first comment line of the preset file.
	Description string `json:"description" yaml:"description"`
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	entries, _ := fs.ReadDir(presetFS, "presets")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Presets lists the presets with their descriptions.
func Presets() []PresetInfo {
	var out []PresetInfo
	for _, name := range PresetNames() {
		b, _ := PresetYAML(name)
		first, _, _ := strings.Cut(string(b), "\n")
		out = append(out, PresetInfo{Name: name, Description: strings.TrimSpace(strings.TrimPrefix(first, "#"))})
	}
	return out
}

// PresetYAML returns the text of a preset: a config file holding
// quantization_spec and quantization_config.
func PresetYAML(name string) ([]byte, error) {
	name = presetAlias(name)
	if strings.ContainsAny(name, "/\\.") {
		return nil, fmt.Errorf("unknown preset %q", name)
	}
	b, err := presetFS.ReadFile("presets/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("unknown preset %q (presets: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return b, nil
}

// PresetConfig returns a preset as a whole config: its quantization
// config and its algorithms block.
func PresetConfig(name string) (*Config, error) {
	b, err := PresetYAML(name)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(b, "preset:"+name)
	if err != nil {
		return nil, fmt.Errorf("preset %s: %w", name, err)
	}
	return cfg, nil
}

// presetAliases are the guide's preset names for the embedded presets.
var presetAliases = map[string]string{
	"W_INT8_A_INT8": "w8a8",
	"W_MXFP4_A_FP8": "mxfp4",
}

// presetAlias maps a guide preset name (W_INT8_A_INT8) onto the embedded
// preset; other names are returned unchanged.
func presetAlias(name string) string {
	if p, ok := presetAliases[name]; ok {
		return p
	}
	return name
}

// Preset returns the quantization config of a preset. Its rules name the
// file "preset:NAME" with the preset's own line numbers.
func Preset(name string) (*QuantizerConfig, error) {
	b, err := PresetYAML(name)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(b, "preset:"+presetAlias(name))
	if err != nil {
		return nil, fmt.Errorf("preset %s: %w", name, err)
	}
	return cfg.Quant, nil
}

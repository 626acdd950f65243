package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// paletteOf describes what a palettization config decides for the weight
// of one node of the guide model (TorchScript names): the settings and
// the rule's line, or the reason it stays float.
func paletteOf(t *testing.T, text, node string) string {
	t.Helper()
	cfg := mustParse(t, "p.yaml", text)
	if cfg.Palette == nil {
		t.Fatal("no kmeans_palettization_config")
	}
	res, err := ResolvePalettization(cfg.Palette, guideModel(t, false).Graph)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Weights {
		if w.Node.Name != node {
			continue
		}
		if w.Palette == nil {
			return "float: " + w.Reason
		}
		return fmt.Sprintf("%s axis=%d @%d", w.Palette, w.Axis, w.Rule.Line)
	}
	t.Fatalf("node %q has no palettizable weight", node)
	return ""
}

// TestPaletteResolution: kmeans_palettization_config follows the
// quantization config's precedence and null semantics, with Core ML
// Tools' field names and defaults.
func TestPaletteResolution(t *testing.T) {
	const head = "kmeans_palettization_config:\n"
	tests := []struct{ name, text, node, want string }{
		{"empty key is the default config", "kmeans_palettization_config:\n", "/fc/Gemm",
			"float: 64 elements, not above weight_threshold 2048"},
		{"global", head + "  global_config: {n_bits: 2, weight_threshold: 0}\n", "/conv1/Conv",
			"2-bit LUT per_tensor channel_axis=0 axis=0 @2"},
		{"module name beats global", head + "  global_config: {n_bits: 2, weight_threshold: 0}\n  module_name_configs:\n    fc: {n_bits: 6, weight_threshold: 0}\n",
			"/fc/Gemm", "6-bit LUT per_tensor channel_axis=0 axis=0 @4"},
		{"module null disables", head + "  global_config: {weight_threshold: 0}\n  module_name_configs:\n    fc: null\n",
			"/fc/Gemm", "float: palettization config is null here"},
		{"global null, module re-enables", head + "  global_config: null\n  module_name_configs:\n    conv1: {weight_threshold: 0}\n",
			"/conv1/Conv", "4-bit LUT per_tensor channel_axis=0 axis=0 @4"},
		{"op type override", head + "  global_config:\n    weight_threshold: 0\n    op_type_config:\n      conv_transpose2d: {n_bits: 3, weight_threshold: 0}\n",
			"/decoder/deconv1/ConvTranspose", "3-bit LUT per_tensor channel_axis=0 axis=1 @5"},
		{"op name beats op type", head + "  global_config:\n    op_type_config:\n      Gemm: {n_bits: 3, weight_threshold: 0}\n    op_name_config:\n      /fc/.*: {n_bits: 5, weight_threshold: 0}\n",
			"/fc/Gemm", "5-bit LUT per_tensor channel_axis=0 axis=0 @6"},
		{"op null disables", head + "  global_config:\n    weight_threshold: 0\n    op_type_config:\n      MatMul: null\n",
			"linear_23", "float: palettization config is null here"},
		{"grouped input channels of a MatMul", head + "  global_config: {granularity: per_grouped_channel, group_size: 4, channel_axis: 1, weight_threshold: 0}\n",
			"linear_23", "4-bit LUT per_grouped_channel group_size=4 channel_axis=1 axis=0 @2"},
		{"embedding gather", head + "  global_config: {n_bits: 8, lut_dtype: int8, enable_per_channel_scale: true, weight_threshold: 0}\n",
			"/embed/Gather", "8-bit LUT per_tensor channel_axis=0 per_channel_scale lut_dtype=int8 axis=0 @2"},
		{"vectors", head + "  global_config: {cluster_dim: 2, weight_threshold: 0}\n", "/conv1/Conv",
			"4-bit LUT per_tensor channel_axis=0 cluster_dim=2 axis=0 @2"},
		{"vectors that do not divide the channels", head + "  global_config: {cluster_dim: 3, weight_threshold: 0}\n", "/conv1/Conv",
			"float: 8 channels along axis 0 are not a multiple of cluster_dim 3"},
		{"only_for", head + "  global_config: {weight_threshold: 0}\n  only_for: {module_names: [fc]}\n", "/conv1/Conv",
			"float: palettization config is null here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := paletteOf(t, tt.text, tt.node); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestPaletteOnlyQuantizesNothing: a file with only the palettization key
// quantizes no tensor; with both keys, quantization_config stands.
func TestPaletteOnlyQuantizesNothing(t *testing.T) {
	cfg := mustParse(t, "p.yaml", "kmeans_palettization_config:\n  global_config: {weight_threshold: 0}\n")
	res := mustResolve(t, cfg.Quant, false)
	for _, nr := range res.Nodes {
		if q := nr.Quantized(); len(q) > 0 {
			t.Errorf("%s quantizes %s", nr.Node, q[0].Value)
		}
	}
	cfg = mustParse(t, "p.yaml", "quantization_config: {preset: w8a8}\nkmeans_palettization_config:\n")
	if res := mustResolve(t, cfg.Quant, false); len(res.Node("/relu/Relu").Quantized()) == 0 {
		t.Error("quantization_config is lost next to kmeans_palettization_config")
	}
}

// TestPaletteBadConfigs: invalid fields and combinations are refused with
// file:line.
func TestPaletteBadConfigs(t *testing.T) {
	const head = "kmeans_palettization_config:\n  global_config:\n"
	tests := []struct{ name, text, want string }{
		{"n_bits 0", head + "    n_bits: 0\n", "p.yaml:3:13: n_bits must be 1 to 8, got 0"},
		{"n_bits 9", head + "    n_bits: 9\n", "p.yaml:3:13: n_bits must be 1 to 8, got 9"},
		{"unknown granularity", head + "    granularity: per_channel\n", `p.yaml:3:18: granularity "per_channel": want per_tensor or per_grouped_channel`},
		{"grouped without group_size", head + "    granularity: per_grouped_channel\n", "per_grouped_channel needs group_size"},
		{"group_size per tensor", head + "    group_size: 4\n", "group_size 4 applies to per_grouped_channel granularity, not per_tensor"},
		{"vector straddles groups", head + "    granularity: per_grouped_channel\n    group_size: 6\n    cluster_dim: 4\n", "group_size 6 is not a multiple of cluster_dim 4"},
		{"channel_axis 2", head + "    channel_axis: 2\n", "channel_axis must be 0 (output channels) or 1 (input channels), got 2"},
		{"lut dtype", head + "    lut_dtype: int4\n", `lut_dtype "int4": want float32 (or null), int8 or uint8`},
		{"per channel scale not a bool", head + "    enable_per_channel_scale: 1\n", "enable_per_channel_scale: want true or false"},
		{"unknown field", head + "    nbits: 4\n", `unknown key "nbits" in a palettization module config`},
		{"quantization key in a palettization config", head + "    op_input_spec: null\n", `unknown key "op_input_spec"`},
		{"presets are quantization configs", "kmeans_palettization_config:\n  preset: w4\n", `p.yaml:2:3: unknown key "preset" in kmeans_palettization_config`},
		{"op config field", head + "    op_type_config:\n      Conv: {n_bit: 2}\n", `p.yaml:4:14: unknown key "n_bit" in a palettization op config`},
		{"unknown op type", head + "    op_type_config:\n      Convv: {n_bits: 2}\n", `unknown op type "Convv"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.text), "p.yaml")
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("accepted (err %v)", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v\nwant it to contain %s", err, tt.want)
			}
		})
	}
}

// TestPaletteNoOpFields: a field that changes nothing in its combination
// is accepted with a notice saying why, and only there.
func TestPaletteNoOpFields(t *testing.T) {
	const head = "kmeans_palettization_config:\n  global_config:\n"
	tests := []struct{ name, text, want string }{
		{"channel_axis per tensor", head + "    channel_axis: 1\n", "p.yaml:3:5: kmeans_palettization_config.global_config: channel_axis 1 changes nothing here"},
		{"channel_axis with vectors", head + "    channel_axis: 1\n    cluster_dim: 2\n", ""},
		{"channel_axis grouped", head + "    channel_axis: 1\n    granularity: per_grouped_channel\n    group_size: 4\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.text), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range cfg.Notices {
				got = append(got, n.Error())
			}
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)) {
				t.Errorf("notices = %q, want %q", got, tt.want)
			}
		})
	}
}

package config

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Algorithms is the config's top-level algorithms block, beside
// quantization_config (which stays coreai-opt's schema): the
// post-training algorithms that change the weights before they are
// quantized. A nil field is an algorithm that does not run.
//
//	algorithms:
//	  cross_layer_equalization: true
//	  bias_correction: { samples: 64, exclude: ["/head/.*"] }
type Algorithms struct {
	// CrossLayerEqualization rescales the channels of Conv → Relu → Conv
	// chains so that both weights share their range (data-free).
	CrossLayerEqualization *CrossLayerEqualization
	// BiasCorrection folds the mean output error that weight quantization
	// causes, measured on calibration data, into each layer's bias.
	BiasCorrection *BiasCorrection
	// GPTQ rounds MatMul and Gemm weights column by column, spreading each
	// column's rounding error onto the columns not yet rounded, weighted by
	// the layer's input statistics on calibration data.
	GPTQ *GPTQ
	// AdaRound learns whether each Conv, ConvTranspose, Gemm and MatMul
	// weight rounds up or down, layer by layer, to minimise the layer's
	// output error on calibration data.
	AdaRound *AdaRound
	// SmoothQuant divides the features of the activations MatMul and Gemm
	// layers read by a per-feature scale folded into the weights.
	SmoothQuant *SmoothQuant
	// AWQ scales the input features of MatMul and Gemm weights by a
	// searched power of the activations' mean magnitude, folded into the
	// activation's producer.
	AWQ *AWQ
	// Rule locates the block.
	Rule Rule
}

// AlgorithmCommon holds what every algorithm accepts.
type AlgorithmCommon struct {
	// Exclude are op-name regexes (each matching a whole node name) of
	// nodes the algorithm leaves alone.
	Exclude []*regexp.Regexp
	// Rule locates the algorithm's key.
	Rule Rule
}

// Excludes reports whether node is excluded.
func (c *AlgorithmCommon) Excludes(node string) bool {
	for _, re := range c.Exclude {
		if re.MatchString(node) {
			return true
		}
	}
	return false
}

// CrossLayerEqualization configures cross_layer_equalization.
type CrossLayerEqualization struct {
	AlgorithmCommon
	// Iterations is the number of sweeps over each chain (default 20):
	// equalizing a pair changes the ranges its neighbours see.
	Iterations int
	// HighBiasAbsorption moves, after equalization, the part of each
	// channel's pre-activation that a folded BatchNorm puts above zero
	// (β − 3|γ|) out of the first Conv's bias into the second's.
	HighBiasAbsorption bool
	// Gated equalizes Conv → gated activation (SiLU, GELU, HardSwish) →
	// Conv pairs too, with a Mul by the channels' scales before the gate
	// (which does not commute with a scale), for the pairs whose
	// activation quantization noise, estimated from calibration data at
	// the second Convs, falls by at least GatedMinGain dB.
	Gated        bool
	GatedMinGain float64
	// Samples caps the calibration samples the gated pairs' activation
	// ranges are measured on.
	Samples int
}

// BiasCorrection configures bias_correction.
type BiasCorrection struct {
	AlgorithmCommon
	// Samples caps the calibration samples it reads (default 128).
	Samples int
}

// GPTQ configures gptq.
type GPTQ struct {
	AlgorithmCommon
	// Samples caps the calibration samples it reads (default 128).
	Samples int
	// Damp is added to the Hessian's diagonal as a fraction of its mean
	// diagonal (default 0.01): it keeps the Cholesky factorization stable
	// when input features are (nearly) collinear.
	Damp float64
	// ActOrder rounds each layer's input features in decreasing order of
	// their Hessian diagonal (their mean square on calibration data), so
	// the features that weigh most are rounded first, while the most
	// features remain to take their error (default true).
	ActOrder bool
}

// Default algorithm settings.
const (
	DefaultCLEIterations        = 20
	DefaultCLEGatedMinGain      = 6
	algorithmGatedKey           = "gated"
	algorithmGatedMinGainKey    = "gated_min_gain"
	DefaultAlgorithmSamples     = 128
	DefaultGPTQDamp             = 0.01
	algorithmDampKey            = "damp"
	algorithmActOrderKey        = "act_order"
	gptqName                    = "gptq"
	algorithmsKey               = "algorithms"
	algorithmExcludeKey         = "exclude"
	algorithmCLEIterationsKey   = "iterations"
	algorithmHighBiasKey        = "high_bias_absorption"
	algorithmSamplesKey         = "samples"
	crossLayerEqualizationName  = "cross_layer_equalization"
	biasCorrectionAlgorithmName = "bias_correction"
)

// algorithmDecoder decodes one algorithm's settings (a mapping, or true
// for the defaults) into a.
type algorithmDecoder struct {
	// doc describes the algorithm in one line.
	doc string
	// settings are its keys besides exclude.
	settings fields
	decode   func(d *decoder, a *Algorithms, common AlgorithmCommon, settings map[string]*yaml.Node)
}

// algorithmTable lists the algorithms the block accepts; an algorithm is
// added by one entry here and one field in Algorithms.
var algorithmTable = map[string]algorithmDecoder{
	crossLayerEqualizationName: {
		doc: "rescale the channels of Conv-Relu-Conv chains so both weights share their range (data-free)",
		settings: fields{
			{algorithmCLEIterationsKey, "sweeps over each chain", intIn(1, math.MaxInt), DefaultCLEIterations},
			{algorithmHighBiasKey, "move the part of a pre-activation a folded BatchNorm puts above zero (beta - 3|gamma|) into the next Conv's bias", boolean(), false},
			{algorithmGatedKey, "equalize through SiLU, GELU and HardSwish too, with a Mul by the scales before the gate (needs calibration data)", boolean(), true},
			{algorithmGatedMinGainKey, "the estimated activation noise reduction, in dB, a gated pair must reach to be equalized", numberIn(0, math.Inf(1)), DefaultCLEGatedMinGain},
			{algorithmSamplesKey, "calibration samples the gated pairs' activation ranges are measured on", intIn(1, math.MaxInt), DefaultAlgorithmSamples},
		},
		decode: func(d *decoder, a *Algorithms, c AlgorithmCommon, s map[string]*yaml.Node) {
			path := algorithmsKey + "." + crossLayerEqualizationName + "."
			a.CrossLayerEqualization = &CrossLayerEqualization{AlgorithmCommon: c,
				Iterations:         d.positive(s[algorithmCLEIterationsKey], path+algorithmCLEIterationsKey, DefaultCLEIterations),
				HighBiasAbsorption: d.flag(s[algorithmHighBiasKey], path+algorithmHighBiasKey, false),
				Gated:              d.flag(s[algorithmGatedKey], path+algorithmGatedKey, true),
				GatedMinGain:       d.positiveNumber(s[algorithmGatedMinGainKey], path+algorithmGatedMinGainKey, DefaultCLEGatedMinGain),
				Samples:            d.positive(s[algorithmSamplesKey], path+algorithmSamplesKey, DefaultAlgorithmSamples)}
		},
	},
	biasCorrectionAlgorithmName: {
		doc:      "fold the mean output error of weight quantization, measured on calibration data, into each bias",
		settings: fields{{algorithmSamplesKey, "calibration samples read", intIn(1, math.MaxInt), DefaultAlgorithmSamples}},
		decode: func(d *decoder, a *Algorithms, c AlgorithmCommon, s map[string]*yaml.Node) {
			a.BiasCorrection = &BiasCorrection{AlgorithmCommon: c,
				Samples: d.positive(s[algorithmSamplesKey], algorithmsKey+"."+biasCorrectionAlgorithmName+"."+algorithmSamplesKey, DefaultAlgorithmSamples)}
		},
	},
	gptqName: {
		doc: "round Conv, MatMul and Gemm weights input feature by input feature with calibration Hessians (GPTQ)",
		settings: fields{
			{algorithmSamplesKey, "calibration samples read", intIn(1, math.MaxInt), DefaultAlgorithmSamples},
			{algorithmDampKey, "Hessian diagonal damping, a fraction of its mean diagonal", numberIn(0, 1), DefaultGPTQDamp},
			{algorithmActOrderKey, "round the input features in decreasing order of their Hessian diagonal", boolean(), true},
		},
		decode: func(d *decoder, a *Algorithms, c AlgorithmCommon, s map[string]*yaml.Node) {
			path := algorithmsKey + "." + gptqName + "."
			a.GPTQ = &GPTQ{AlgorithmCommon: c,
				Samples:  d.positive(s[algorithmSamplesKey], path+algorithmSamplesKey, DefaultAlgorithmSamples),
				Damp:     d.fraction(s[algorithmDampKey], path+algorithmDampKey, DefaultGPTQDamp),
				ActOrder: d.flag(s[algorithmActOrderKey], path+algorithmActOrderKey, true)}
		},
	},
}

// AlgorithmNames lists the algorithms, sorted.
func AlgorithmNames() []string {
	names := make([]string, 0, len(algorithmTable))
	for n := range algorithmTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// positive reads an optional positive integer, def when absent.
func (d *decoder) positive(n *yaml.Node, what string, def int) int {
	if n == nil {
		return def
	}
	i, ok := d.integer(n, what)
	if !ok {
		return def
	}
	if i <= 0 {
		d.errorf(n, "", "%s must be positive, got %d", what, i)
		return def
	}
	return i
}

// flag reads an optional boolean, def when absent.
func (d *decoder) flag(n *yaml.Node, what string, def bool) bool {
	if n == nil {
		return def
	}
	var b bool
	v := deref(n)
	if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		d.errorf(n, "", "%s: want true or false, got %s", what, kindName(n))
	}
	return b
}

// fraction reads an optional number in (0, 1], def when absent.
func (d *decoder) fraction(n *yaml.Node, what string, def float64) float64 {
	if n == nil {
		return def
	}
	f, ok := d.number(n, what)
	if !ok {
		return def
	}
	if !(f > 0 && f <= 1) {
		d.errorf(n, "", "%s must be in (0, 1], got %g", what, f)
		return def
	}
	return f
}

// algorithms decodes the algorithms block. Each key is an algorithm;
// its value is true (defaults), false or null (off), or a mapping of its
// settings.
func (d *decoder) algorithms(key, n *yaml.Node) *Algorithms {
	a := &Algorithms{Rule: d.rule(key, algorithmsKey)}
	if isNull(n) || !d.wantMapping(n, algorithmsKey) {
		return a
	}
	names := AlgorithmNames()
	for _, e := range d.mapping(n) {
		name := e.key.Value
		alg, ok := algorithmTable[name]
		if !ok {
			d.unknownKey(e.key, algorithmsKey, names)
			continue
		}
		path := algorithmsKey + "." + name
		common := AlgorithmCommon{Rule: d.rule(e.key, path)}
		settings := map[string]*yaml.Node{}
		v := deref(e.val)
		switch {
		case isNull(e.val):
			continue
		case v != nil && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool":
			if v.Value == "false" || v.Value == "False" || v.Value == "FALSE" {
				continue
			}
		case v != nil && v.Kind == yaml.MappingNode:
			for _, s := range d.mapping(e.val) {
				if !d.known(s, path, algorithmFields(alg)) {
					continue
				}
				if k := s.key.Value; k == algorithmExcludeKey {
					common.Exclude = d.excludeList(s.val, path+"."+k)
				} else {
					settings[k] = s.val
				}
			}
		default:
			d.errorf(e.val, "", "%s: want true, false or a mapping of settings (%s), got %s", path,
				strings.Join(algorithmFields(alg).names(), ", "), kindName(e.val))
			continue
		}
		alg.decode(d, a, common, settings)
	}
	return a
}

// excludeList reads a list of op-name regexes.
func (d *decoder) excludeList(n *yaml.Node, what string) []*regexp.Regexp {
	v := deref(n)
	if v == nil || v.Kind != yaml.SequenceNode {
		d.errorf(n, "", "%s: want a list of op-name regexes, got %s", what, kindName(n))
		return nil
	}
	var out []*regexp.Regexp
	for _, item := range v.Content {
		s, ok := d.str(item, what+" item")
		if !ok {
			continue
		}
		re, err := compileAnchored(s)
		if err != nil {
			d.errorf(item, "", "%s: %q is not a valid regex: %v", what, s, err)
			continue
		}
		out = append(out, re)
	}
	return out
}

// EnableAlgorithms turns on the named algorithms with their defaults
// (the --algorithms flag); those the config already sets keep their
// settings. Unknown names are an error listing the valid ones.
func (a *Algorithms) EnableAlgorithms(names []string) error {
	for _, raw := range names {
		name := strings.TrimSpace(raw)
		if name == "" {
			continue
		}
		alg, ok := algorithmTable[name]
		if !ok {
			msg := fmt.Sprintf("unknown algorithm %q (algorithms: %s)", name, strings.Join(AlgorithmNames(), ", "))
			if h := didYouMean(name, AlgorithmNames()); h != "" {
				msg += fmt.Sprintf("; did you mean %q?", h)
			}
			return fmt.Errorf("%s", msg)
		}
		if a.enabled(name) {
			continue
		}
		d := &decoder{file: "--algorithms"}
		alg.decode(d, a, AlgorithmCommon{Rule: Rule{File: "--algorithms", Path: algorithmsKey + "." + name}}, nil)
	}
	return nil
}

// enabled reports whether the named algorithm is on.
func (a *Algorithms) enabled(name string) bool {
	switch name {
	case crossLayerEqualizationName:
		return a.CrossLayerEqualization != nil
	case biasCorrectionAlgorithmName:
		return a.BiasCorrection != nil
	case gptqName:
		return a.GPTQ != nil
	case adaroundName:
		return a.AdaRound != nil
	case smoothQuantName:
		return a.SmoothQuant != nil
	case awqName:
		return a.AWQ != nil
	}
	return false
}

// Any reports whether any algorithm is on.
func (a *Algorithms) Any() bool {
	if a == nil {
		return false
	}
	for _, n := range AlgorithmNames() {
		if a.enabled(n) {
			return true
		}
	}
	return false
}

package config

import (
	"math"

	"go.yaml.in/yaml/v3"
)

// SmoothQuant configures smoothquant: per-feature scaling of the
// activations read by MatMul and Gemm layers, moved into their weights.
type SmoothQuant struct {
	AlgorithmCommon
	// Samples caps the calibration samples it reads (default 128).
	Samples int
	// Alpha is the migration strength in (0, 1] (default 0.5): feature j
	// is divided by max|X_j|^α / max|W_j|^(1−α).
	Alpha float64
}

// Default smoothquant settings.
const (
	DefaultSmoothQuantAlpha = 0.5
	smoothQuantName         = "smoothquant"
)

func init() {
	algorithmTable[smoothQuantName] = algorithmDecoder{
		doc: "divide the features of LayerNorm and RMSNorm outputs read by MatMul and Gemm by a scale folded into their weights (SmoothQuant)",
		settings: fields{
			{algorithmSamplesKey, "calibration samples read", intIn(1, math.MaxInt), DefaultAlgorithmSamples},
			{"alpha", "migration strength: feature j is divided by max|X_j|^alpha / max|W_j|^(1-alpha)", numberIn(0, 1), DefaultSmoothQuantAlpha},
		},
		decode: func(d *decoder, a *Algorithms, c AlgorithmCommon, s map[string]*yaml.Node) {
			path := algorithmsKey + "." + smoothQuantName + "."
			a.SmoothQuant = &SmoothQuant{AlgorithmCommon: c,
				Samples: d.positive(s[algorithmSamplesKey], path+algorithmSamplesKey, DefaultAlgorithmSamples),
				Alpha:   d.fraction(s["alpha"], path+"alpha", DefaultSmoothQuantAlpha)}
		},
	}
}

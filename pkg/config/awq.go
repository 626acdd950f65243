package config

import (
	"math"

	"go.yaml.in/yaml/v3"
)

// AWQ configures awq: activation-aware per-input-channel scaling of the
// MatMul and Gemm weights that read one activation, searched to minimise
// their output error after weight quantization.
type AWQ struct {
	AlgorithmCommon
	// Samples caps the calibration samples it reads (default 128).
	Samples int
	// Grid is the number of exponents α = 0, 1/Grid, …, (Grid−1)/Grid
	// searched for s = mean|X|^α (default 20).
	Grid int
}

// Default awq settings.
const (
	DefaultAWQGrid = 20
	awqName        = "awq"
	awqGridKey     = "grid"
)

func init() {
	algorithmTable[awqName] = algorithmDecoder{
		doc: "scale the input features of MatMul and Gemm weights by mean|X|^alpha, alpha searched on calibration data, folded into the producer (AWQ)",
		settings: fields{
			{algorithmSamplesKey, "calibration samples read", intIn(1, math.MaxInt), DefaultAlgorithmSamples},
			{awqGridKey, "exponents searched: alpha = 0, 1/grid, ..., (grid-1)/grid", intIn(1, math.MaxInt), DefaultAWQGrid},
		},
		decode: func(d *decoder, a *Algorithms, c AlgorithmCommon, s map[string]*yaml.Node) {
			path := algorithmsKey + "." + awqName + "."
			a.AWQ = &AWQ{AlgorithmCommon: c,
				Samples: d.positive(s[algorithmSamplesKey], path+algorithmSamplesKey, DefaultAlgorithmSamples),
				Grid:    d.positive(s[awqGridKey], path+awqGridKey, DefaultAWQGrid)}
		},
	}
}

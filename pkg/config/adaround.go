package config

import (
	"math"

	"go.yaml.in/yaml/v3"
)

// AdaRound configures adaround: learned up/down rounding of Conv,
// ConvTranspose, Gemm and MatMul weights, layer by layer.
type AdaRound struct {
	AlgorithmCommon
	// Samples caps the calibration samples it reads (default 128).
	Samples int
	// Rows caps the rows (output positions × samples) a layer's
	// reconstruction is fitted on (default 2048): the positions are taken
	// at an even stride, so the work per layer does not grow with the
	// image size.
	Rows int
	// Iterations is the number of optimisation steps per layer (default 100).
	Iterations int
	// LearningRate is Adam's step size on the rounding variables
	// (default 0.05).
	LearningRate float64
	// Regularization weighs the term that pushes each rounding variable to
	// 0 or 1 against the reconstruction error (default 0.01).
	Regularization float64
	// Warmup is the fraction of the iterations run without the rounding
	// term (default 0.2).
	Warmup float64
	// BetaStart and BetaEnd are the rounding term's exponent at the end of
	// the warmup and at the last iteration (defaults 20 and 2): it is
	// annealed linearly, from a flat term that lets variables move to a
	// sharp one that pins them to 0 or 1. One given alone moves the other's
	// default so that BetaEnd ≤ BetaStart.
	BetaStart, BetaEnd float64
}

// Default adaround settings.
const (
	DefaultAdaRoundRows           = 2048
	DefaultAdaRoundIterations     = 100
	DefaultAdaRoundLearningRate   = 0.05
	DefaultAdaRoundRegularization = 0.01
	DefaultAdaRoundWarmup         = 0.2
	DefaultAdaRoundBetaStart      = 20
	DefaultAdaRoundBetaEnd        = 2
	adaroundName                  = "adaround"
)

func init() {
	// warmup is a fraction in [0, 1).
	zero, one := 0.0, 1.0
	warmup := typed("number")
	warmup.Minimum, warmup.ExclusiveMaximum = &zero, &one
	warmupFields := fields{{"warmup", "fraction of the iterations run without the rounding term", warmup, DefaultAdaRoundWarmup}}
	algorithmTable[adaroundName] = algorithmDecoder{
		doc: "learn whether each Conv, ConvTranspose, Gemm and MatMul weight rounds up or down, layer by layer, on the quantized model's inputs (AdaRound)",
		settings: append(fields{
			{algorithmSamplesKey, "calibration samples read", intIn(1, math.MaxInt), DefaultAlgorithmSamples},
			{"rows", "rows (output positions × samples) a layer is fitted on", intIn(1, math.MaxInt), DefaultAdaRoundRows},
			{"iterations", "optimisation steps per layer", intIn(1, math.MaxInt), DefaultAdaRoundIterations},
			{"learning_rate", "Adam's step size on the rounding variables", numberIn(0, math.Inf(1)), DefaultAdaRoundLearningRate},
			{"regularization", "weight of the term pushing each rounding variable to 0 or 1", numberIn(0, math.Inf(1)), DefaultAdaRoundRegularization},
		}, append(warmupFields, fields{
			{"beta_start", "exponent of the rounding term at the end of the warmup", numberIn(0, math.Inf(1)), float64(DefaultAdaRoundBetaStart)},
			{"beta_end", "exponent of the rounding term at the last iteration, at most beta_start", numberIn(0, math.Inf(1)), float64(DefaultAdaRoundBetaEnd)},
		}...)...),
		decode: func(d *decoder, a *Algorithms, c AlgorithmCommon, s map[string]*yaml.Node) {
			path := algorithmsKey + "." + adaroundName + "."
			r := &AdaRound{AlgorithmCommon: c,
				Samples:        d.positive(s[algorithmSamplesKey], path+algorithmSamplesKey, DefaultAlgorithmSamples),
				Rows:           d.positive(s["rows"], path+"rows", DefaultAdaRoundRows),
				Iterations:     d.positive(s["iterations"], path+"iterations", DefaultAdaRoundIterations),
				LearningRate:   d.positiveNumber(s["learning_rate"], path+"learning_rate", DefaultAdaRoundLearningRate),
				Regularization: d.positiveNumber(s["regularization"], path+"regularization", DefaultAdaRoundRegularization),
				Warmup:         DefaultAdaRoundWarmup,
				BetaStart:      d.positiveNumber(s["beta_start"], path+"beta_start", DefaultAdaRoundBetaStart),
				BetaEnd:        d.positiveNumber(s["beta_end"], path+"beta_end", DefaultAdaRoundBetaEnd),
			}
			if n := s["warmup"]; n != nil {
				if f, ok := d.number(n, path+"warmup"); ok {
					if f < 0 || f >= 1 {
						d.errorf(n, "", "%swarmup must be in [0, 1), got %g", path, f)
					} else {
						r.Warmup = f
					}
				}
			}
			// A bound given alone moves the other's default so that the
			// term still sharpens; both given must agree.
			switch start, end := s["beta_start"], s["beta_end"]; {
			case start != nil && end == nil:
				r.BetaEnd = min(r.BetaEnd, r.BetaStart)
			case start == nil && end != nil:
				r.BetaStart = max(r.BetaStart, r.BetaEnd)
			case r.BetaEnd > r.BetaStart:
				d.errorf(end, "", "%sbeta_end (%g) must not exceed beta_start (%g): the rounding term sharpens as it anneals", path, r.BetaEnd, r.BetaStart)
			}
			a.AdaRound = r
		},
	}
}

// positiveNumber reads an optional number > 0, def when absent.
func (d *decoder) positiveNumber(n *yaml.Node, what string, def float64) float64 {
	if n == nil {
		return def
	}
	f, ok := d.number(n, what)
	if !ok {
		return def
	}
	if !(f > 0) {
		d.errorf(n, "", "%s must be positive, got %g", what, f)
		return def
	}
	return f
}

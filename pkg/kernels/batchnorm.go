package kernels

import "math"

// BatchNormFold returns the per-channel factors of an inference
// BatchNormalization folded into what precedes it, y = x·s[c] + shift[c]:
//
//	s     = scale/√(var+ε)       in float64, rounded to float32 once
//	shift = (bias − mean)·s + B  in float32
//
// where bias is the bias of the Conv the normalisation follows (nil: none,
// or a normalisation on its own). The writer multiplies the Conv's weights
// by s and takes shift as the Conv's bias; the engine applies s and shift
// after a Conv or alone. One formula for both keeps a folded model and the
// engine's unfolded run on the same factors.
func BatchNormFold(scale, b, mean, variance, bias []float32, eps float32) (s, shift []float32) {
	c := len(scale)
	s, shift = make([]float32, c), make([]float32, c)
	for j := range c {
		s[j] = float32(float64(scale[j]) / math.Sqrt(float64(variance[j])+float64(eps)))
		var bj float32
		if bias != nil {
			bj = bias[j]
		}
		shift[j] = (bj-mean[j])*s[j] + b[j]
	}
	return s, shift
}

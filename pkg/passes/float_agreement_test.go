package passes

import (
	"math"
	"testing"
)

// Tolerances for a float output computed by two engines whose only
// difference is the order of float summation: ONNX's backend node tests
// use the same pair (numpy's assert_allclose with rtol 1e-3, atol 1e-7).
// The relative part is taken of the output's largest magnitude, so a value
// near zero in a large output is held to the output's scale; the absolute
// floor keeps a saturated output (a Sigmoid map near 0 everywhere, whose
// largest magnitude is itself tiny) from demanding agreement finer than
// float32 rounding in the activation's tail gives.
const (
	floatOutputRtol = 1e-3
	floatOutputAtol = 1e-7
)

// floatOutputsAgree reports whether got matches ref element by element within
// floatOutputAtol + floatOutputRtol·max|ref|. When it does not, it returns the
// first offending index and the tolerance. NaN matches only NaN.
func floatOutputsAgree(ref, got []float32) (int, float64, bool) {
	absMax := 0.0
	for _, v := range ref {
		if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
			absMax = max(absMax, math.Abs(float64(v)))
		}
	}
	tol := floatOutputAtol + floatOutputRtol*absMax
	for i := range ref {
		r, g := float64(ref[i]), float64(got[i])
		switch {
		case math.IsNaN(r) || math.IsNaN(g):
			if math.IsNaN(r) != math.IsNaN(g) {
				return i, tol, false
			}
		case math.IsInf(r, 0) || math.IsInf(g, 0):
			if r != g {
				return i, tol, false
			}
		case math.Abs(r-g) > tol:
			return i, tol, false
		}
	}
	return -1, tol, true
}

func sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// TestFloatOutputsAgree pins the float-output comparison of the ONNX Runtime
// oracle, in particular on a saturated Sigmoid: a probability map whose every
// value is near 1e-5 (ppocrv3-det's output under a weight-only preset), where
// the logits of the two engines differ only by float32 summation order.
func TestFloatOutputsAgree(t *testing.T) {
	// Logits around -11.5 (Sigmoid ≈ 1e-5); the second engine's logits differ
	// by a few float32 ulps of the accumulated sum, as reassociating a
	// 1000-term dot product does.
	saturated := func(perturb float64) ([]float32, []float32) {
		var ref, got []float32
		for i := 0; i < 256; i++ {
			x := float32(-11.5 + 0.01*float64(i%17))
			ref = append(ref, sigmoid32(x))
			got = append(got, sigmoid32(x*float32(1+perturb*float64(i%5-2))))
		}
		return ref, got
	}
	refOK, gotOK := saturated(4e-7)
	refBad, gotBad := saturated(2e-2)
	cases := []struct {
		name     string
		ref, got []float32
		want     bool
	}{
		{"identical", []float32{1, 2, 3}, []float32{1, 2, 3}, true},
		{"saturated sigmoid, reassociated logits", refOK, gotOK, true},
		{"saturated sigmoid, 2% logit error", refBad, gotBad, false},
		{"relative to the largest magnitude", []float32{1000, 0}, []float32{1000.5, 0.9}, true},
		{"beyond the relative bound", []float32{1000, 0}, []float32{1000, 1.2}, false},
		{"tiny output, within the floor", []float32{1e-9, 2e-9}, []float32{9e-8, 2e-9}, true},
		{"tiny output, beyond the floor", []float32{1e-9, 2e-9}, []float32{3e-7, 2e-9}, false},
		{"NaN on both sides", []float32{float32(math.NaN()), 1}, []float32{float32(math.NaN()), 1}, true},
		{"NaN on one side", []float32{float32(math.NaN()), 1}, []float32{0, 1}, false},
		{"same infinity", []float32{float32(math.Inf(1)), 1}, []float32{float32(math.Inf(1)), 1}, true},
		{"infinity against a finite value", []float32{float32(math.Inf(1)), 1}, []float32{3e38, 1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			i, tol, ok := floatOutputsAgree(c.ref, c.got)
			if ok != c.want {
				t.Errorf("floatOutputsAgree = %v (element %d, tolerance %.3g), want %v", ok, i, tol, c.want)
			}
		})
	}
}

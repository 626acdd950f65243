package calibrate

import (
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

func int4Spec(q spec.QScheme) *spec.QuantizationSpec {
	return &spec.QuantizationSpec{DType: spec.Int4, QScheme: q, ScaleDType: spec.Float32}
}

// worstRoundTrip quantizes g with the qparams of [lo, hi] and returns the
// largest absolute error.
func worstRoundTrip(t *testing.T, g []float32, lo, hi float32, s *spec.QuantizationSpec) float64 {
	t.Helper()
	sc, zp, err := s.QParams([]float32{lo}, []float32{hi})
	if err != nil {
		t.Fatal(err)
	}
	qmin, qmax, _ := s.QuantRange()
	worst := 0.0
	for _, x := range g {
		q := quant.Dequantize(quant.Int(x, sc[0], int64(zp[0]), qmin, qmax), int64(zp[0]), sc[0])
		worst = max(worst, math.Abs(float64(x-q)))
	}
	return worst
}

// TestWeightMSERangeFitsGridEnds: the symmetric int4 formula (absmax/7.5) maps a
// positive extreme to 7.5 steps, clamped to 7; the search must find the
// scale that represents a block's extreme exactly when that is best, which
// for a block of one weight means no error at all.
func TestWeightMSERangeFitsGridEnds(t *testing.T) {
	cases := []struct {
		name string
		g    []float32
		q    spec.QScheme
		tol  float64 // largest round-trip error allowed
	}{
		{"one positive weight", []float32{0.3}, spec.Symmetric, 1e-7},
		{"one negative weight", []float32{-0.3}, spec.Symmetric, 1e-7},
		{"grid multiples", []float32{0.7, -0.8, 0.1, 0.3}, spec.Symmetric, 1e-6},
		{"restricted range", []float32{0.7, -0.7, 0.2}, spec.SymmetricWithClipping, 1e-6},
		{"asymmetric one weight", []float32{0.3}, spec.Asymmetric, 1e-7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := int4Spec(c.q)
			lo, hi := c.g[0], c.g[0]
			for _, x := range c.g {
				lo, hi = min(lo, x), max(hi, x)
			}
			l, h := WeightMSERange(c.g, lo, hi, s)
			if e := worstRoundTrip(t, c.g, l, h, s); e > c.tol {
				t.Errorf("range [%g, %g]: round-trip error %g, want ≤ %g", l, h, e, c.tol)
			}
		})
	}
	// The formula's own range loses 1/15 of a lone positive weight: the
	// case the search exists for.
	if e := worstRoundTrip(t, []float32{0.3}, 0.3, 0.3, int4Spec(spec.Symmetric)); e < 0.019 {
		t.Errorf("formula range: error %g, expected the clamped 7/7.5 of the value", e)
	}
}

// TestWeightMSERangeNeverWorse: the chosen range's squared error is at most the
// formula range's, on random blocks.
func TestWeightMSERangeNeverWorse(t *testing.T) {
	seed := uint64(7)
	next := func() float32 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return float32(int64(seed>>33)%2001-1000) / 1000
	}
	for _, q := range []spec.QScheme{spec.Symmetric, spec.SymmetricWithClipping, spec.Asymmetric} {
		s := int4Spec(q)
		for b := range 50 {
			g := make([]float32, 1+b%32)
			lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
			for i := range g {
				g[i] = next() * next() * 3
				lo, hi = min(lo, g[i]), max(hi, g[i])
			}
			sc0, zp0, _ := s.QParams([]float32{lo}, []float32{hi})
			l, h := WeightMSERange(g, lo, hi, s)
			sc, zp, _ := s.QParams([]float32{l}, []float32{h})
			if e, e0 := roundTripError(g, sc[0], zp[0], s), roundTripError(g, sc0[0], zp0[0], s); e > e0 {
				t.Errorf("%s block %d: searched error %g > formula error %g", q, b, e, e0)
			}
		}
	}
}

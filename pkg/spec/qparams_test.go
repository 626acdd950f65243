package spec

import (
	"math/rand/v2"
	"testing"
)

// TestQParamsManyRangesMatchQParam: QParams over more ranges than it
// computes on one core (the blocks of a large 4-bit weight) gives, range
// by range, what QParam gives for each.
func TestQParamsManyRangesMatchQParam(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	n := 200_003
	mins, maxs := make([]float32, n), make([]float32, n)
	for i := range mins {
		a, b := float32(r.NormFloat64()), float32(r.NormFloat64())
		mins[i], maxs[i] = min(a, b), max(a, b)
	}
	for _, s := range []*QuantizationSpec{
		{DType: Int4, QScheme: Symmetric, ScaleDType: Float32},
		{DType: UInt8, QScheme: Asymmetric, ScaleDType: Float32},
	} {
		scales, zps, err := s.QParams(mins, maxs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range mins {
			sc, zp := s.QParam(mins[i], maxs[i])
			if scales[i] != sc || zps[i] != zp {
				t.Fatalf("%s: range %d: QParams gives %g, %d; QParam %g, %d", s.DType, i, scales[i], zps[i], sc, zp)
			}
		}
	}
	mins[n-1] = maxs[n-1] + 1
	if _, _, err := (&QuantizationSpec{DType: Int8, QScheme: Symmetric, ScaleDType: Float32}).QParams(mins, maxs); err == nil {
		t.Error("a range with min > max at the end was not refused")
	}
}

package ops

import (
	"math"
	"testing"
)

// TestTailFloor checks the floor of SiLU's tail and of a GELU's: at and below
// it (down to 60 below) the output stays within the tolerance of 0, and a
// little above it the output is beyond the tolerance, for tolerances from
// a fine 16-bit grid's to a coarse 8-bit one's.
func TestTailFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail *Tail
	}{{"silu", siluTail}, {"gelu", &Tail{F: func(x float64) float64 { return x * 0.5 * (1 + math.Erf(x/math.Sqrt2)) }, Turn: -0.7518}}} {
		for _, tol := range []float64{1e-5, 1e-3, 0.01, 0.05} {
			floor, ok := tc.tail.Floor(tol)
			if !ok || floor >= tc.tail.Turn {
				t.Fatalf("%s, tolerance %g: floor %g, %v; want one below %g", tc.name, tol, floor, ok, tc.tail.Turn)
			}
			for x := floor; x > floor-60; x -= 0.01 {
				if math.Abs(tc.tail.F(x)) > tol {
					t.Fatalf("%s, tolerance %g: |f(%g)| = %g above it, below the floor %g", tc.name, tol, x, math.Abs(tc.tail.F(x)), floor)
				}
			}
			if above := floor + 0.05*math.Abs(floor); math.Abs(tc.tail.F(above)) <= tol {
				t.Errorf("%s, tolerance %g: f(%g) = %g is still within it: the floor %g is too low", tc.name, tol, above, tc.tail.F(above), floor)
			}
		}
		if _, ok := tc.tail.Floor(1); ok {
			t.Errorf("%s: a tolerance wider than the minimum has no floor", tc.name)
		}
	}
}

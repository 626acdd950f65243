package plan

import (
	"math"
	"testing"
)

// TestRescaleThen checks that a rescale followed by another along the
// same axis maps a value as the two applied one after the other
// (x/S1 − C1, then /S2 − C2), with and without shifts, and that two along
// different axes do not compose.
func TestRescaleThen(t *testing.T) {
	x := []float32{3, -1.5, 0.25}
	apply := func(r *Rescale, v []float32) []float32 {
		out := make([]float32, len(v))
		for c := range v {
			out[c] = v[c] / r.Scale[c]
			if r.Shift != nil {
				out[c] -= r.Shift[c]
			}
		}
		return out
	}
	cases := []struct {
		name         string
		first        *Rescale
		scale, shift []float32
	}{
		{"from nothing", nil, []float32{2, 4, 0.5}, []float32{1, 0, -2}},
		{"scales only", &Rescale{Axis: 1, Scale: []float32{2, 3, 5}}, []float32{0.5, 2, 4}, nil},
		{"shift then scale", &Rescale{Axis: 1, Scale: []float32{2, 3, 5}, Shift: []float32{0.5, -1, 2}}, []float32{4, 0.25, 2}, nil},
		{"both shifted", &Rescale{Axis: 1, Scale: []float32{2, 3, 5}, Shift: []float32{0.5, -1, 2}}, []float32{4, 0.25, 2}, []float32{1, 1, -3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.first.Then(1, c.scale, c.shift)
			if got == nil {
				t.Fatal("no composed rescale")
			}
			want := x
			if c.first != nil {
				want = apply(c.first, want)
			}
			want = apply(&Rescale{Scale: c.scale, Shift: c.shift}, want)
			have := apply(got, x)
			for i := range want {
				if math.Abs(float64(have[i]-want[i])) > 1e-6*max(1, math.Abs(float64(want[i]))) {
					t.Errorf("channel %d: composed gives %g, the two in turn %g", i, have[i], want[i])
				}
			}
		})
	}
	if r := (&Rescale{Axis: 1, Scale: []float32{1, 1, 1}}).Then(-1, []float32{2, 2, 2}, nil); r != nil {
		t.Errorf("rescales along axes 1 and -1 composed into %+v", r)
	}
}

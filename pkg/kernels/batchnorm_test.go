package kernels

import (
	"slices"
	"testing"
)

func TestBatchNormFold(t *testing.T) {
	scale, b, mean, variance := []float32{2, 1, 3}, []float32{1, -1, 0.5}, []float32{0.5, 0, -2}, []float32{3, 15, 0}
	for _, c := range []struct {
		name      string
		bias      []float32
		wantS     []float32
		wantShift []float32
	}{
		// s = scale/√(var+1): 2/2, 1/4, 3/1.
		{"alone", nil, []float32{1, 0.25, 3}, []float32{0.5, -1, 6.5}},
		{"after a Conv's bias", []float32{1.5, 4, -1}, []float32{1, 0.25, 3}, []float32{2, 0, 3.5}},
	} {
		s, shift := BatchNormFold(scale, b, mean, variance, c.bias, 1)
		if !slices.Equal(s, c.wantS) || !slices.Equal(shift, c.wantShift) {
			t.Errorf("%s: s %v shift %v, want %v %v", c.name, s, shift, c.wantS, c.wantShift)
		}
	}
}

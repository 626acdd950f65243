package calibrate

import (
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func TestEmptyPastShape(t *testing.T) {
	cases := []struct {
		name  string
		shape []int64
		want  []int
	}{
		{"past_key_values.0.key", []int64{-1, 4, -1, 8}, []int{4, 0, 8}},
		{"past_key_values.3.decoder.value", []int64{1, 12, -1, 64}, []int{12, 0, 64}},
		{"past_0", []int64{-1, 2, 4, -1, 16}, []int{2, 4, 0, 16}},
		{"past.1.key", []int64{-1, 4, -1, 8}, []int{4, 0, 8}},
		{"past_key_values.0.key", []int64{-1, 4, 16, 8}, nil},  // no dynamic past length
		{"past_key_values.0.key", []int64{-1, -1, -1, 8}, nil}, // two: which is the past?
		{"attention_mask", []int64{-1, -1}, nil},               // not a past by name
		{"past_key_values.0.key", nil, nil},                    // rank unknown
	}
	for _, c := range cases {
		got := emptyPastShape(runtime.IOInfo{Name: c.name, DType: tensor.Float, Shape: c.shape})
		if !slices.Equal(got, c.want) {
			t.Errorf("emptyPastShape(%s %v) = %v, want %v", c.name, c.shape, got, c.want)
		}
	}
}

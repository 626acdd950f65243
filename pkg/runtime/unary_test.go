package runtime

import (
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestShrink checks Shrink on an integer input, computed in float64 and
// truncated toward zero, and its default attributes (lambd 0.5, bias 0)
// on floats at the threshold, which stays inside the band.
func TestShrink(t *testing.T) {
	ints := &tensor.Tensor{DType: tensor.Int32, Shape: []int{7}, Data: []int32{-3, -2, -1, 0, 1, 2, 3}}
	got := runOneNode(t, 9, "Shrink", tensor.Int32, []*tensor.Tensor{ints}, testmodels.AttrFloat("lambd", 1.5), testmodels.AttrFloat("bias", 0.5))
	if want := []int32{-2, -1, 0, 0, 0, 1, 2}; got.DType != tensor.Int32 || !slices.Equal(got.Data.([]int32), want) {
		t.Errorf("int32: got %s %v, want %v", got.DType, got.Data, want)
	}
	floats := tensor.FromFloat32([]float32{-1, -0.5, 0.25, 0.5, 0.75}, 5)
	got = runOneNode(t, 9, "Shrink", tensor.Float, []*tensor.Tensor{floats})
	checkBits(t, "defaults", got, floats.Shape, []float32{-1, 0, 0, 0, 0.75})
}

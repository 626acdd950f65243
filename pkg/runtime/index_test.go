package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// sameTensor checks got's type, shape and elements against want's.
func sameTensor(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || fmt.Sprint(got.Data) != fmt.Sprint(want.Data) {
		t.Errorf("%s: got %s %v %v, want %s %v %v", what, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
	}
}

// TestEyeLike checks EyeLike's diagonals below the main one, one past the
// last column (no ones) and an output type other than the input's.
func TestEyeLike(t *testing.T) {
	ints := tensor.FromInt64(make([]int64, 12), 3, 4)
	got := runOneNode(t, 9, "EyeLike", tensor.Bool, []*tensor.Tensor{ints}, testmodels.AttrInt("k", -1), testmodels.AttrInt("dtype", int64(tensor.Bool)))
	sameTensor(t, "k=-1 bool", got, &tensor.Tensor{DType: tensor.Bool, Shape: []int{3, 4}, Data: []bool{
		false, false, false, false,
		true, false, false, false,
		false, true, false, false,
	}})
	tall := tensor.New(tensor.Float, 4, 2)
	got = runOneNode(t, 9, "EyeLike", tensor.Float, []*tensor.Tensor{tall}, testmodels.AttrInt("k", -3))
	sameTensor(t, "k=-3", got, tensor.FromFloat32([]float32{0, 0, 0, 0, 0, 0, 1, 0}, 4, 2))
	got = runOneNode(t, 9, "EyeLike", tensor.Float, []*tensor.Tensor{tall}, testmodels.AttrInt("k", 2))
	sameTensor(t, "k=2", got, tensor.New(tensor.Float, 4, 2))
}

// TestReverseSequence checks ReverseSequence on rank 3, where each step
// is a block of elements, with the batch axis first and with it second,
// including a sequence of length 0 (left as it is).
func TestReverseSequence(t *testing.T) {
	// Batch 2, time 3, blocks of 2: entry b, step t holds 6b+2t, 6b+2t+1.
	x := tensor.FromInt64([]int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 2, 3, 2)
	got := runOneNode(t, 10, "ReverseSequence", tensor.Int64, []*tensor.Tensor{x, tensor.FromInt64([]int64{2, 3}, 2)},
		testmodels.AttrInt("batch_axis", 0), testmodels.AttrInt("time_axis", 1))
	sameTensor(t, "batch first", got, tensor.FromInt64([]int64{2, 3, 0, 1, 4, 5, 10, 11, 8, 9, 6, 7}, 2, 3, 2))

	// Time 3, batch 2, blocks of 1: step t, entry b holds 10t+b.
	x = tensor.FromFloat32([]float32{0, 1, 10, 11, 20, 21}, 3, 2, 1)
	got = runOneNode(t, 10, "ReverseSequence", tensor.Float, []*tensor.Tensor{x, tensor.FromInt64([]int64{0, 3}, 2)})
	sameTensor(t, "time first", got, tensor.FromFloat32([]float32{0, 21, 10, 11, 20, 1}, 3, 2, 1))
}

// TestCompress checks Compress without an axis on a rank-3 input and a
// condition shorter than it, along a middle axis, selecting nothing, and
// refusing a condition longer than the axis.
func TestCompress(t *testing.T) {
	x := tensor.FromFloat32([]float32{0, 1, 2, 3, 4, 5, 6, 7}, 2, 2, 2)
	cond := func(v ...bool) *tensor.Tensor {
		return &tensor.Tensor{DType: tensor.Bool, Shape: []int{len(v)}, Data: v}
	}
	got := runOneNode(t, 11, "Compress", tensor.Float, []*tensor.Tensor{x, cond(false, true, true, false, true)})
	sameTensor(t, "flattened", got, tensor.FromFloat32([]float32{1, 2, 4}, 3))
	got = runOneNode(t, 11, "Compress", tensor.Float, []*tensor.Tensor{x, cond(false, true)}, testmodels.AttrInt("axis", 1))
	sameTensor(t, "axis 1", got, tensor.FromFloat32([]float32{2, 3, 6, 7}, 2, 1, 2))
	ints := tensor.FromInt64([]int64{0, 1, 2, 3, 4, 5, 6, 7}, 2, 2, 2)
	got = runOneNode(t, 9, "Compress", tensor.Int64, []*tensor.Tensor{ints, cond(false, false)}, testmodels.AttrInt("axis", 0))
	sameTensor(t, "nothing", got, tensor.FromInt64(nil, 0, 2, 2))

	b := testmodels.New("compress", 11)
	b.Input("x", tensor.Float, 2, 2, 2).Input("c", tensor.Bool, 3).Output("y", tensor.Float)
	b.Node("Compress", "long_condition", []string{"x", "c"}, []string{"y"}, testmodels.AttrInt("axis", 2))
	_, err := session(t, b).Run(context.Background(), map[string]*tensor.Tensor{"x": x, "c": cond(true, false, true)}, RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "long_condition") || !strings.Contains(err.Error(), "condition has 3 elements, more than the 2 of axis 2") {
		t.Errorf("err = %v, want the long condition refused in node long_condition", err)
	}
}

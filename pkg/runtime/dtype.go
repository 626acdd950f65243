package runtime

import (
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// The engine computes every floating-point value in float32. Float16,
// BFloat16 and Double tensors are widened (or narrowed) to float32 when they
// enter (initializers, inputs) and cast back to the declared type on the way
// out. Casts to those types inside the graph round through the narrow type
// so the values are those the type can hold.

// toCompute returns t in the engine's compute form.
func toCompute(t *tensor.Tensor) (*tensor.Tensor, error) {
	switch t.DType {
	case tensor.Float16, tensor.BFloat16, tensor.Double:
		return castTensor(t, tensor.Float)
	}
	return t, nil
}

// asFloat32 returns the elements of a numeric or bool tensor as float32
// (the Data slice itself for Float tensors).
func asFloat32(t *tensor.Tensor) ([]float32, error) { return t.AsFloat32() }

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

func convertSlice[S, D number](s []S) []D {
	out := make([]D, len(s))
	for i, v := range s {
		out[i] = D(v)
	}
	return out
}

// castTensor converts t to dtype to with ONNX Cast semantics (see
// tensor.CastWith); it returns t itself when the type already matches.
func castTensor(t *tensor.Tensor, to tensor.DType) (*tensor.Tensor, error) {
	if t.DType == to {
		return t, nil
	}
	if t.DType == tensor.String || to == tensor.String {
		return castString(t, tensor.New(to, t.Shape...))
	}
	return tensor.Cast(t, to)
}

// asFloat32Exact reads a float tensor as float64 without extra rounding.
func asFloat32Exact(t *tensor.Tensor) ([]float64, error) {
	if d, ok := t.Data.([]float64); ok {
		return d, nil
	}
	f, err := asFloat32(t)
	if err != nil {
		return nil, err
	}
	return convertSlice[float32, float64](f), nil
}

// asInt64 reads an integer or bool tensor as int64.
func asInt64(t *tensor.Tensor) []int64 {
	switch d := t.Data.(type) {
	case []int64:
		return d
	case []int8:
		return convertSlice[int8, int64](d)
	case []int16:
		return convertSlice[int16, int64](d)
	case []int32:
		return convertSlice[int32, int64](d)
	case []uint8:
		return convertSlice[uint8, int64](d)
	case []uint16:
		return convertSlice[uint16, int64](d)
	case []uint32:
		return convertSlice[uint32, int64](d)
	case []uint64:
		return convertSlice[uint64, int64](d)
	case []float32:
		return convertSlice[float32, int64](d)
	case []float64:
		return convertSlice[float64, int64](d)
	case []bool:
		out := make([]int64, len(d))
		for i, v := range d {
			if v {
				out[i] = 1
			}
		}
		return out
	}
	return nil
}

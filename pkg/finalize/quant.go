package finalize

import (
	"fmt"
	"math"
	"runtime"

	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// GroupRanges returns the min and max of data per qparam group (tensor,
// channel along axis, or block of blockSize along axis), ignoring NaN.
// A group with no finite value gets [0, 0].
func GroupRanges(data []float32, shape []int, axis, blockSize int) (mins, maxs []float32, err error) {
	l, err := quant.NewLayout(shape, axis, blockSize)
	if err != nil {
		return nil, nil, err
	}
	n := l.Groups()
	mins, maxs = make([]float32, n), make([]float32, n)
	seen := make([]bool, n)
	l.Each(len(data), func(i, g int) {
		v := data[i]
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return
		}
		if !seen[g] {
			mins[g], maxs[g], seen[g] = v, v, true
			return
		}
		mins[g], maxs[g] = min(mins[g], v), max(maxs[g], v)
	})
	return mins, maxs, nil
}

// GroupValues returns the elements of each qparam group, in element order.
func GroupValues(data []float32, shape []int, axis, blockSize int) ([][]float32, error) {
	l, err := quant.NewLayout(shape, axis, blockSize)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, l.Groups())
	l.Each(len(data), func(i, g int) { out[g] = append(out[g], data[i]) })
	return out, nil
}

// Quantize quantizes data (of the given shape) with params laid out by
// axis and blockSize into a tensor of the spec's dtype, with pkg/quant's
// arithmetic: integer codes for integer dtypes, float8/float4 codes
// (saturating, round to nearest even) for float dtypes.
func Quantize(data []float32, shape []int, axis, blockSize int, s *spec.QuantizationSpec, p *plan.Params) (*tensor.Tensor, error) {
	dt, err := s.DType.TensorType()
	if err != nil {
		return nil, err
	}
	l, err := quant.NewLayout(shape, axis, blockSize)
	if err != nil {
		return nil, err
	}
	if len(p.ZeroPoints) != l.Groups() {
		return nil, fmt.Errorf("%d scales and %d zero points for %d qparam groups", len(p.Scales), len(p.ZeroPoints), l.Groups())
	}
	var zp *tensor.Tensor
	if !s.DType.IsFloat() {
		if zp, err = zeroPointTensor(s.DType, []int{len(p.ZeroPoints)}, p.ZeroPoints); err != nil {
			return nil, err
		}
	}
	return quant.Quantize(data, shape, l, p.Scales, zp, dt, true, runtime.GOMAXPROCS(0))
}

// zeroPointTensor builds the zero point tensor of dtype d and shape.
func zeroPointTensor(d spec.DType, shape []int, zps []int32) (*tensor.Tensor, error) {
	dt, err := d.TensorType()
	if err != nil {
		return nil, err
	}
	t := tensor.New(dt, shape...)
	switch v := t.Data.(type) {
	case []int8:
		for i, z := range zps {
			v[i] = int8(z)
		}
	case []uint8:
		if d.IsFloat() {
			break // float zero points are +0, code 0
		}
		for i, z := range zps {
			v[i] = uint8(z)
		}
	case []int16:
		for i, z := range zps {
			v[i] = int16(z)
		}
	case []uint16:
		for i, z := range zps {
			v[i] = uint16(z)
		}
	default:
		return nil, fmt.Errorf("no zero point of type %s", dt)
	}
	return t, nil
}

// scaleTensor stores scales as element type dt (float32, float16,
// bfloat16 or float8 e8m0).
func scaleTensor(dt tensor.DType, shape []int, scales []float32) (*tensor.Tensor, error) {
	t := tensor.New(dt, shape...)
	switch v := t.Data.(type) {
	case []float32:
		copy(v, scales)
	case []uint16:
		for i, s := range scales {
			if dt == tensor.BFloat16 {
				v[i] = tensor.Float32ToBFloat16(s)
			} else {
				v[i] = tensor.Float32ToFloat16(s)
			}
		}
	case []uint8:
		if dt != tensor.Float8E8M0 {
			return nil, fmt.Errorf("scales cannot be %s", dt)
		}
		for i, s := range scales {
			v[i] = tensor.Float32ToFloat8E8M0(s, true, tensor.E8M0Up)
		}
	default:
		return nil, fmt.Errorf("scales cannot be %s", dt)
	}
	return t, nil
}

// fp4AsFP8 re-encodes float4 e2m1 codes as the float8 e4m3fn codes of the
// same values (exact: e2m1 values are a subset of e4m3fn's).
func fp4AsFP8(q *tensor.Tensor) *tensor.Tensor {
	src := q.Data.([]uint8)
	out := tensor.New(tensor.Float8E4M3FN, q.Shape...)
	dst := out.Data.([]uint8)
	for i, c := range src {
		dst[i] = tensor.Float32ToFloat8E4M3FN(tensor.Float4E2M1ToFloat32(c), true)
	}
	return out
}

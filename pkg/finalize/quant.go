package finalize

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// ParamShape is the shape of the scale (and zero point) tensor of a tensor
// of the given shape: [] per tensor (axis < 0), [shape[axis]] per channel,
// and shape with shape[axis] replaced by ceil(shape[axis]/blockSize) per
// block (ONNX opset-21 blocked quantization).
func ParamShape(shape []int, axis, blockSize int) []int {
	switch {
	case axis < 0:
		return []int{}
	case blockSize <= 0:
		return []int{shape[axis]}
	}
	out := append([]int(nil), shape...)
	out[axis] = (shape[axis] + blockSize - 1) / blockSize
	return out
}

// paramIndex maps element indices to the index of their qparams.
type paramIndex struct {
	axis, block    int
	dim, inner, nb int
}

func newParamIndex(shape []int, axis, blockSize int) paramIndex {
	p := paramIndex{axis: axis, block: blockSize}
	if axis < 0 {
		return p
	}
	p.dim = shape[axis]
	p.inner = 1
	for _, d := range shape[axis+1:] {
		p.inner *= d
	}
	if blockSize > 0 {
		p.nb = (p.dim + blockSize - 1) / blockSize
	}
	return p
}

// of returns the qparam index of element i (row-major).
func (p paramIndex) of(i int) int {
	switch {
	case p.axis < 0:
		return 0
	case p.block <= 0:
		return (i / p.inner) % p.dim
	}
	outer := i / (p.dim * p.inner)
	c := (i / p.inner) % p.dim
	return (outer*p.nb+c/p.block)*p.inner + i%p.inner
}

// GroupRanges returns the min and max of data per qparam group (tensor,
// channel along axis, or block of blockSize along axis), ignoring NaN.
// A group with no finite value gets [0, 0].
func GroupRanges(data []float32, shape []int, axis, blockSize int) (mins, maxs []float32) {
	n := tensor.NumElements(ParamShape(shape, axis, blockSize))
	mins, maxs = make([]float32, n), make([]float32, n)
	seen := make([]bool, n)
	idx := newParamIndex(shape, axis, blockSize)
	for i, v := range data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		g := idx.of(i)
		if !seen[g] {
			mins[g], maxs[g], seen[g] = v, v, true
			continue
		}
		mins[g], maxs[g] = min(mins[g], v), max(maxs[g], v)
	}
	return mins, maxs
}

// GroupValues returns the elements of each qparam group, in element order.
func GroupValues(data []float32, shape []int, axis, blockSize int) [][]float32 {
	n := tensor.NumElements(ParamShape(shape, axis, blockSize))
	out := make([][]float32, n)
	idx := newParamIndex(shape, axis, blockSize)
	for i, v := range data {
		g := idx.of(i)
		out[g] = append(out[g], v)
	}
	return out
}

// TensorDType maps a quantized dtype of a spec to its ONNX element type.
func TensorDType(d spec.DType) (tensor.DType, error) {
	switch d {
	case spec.Int8:
		return tensor.Int8, nil
	case spec.UInt8:
		return tensor.Uint8, nil
	case spec.Int16:
		return tensor.Int16, nil
	case spec.UInt16:
		return tensor.Uint16, nil
	case spec.Int4:
		return tensor.Int4, nil
	case spec.UInt4:
		return tensor.Uint4, nil
	case spec.Int2:
		return tensor.Int2, nil
	case spec.UInt2:
		return tensor.Uint2, nil
	case spec.Float8E4M3FN:
		return tensor.Float8E4M3FN, nil
	case spec.Float8E5M2:
		return tensor.Float8E5M2, nil
	case spec.Float4E2M1:
		return tensor.Float4E2M1, nil
	case spec.Float32:
		return tensor.Float, nil
	case spec.Float16:
		return tensor.Float16, nil
	case spec.BFloat16:
		return tensor.BFloat16, nil
	case spec.Float8E8M0FNU:
		return tensor.Float8E8M0, nil
	}
	return tensor.Undefined, fmt.Errorf("dtype %s has no ONNX element type", d)
}

// QuantizeValue quantizes one value as ONNX QuantizeLinear does: x/scale in
// float32, rounded half to even, plus the zero point, saturated to the
// dtype's range. It returns the integer code (sign-extended for signed
// types).
func QuantizeValue(x, scale float32, zp int32, qmin, qmax int64) int64 {
	v := math.RoundToEven(float64(x/scale)) + float64(zp)
	switch {
	case math.IsNaN(v):
		return min(max(0, qmin), qmax)
	case v < float64(qmin):
		return qmin
	case v > float64(qmax):
		return qmax
	}
	return int64(v)
}

// Quantize quantizes data (of the given shape) with params laid out by
// axis and blockSize into a tensor of the spec's dtype: integer codes for
// integer dtypes, float8/float4 codes (saturating, round to nearest even)
// for float dtypes.
func Quantize(data []float32, shape []int, axis, blockSize int, s *spec.QuantizationSpec, p *Params) (*tensor.Tensor, error) {
	dt, err := TensorDType(s.DType)
	if err != nil {
		return nil, err
	}
	want := tensor.NumElements(ParamShape(shape, axis, blockSize))
	if len(p.Scales) != want || len(p.ZeroPoints) != want {
		return nil, fmt.Errorf("%d scales and %d zero points for %d qparam groups", len(p.Scales), len(p.ZeroPoints), want)
	}
	t := tensor.New(dt, shape...)
	idx := newParamIndex(shape, axis, blockSize)
	qmin, qmax := s.DType.Range()
	switch d := t.Data.(type) {
	case []int8:
		for i, x := range data {
			g := idx.of(i)
			d[i] = int8(QuantizeValue(x, p.Scales[g], p.ZeroPoints[g], qmin, qmax))
		}
	case []int16:
		for i, x := range data {
			g := idx.of(i)
			d[i] = int16(QuantizeValue(x, p.Scales[g], p.ZeroPoints[g], qmin, qmax))
		}
	case []uint16:
		for i, x := range data {
			g := idx.of(i)
			d[i] = uint16(QuantizeValue(x, p.Scales[g], p.ZeroPoints[g], qmin, qmax))
		}
	case []uint8:
		enc := floatEncoder(s.DType)
		for i, x := range data {
			g := idx.of(i)
			if enc != nil {
				d[i] = enc(x / p.Scales[g])
				continue
			}
			d[i] = uint8(QuantizeValue(x, p.Scales[g], p.ZeroPoints[g], qmin, qmax))
		}
	default:
		return nil, fmt.Errorf("cannot quantize to %s", dt)
	}
	return t, nil
}

// floatEncoder returns the saturating float8/float4 encoder of a float
// dtype, nil for integer dtypes.
func floatEncoder(d spec.DType) func(float32) uint8 {
	switch d {
	case spec.Float8E4M3FN:
		return func(x float32) uint8 { return tensor.Float32ToFloat8E4M3FN(x, true) }
	case spec.Float8E5M2:
		return func(x float32) uint8 { return tensor.Float32ToFloat8E5M2(x, true) }
	case spec.Float4E2M1:
		return tensor.Float32ToFloat4E2M1
	}
	return nil
}

// zeroPointTensor builds the zero point tensor of dtype d and shape.
func zeroPointTensor(d spec.DType, shape []int, zps []int32) (*tensor.Tensor, error) {
	dt, err := TensorDType(d)
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

package runtime

import (
	"fmt"
	"strconv"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// encodeNarrowFloat rounds float32 values to an 8- or 4-bit float type,
// one code per byte (ONNX Cast semantics, saturating when asked).
func encodeNarrowFloat(dt tensor.DType, x []float32, codes []uint8, saturate bool) error {
	t, err := tensor.CastWith(tensor.FromFloat32(x, len(x)), dt, tensor.CastOptions{NoSaturate: !saturate})
	if err != nil {
		return err
	}
	c, ok := t.Data.([]uint8)
	if !ok {
		return fmt.Errorf("cast to %s gave %T", dt, t.Data)
	}
	copy(codes, c)
	return nil
}

// castString converts between strings and numbers.
func castString(t, out *tensor.Tensor) (*tensor.Tensor, error) {
	if t.DType == tensor.String {
		src := t.Data.([]string)
		f := make([]float64, len(src))
		for i, s := range src {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("cast of %q to %s: %w", s, out.DType, err)
			}
			f[i] = v
		}
		tmp := &tensor.Tensor{DType: tensor.Double, Shape: t.Shape, Data: f}
		return castTensor(tmp, out.DType)
	}
	d := out.Data.([]string)
	if t.DType.IsInteger() || t.DType == tensor.Bool {
		for i, v := range asInt64(t) {
			d[i] = strconv.FormatInt(v, 10)
		}
		return out, nil
	}
	f, err := asFloat32Exact(t)
	if err != nil {
		return nil, err
	}
	for i, v := range f {
		d[i] = strconv.FormatFloat(v, 'g', -1, 32)
	}
	return out, nil
}

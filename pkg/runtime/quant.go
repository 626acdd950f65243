package runtime

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// intRange is the saturation range of the integer quantized types.
func intRange(dt tensor.DType) (lo, hi float64, ok bool) {
	switch dt {
	case tensor.Uint8:
		return 0, 255, true
	case tensor.Int8:
		return -128, 127, true
	case tensor.Uint16:
		return 0, 65535, true
	case tensor.Int16:
		return -32768, 32767, true
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32, true
	case tensor.Uint4:
		return 0, 15, true
	case tensor.Int4:
		return -8, 7, true
	case tensor.Uint2:
		return 0, 3, true
	case tensor.Int2:
		return -2, 1, true
	}
	return 0, 0, false
}

func isNarrowFloat(dt tensor.DType) bool {
	switch dt {
	case tensor.Float8E4M3FN, tensor.Float8E4M3FNUZ, tensor.Float8E5M2, tensor.Float8E5M2FNUZ, tensor.Float4E2M1, tensor.Float8E8M0:
		return true
	}
	return false
}

// qparamIndex maps each element of a tensor of shape to the index of its
// scale: one scale (per tensor), one per index along axis (per axis), or
// one per block of blockSize along axis (blocked; scale has x's rank).
func qparamIndex(shape []int, axis int64, blockSize int64, scale *tensor.Tensor) (func(fn func(i, s int)), error) {
	n := tensor.NumElements(shape)
	sn := scale.Len()
	if sn == 1 && (len(scale.Shape) <= 1) && blockSize == 0 {
		return func(fn func(i, s int)) {
			for i := 0; i < n; i++ {
				fn(i, 0)
			}
		}, nil
	}
	if len(shape) == 0 {
		return nil, fmt.Errorf("scale %v for a scalar input", scale.Shape)
	}
	ax, err := normAxis(axis, len(shape))
	if err != nil {
		return nil, err
	}
	outer, dim, inner := tensor.NumElements(shape[:ax]), shape[ax], tensor.NumElements(shape[ax+1:])
	if blockSize <= 0 {
		if len(scale.Shape) != 1 || sn != dim {
			return nil, fmt.Errorf("per-axis scale %v does not fit axis %d of input %v", scale.Shape, ax, shape)
		}
		return func(fn func(i, s int)) {
			for o := 0; o < outer; o++ {
				for a := 0; a < dim; a++ {
					base := (o*dim + a) * inner
					for j := 0; j < inner; j++ {
						fn(base+j, a)
					}
				}
			}
		}, nil
	}
	bs := int(blockSize)
	nb := (dim + bs - 1) / bs
	if len(scale.Shape) != len(shape) || scale.Shape[ax] != nb || sn != outer*nb*inner {
		return nil, fmt.Errorf("blocked scale %v does not fit input %v with block_size %d on axis %d", scale.Shape, shape, bs, ax)
	}
	return func(fn func(i, s int)) {
		for o := 0; o < outer; o++ {
			for a := 0; a < dim; a++ {
				base := (o*dim + a) * inner
				sbase := (o*nb + a/bs) * inner
				for j := 0; j < inner; j++ {
					fn(base+j, sbase+j)
				}
			}
		}
	}, nil
}

func buildQuantize(b *builder) (kernel, error) {
	axis := b.int("axis", 1)
	blockSize := b.int("block_size", 0)
	saturate := b.int("saturate", 1) != 0
	outType := tensor.DType(b.int("output_dtype", 0))
	if b.inputCount() > 2 && b.n.Inputs[2] != nil {
		if zt := b.n.Inputs[2].DType(); zt != tensor.Undefined {
			outType = zt
		}
	}
	if outType == tensor.Undefined {
		outType = tensor.Uint8
	}
	if _, _, ok := intRange(outType); !ok && !isNarrowFloat(outType) {
		return nil, unsupportedf("quantizing to %s is not supported", outType)
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := asFloat32(in[0])
		if err != nil {
			return nil, err
		}
		scale, err := asFloat32(in[1])
		if err != nil {
			return nil, fmt.Errorf("y_scale: %w", err)
		}
		dt := outType
		var zp []float32
		if len(in) > 2 && in[2] != nil {
			dt = in[2].DType
			if zp, err = asFloat32(in[2]); err != nil {
				return nil, fmt.Errorf("y_zero_point: %w", err)
			}
			if len(zp) != len(scale) {
				return nil, fmt.Errorf("y_zero_point %v and y_scale %v differ in shape", in[2].Shape, in[1].Shape)
			}
		}
		each, err := qparamIndex(in[0].Shape, axis, blockSize, in[1])
		if err != nil {
			return nil, err
		}
		out := tensor.New(dt, in[0].Shape...)
		if lo, hi, ok := intRange(dt); ok {
			q := make([]int64, len(x))
			each(func(i, s int) {
				// float32 division, then round half to even, as the ONNX reference.
				v := math.RoundToEven(float64(x[i] / scale[s]))
				if zp != nil {
					v += float64(zp[s])
				}
				if v != v {
					v = 0
				}
				q[i] = int64(min(max(v, lo), hi))
			})
			for i, v := range q {
				setIntWrap(out.Data, i, v)
			}
			return one(out), nil
		}
		f := make([]float32, len(x))
		each(func(i, s int) {
			v := x[i] / scale[s]
			if zp != nil {
				v += zp[s]
			}
			f[i] = v
		})
		err = encodeNarrowFloat(dt, f, out.Data.([]uint8), saturate)
		return one(out), err
	}, nil
}

func buildDequantize(b *builder) (kernel, error) {
	axis := b.int("axis", 1)
	blockSize := b.int("block_size", 0)
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		if _, _, ok := intRange(in[0].DType); !ok && !isNarrowFloat(in[0].DType) {
			return nil, fmt.Errorf("dequantizing %s is not supported", in[0].DType)
		}
		x, err := asFloat32(in[0])
		if err != nil {
			return nil, err
		}
		scale, err := asFloat32(in[1])
		if err != nil {
			return nil, fmt.Errorf("x_scale: %w", err)
		}
		var zp []float32
		if len(in) > 2 && in[2] != nil {
			if in[2].DType != in[0].DType {
				return nil, fmt.Errorf("x_zero_point is %s, x is %s", in[2].DType, in[0].DType)
			}
			if zp, err = asFloat32(in[2]); err != nil {
				return nil, fmt.Errorf("x_zero_point: %w", err)
			}
			if len(zp) != len(scale) {
				return nil, fmt.Errorf("x_zero_point %v and x_scale %v differ in shape", in[2].Shape, in[1].Shape)
			}
		}
		each, err := qparamIndex(in[0].Shape, axis, blockSize, in[1])
		if err != nil {
			return nil, err
		}
		out := tensor.New(tensor.Float, in[0].Shape...)
		y := out.Float32s()
		// int32 values beyond 2^24 lose precision in float32; subtract the
		// zero point exactly first.
		var xi []int64
		if in[0].DType == tensor.Int32 {
			xi = asInt64(in[0])
		}
		each(func(i, s int) {
			switch {
			case xi != nil:
				z := int64(0)
				if zp != nil {
					z = int64(zp[s])
				}
				y[i] = float32(xi[i]-z) * scale[s]
			case zp != nil:
				y[i] = (x[i] - zp[s]) * scale[s]
			default:
				y[i] = x[i] * scale[s]
			}
		})
		return one(out), nil
	}, nil
}

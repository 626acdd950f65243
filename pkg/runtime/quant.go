package runtime

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// qparamLayout is the quant.Layout of a tensor of shape quantized with
// scale: per tensor (one scale), per axis (one per index along axis) or
// per block of blockSize along axis (the scale has x's rank), checking that
// the scale's shape fits.
func qparamLayout(shape []int, axis int64, blockSize int64, scale *tensor.Tensor) (quant.Layout, error) {
	sn := scale.Len()
	if sn == 1 && (len(scale.Shape) <= 1) && blockSize == 0 {
		return quant.PerTensor, nil
	}
	if len(shape) == 0 {
		return quant.Layout{}, fmt.Errorf("scale %v for a scalar input", scale.Shape)
	}
	ax, err := normAxis(axis, len(shape))
	if err != nil {
		return quant.Layout{}, err
	}
	if blockSize <= 0 {
		if len(scale.Shape) != 1 || sn != shape[ax] {
			return quant.Layout{}, fmt.Errorf("per-axis scale %v does not fit axis %d of input %v", scale.Shape, ax, shape)
		}
		return quant.NewLayout(shape, ax, 0)
	}
	if want := quant.ParamShape(shape, ax, int(blockSize)); !slices.Equal(scale.Shape, want) {
		return quant.Layout{}, fmt.Errorf("blocked scale %v does not fit input %v with block_size %d on axis %d", scale.Shape, shape, blockSize, ax)
	}
	return quant.NewLayout(shape, ax, int(blockSize))
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
	if _, _, ok := quant.IntRange(outType); !ok && !quant.IsNarrowFloat(outType) {
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
		var zp *tensor.Tensor
		if len(in) > 2 && in[2] != nil {
			zp, dt = in[2], in[2].DType
			if zp.Len() != len(scale) {
				return nil, fmt.Errorf("y_zero_point %v and y_scale %v differ in shape", in[2].Shape, in[1].Shape)
			}
		}
		l, err := qparamLayout(in[0].Shape, axis, blockSize, in[1])
		if err != nil {
			return nil, err
		}
		out, err := quant.Quantize(x, in[0].Shape, l, scale, zp, dt, saturate, 1)
		return one(out), err
	}, nil
}

func buildDequantize(b *builder) (kernel, error) {
	axis := b.int("axis", 1)
	blockSize := b.int("block_size", 0)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		if _, _, ok := quant.IntRange(in[0].DType); !ok && !quant.IsNarrowFloat(in[0].DType) {
			return nil, fmt.Errorf("dequantizing %s is not supported", in[0].DType)
		}
		scale, err := asFloat32(in[1])
		if err != nil {
			return nil, fmt.Errorf("x_scale: %w", err)
		}
		var zp *tensor.Tensor
		if len(in) > 2 && in[2] != nil {
			zp = in[2]
			if zp.DType != in[0].DType {
				return nil, fmt.Errorf("x_zero_point is %s, x is %s", zp.DType, in[0].DType)
			}
			if zp.Len() != len(scale) {
				return nil, fmt.Errorf("x_zero_point %v and x_scale %v differ in shape", in[2].Shape, in[1].Shape)
			}
		}
		l, err := qparamLayout(in[0].Shape, axis, blockSize, in[1])
		if err != nil {
			return nil, err
		}
		out := rc.newFloatOut(in[0].Shape...) // DequantizeInto writes every element
		err = quant.DequantizeInto(out.Float32s(), in[0], l, scale, zp)
		return one(out), err
	}, nil
}

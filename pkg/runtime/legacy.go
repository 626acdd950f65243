package runtime

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// The ops of this file left ONNX in opset 10 (Upsample became Resize; the
// others were experimental) but old exporters still write them and ONNX
// Runtime still runs them.

// buildLegacyActivation builds Affine, ScaledTanh and ParametricSoftplus:
// the element-wise functions that RNN nodes name in their activations
// (rnnActivation), with the node's alpha and beta.
func buildLegacyActivation(op string) func(b *builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		f, err := rnnActivation(op, b.float("alpha", 0), b.float("beta", 0), b.has("alpha"), b.has("beta"))
		if err != nil {
			return nil, err
		}
		return unaryFloat(f), nil
	}
}

// buildImageScaler builds ImageScaler: y = x·scale + bias[c] over the
// channels of an NCHW image, the product rounded before the addition.
func buildImageScaler(b *builder) (kernel, error) {
	scale, bias := b.float("scale", 1), b.floats("bias")
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "input")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		if len(xs) != 4 {
			return nil, fmt.Errorf("input %v is not NCHW", xs)
		}
		shift := bias
		if shift == nil {
			shift = make([]float32, xs[1])
		}
		if len(shift) != xs[1] {
			return nil, fmt.Errorf("bias has %d values for %d channels", len(shift), xs[1])
		}
		scales := make([]float32, xs[1])
		for i := range scales {
			scales[i] = scale
		}
		return one(perChannel(rc, x, xs, scales, shift)), nil
	}, nil
}

// buildCrop builds Crop: border = [left, top, right, bottom] cut from
// each NCHW image; with scale = [height, width] the output has that size
// from (top, left) and the right and bottom borders are not read, as in
// ONNX Runtime.
func buildCrop(b *builder) (kernel, error) {
	border, scale := b.ints("border"), b.ints("scale")
	if len(border) != 4 {
		return nil, fmt.Errorf("border %v: want [left, top, right, bottom]", border)
	}
	if scale != nil && len(scale) != 2 {
		return nil, fmt.Errorf("scale %v: want [height, width]", scale)
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		xs := t.Shape
		if len(xs) != 4 {
			return nil, fmt.Errorf("input %v is not NCHW", xs)
		}
		left, top, right, bottom := int(border[0]), int(border[1]), int(border[2]), int(border[3])
		h, w := xs[2]-top-bottom, xs[3]-left-right
		if scale != nil {
			h, w = int(scale[0]), int(scale[1])
		}
		if left < 0 || top < 0 || h < 0 || w < 0 || top+h > xs[2] || left+w > xs[3] {
			return nil, fmt.Errorf("border %v and scale %v do not fit input %v", border, scale, xs)
		}
		os := []int{xs[0], xs[1], h, w}
		instr := rowMajorStrides(xs)
		base := top*instr[2] + left*instr[3]
		if x, ok := t.Data.([]float32); ok {
			out := rc.newFloatOut(os...)
			stridedCopy(out.Float32s(), x, os, instr, base)
			return one(out), nil
		}
		out := tensor.New(t.DType, os...)
		stridedGather(out.Data, t.Data, os, instr, base)
		return one(out), nil
	}, nil
}

// buildUpsample builds Upsample (opsets 7 to 9): Resize of opset 10 with
// the scales of the attribute (7, 8) or the second input (9): asymmetric
// coordinates, nearest rounding down.
func buildUpsample(b *builder) (kernel, error) {
	s := &resizeSpec{mode: b.str("mode", "nearest"), coordMode: "asymmetric", nearestMode: "floor", cubicA: -0.75, keepAspect: "stretch", opset: 10}
	if s.mode != "nearest" && s.mode != "linear" {
		return nil, unsupportedf("mode=%q is not supported", s.mode)
	}
	if b.opset >= 9 {
		return s.run, nil
	}
	attr := b.floats("scales")
	if attr == nil {
		return nil, fmt.Errorf("attribute scales is required")
	}
	scales := tensor.FromFloat32(slices.Clone(attr), len(attr))
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		return s.run(rc, []*tensor.Tensor{in[0], scales})
	}, nil
}

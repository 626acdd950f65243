package runtime

import (
	"bytes"
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
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

// codesType is the element type QuantizeLinear n writes: its zero
// point's declared type, else its output_dtype attribute, else uint8.
func codesType(n *onnxgraph.Node) tensor.DType {
	var t tensor.DType
	if a := n.Attr("output_dtype"); a != nil {
		t = tensor.DType(a.GetI())
	}
	if len(n.Inputs) > 2 && n.Inputs[2] != nil {
		if zt := n.Inputs[2].DType(); zt != tensor.Undefined {
			t = zt
		}
	}
	if t == tensor.Undefined {
		t = tensor.Uint8
	}
	return t
}

// quantizeParams reads QuantizeLinear's scale (as float32) and zero point
// (nil when absent) from its inputs in, and the codes' type: the zero
// point's when there is one, else outType.
func quantizeParams(in []*tensor.Tensor, outType tensor.DType) (scale []float32, zp *tensor.Tensor, dt tensor.DType, err error) {
	if scale, err = asFloat32(in[1]); err != nil {
		return nil, nil, 0, fmt.Errorf("y_scale: %w", err)
	}
	dt = outType
	if len(in) > 2 && in[2] != nil {
		zp, dt = in[2], in[2].DType
		if zp.Len() != len(scale) {
			return nil, nil, 0, fmt.Errorf("y_zero_point %v and y_scale %v differ in shape", in[2].Shape, in[1].Shape)
		}
	}
	return scale, zp, dt, nil
}

func buildQuantize(b *builder) (kernel, error) {
	axis := b.int("axis", 1)
	blockSize := b.int("block_size", 0)
	saturate := b.int("saturate", 1) != 0
	outType := codesType(b.n)
	if _, _, ok := quant.IntRange(outType); !ok && !quant.IsNarrowFloat(outType) {
		return nil, unsupportedf("quantizing to %s is not supported", outType)
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := asFloat32(in[0])
		if err != nil {
			return nil, err
		}
		scale, zp, dt, err := quantizeParams(in, outType)
		if err != nil {
			return nil, err
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

// planRoundTrip returns the DequantizeLinear that alone reads the output of
// QuantizeLinear q with the same scale, zero point, axis and block size,
// nil when there is none: the two then run as one step (buildRoundTrip).
func planRoundTrip(q *onnxgraph.Node, constOf func(*onnxgraph.Value) *tensor.Tensor) *onnxgraph.Node {
	if len(q.Inputs) < 2 || len(q.Outputs) != 1 || q.Outputs[0] == nil || q.Inputs[0] == nil {
		return nil
	}
	codes := q.Outputs[0]
	if codes.IsGraphOutput || len(codes.Consumers) != 1 {
		return nil
	}
	dq := codes.Consumers[0]
	if ops.FusionOf(dq) != ops.FuseRoundTripTail || len(dq.Inputs) < 2 || dq.Inputs[0] != codes || len(dq.Outputs) != 1 || dq.Outputs[0] == nil {
		return nil
	}
	same := func(a, b *onnxgraph.Value) bool {
		if a == b {
			return true
		}
		ta, tb := constOf(a), constOf(b)
		return ta != nil && tb != nil && ta.DType == tb.DType && slices.Equal(ta.Shape, tb.Shape) && bytes.Equal(tensor.ByteView(ta.Data), tensor.ByteView(tb.Data))
	}
	input := func(n *onnxgraph.Node, i int) *onnxgraph.Value {
		if i < len(n.Inputs) {
			return n.Inputs[i]
		}
		return nil
	}
	attr := func(n *onnxgraph.Node, name string, def int64) int64 {
		if a := n.Attr(name); a != nil {
			return a.GetI()
		}
		return def
	}
	if !same(input(q, 1), input(dq, 1)) || !same(input(q, 2), input(dq, 2)) ||
		attr(q, "axis", 1) != attr(dq, "axis", 1) || attr(q, "block_size", 0) != attr(dq, "block_size", 0) {
		return nil
	}
	return dq
}

// buildRoundTrip compiles QuantizeLinear q and the DequantizeLinear
// planRoundTrip found into one kernel reading q's inputs: for integer
// codes of 16 bits or fewer it computes what dq gives back in one pass,
// without the codes (quant.RoundTripInto, the same bits). A run that taps
// the codes, or codes of another type, runs the two nodes one after the
// other.
func (c *compiler) buildRoundTrip(q, dq *onnxgraph.Node) (kernel, error) {
	qK, err := c.build(q)
	if err != nil {
		return nil, err
	}
	dqK, err := c.build(dq)
	if err != nil {
		return nil, err
	}
	axis, blockSize := int64(1), int64(0)
	if a := q.Attr("axis"); a != nil {
		axis = a.GetI()
	}
	if a := q.Attr("block_size"); a != nil {
		blockSize = a.GetI()
	}
	outType := codesType(q)
	codes := q.Outputs[0]
	unfused := func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		qo, err := qK(rc, in)
		if err != nil {
			return nil, err
		}
		rc.emit(codes.Name, qo[0])
		args := []*tensor.Tensor{qo[0], in[1], nil}
		if len(in) > 2 {
			args[2] = in[2]
		}
		o, err := dqK(rc, args[:max(len(in), 2)])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dq, err)
		}
		return o, nil
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, ok := in[0].Data.([]float32)
		if !ok || rc.wants(codes.Name) {
			return unfused(rc, in)
		}
		scale, zp, dt, err := quantizeParams(in, outType)
		if err != nil {
			return nil, err
		}
		if lo, hi, isInt := quant.IntRange(dt); !isInt || lo < math.MinInt16 || hi > math.MaxUint16 {
			return unfused(rc, in) // float8 and int32 codes
		}
		l, err := qparamLayout(in[0].Shape, axis, blockSize, in[1])
		if err != nil {
			return nil, err
		}
		out := rc.newFloatOut(in[0].Shape...) // RoundTripInto writes every element
		if _, err := quant.RoundTripInto(out.Float32s(), x, l, scale, zp, dt); err != nil {
			return nil, err
		}
		return one(out), nil
	}, nil
}

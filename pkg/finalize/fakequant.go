package finalize

import (
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// FakeQuantize is DequantizeLinear(QuantizeLinear(data)) with the params
// laid out by axis and blockSize: the real values the written model's
// consumers see. The algorithms measure weight error with it.
func FakeQuantize(data []float32, shape []int, axis, blockSize int, s *spec.QuantizationSpec, p *plan.Params) ([]float32, error) {
	q, err := Quantize(data, shape, axis, blockSize, s, p)
	if err != nil {
		return nil, err
	}
	l, err := quant.NewLayout(shape, axis, blockSize)
	if err != nil {
		return nil, err
	}
	zp, err := zeroPointTensor(s.DType, []int{len(p.ZeroPoints)}, p.ZeroPoints)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(data))
	if err := quant.DequantizeInto(out, q, l, p.Scales, zp); err != nil {
		return nil, err
	}
	return out, nil
}

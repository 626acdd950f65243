package compare

import (
	"fmt"
	"iter"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// SourceBatches serves samples [start, end) of src in batches of batchSize
// samples, the last one possibly smaller, reading one batch at a time: the
// comparison's memory does not grow with the data set. quantize
// --eval-samples passes the held-out tail of its calibration data.
func SourceBatches(src calibrate.Source, start, end, batchSize int) (iter.Seq2[Batch, error], error) {
	switch {
	case batchSize <= 0:
		return nil, fmt.Errorf("batch size %d: want 1 or more", batchSize)
	case start < 0 || end > src.Samples() || start >= end:
		return nil, fmt.Errorf("samples [%d, %d) out of the %d available", start, end, src.Samples())
	}
	return func(yield func(Batch, error) bool) {
		for lo := start; lo < end; lo += batchSize {
			b, err := src.Batch(lo, min(lo+batchSize, end))
			if !yield(b, err) || err != nil {
				return
			}
		}
	}, nil
}

// LabelsOf turns a label array into one class index per sample: integer
// data of shape [N] or [N, 1], or one-hot / score rows [N, C] (argmax).
func LabelsOf(t *tensor.Tensor) ([]int64, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	switch {
	case len(t.Shape) == 1 || (len(t.Shape) == 2 && t.Shape[1] == 1):
		x, err := tensor.Cast(t, tensor.Int64)
		if err != nil {
			return nil, fmt.Errorf("labels: %w", err)
		}
		if t.DType.IsFloat() {
			f, _ := t.AsFloat32()
			for i, v := range f {
				if v != float32(int64(v)) {
					return nil, fmt.Errorf("labels: element %d is %v, not a class index", i, v)
				}
			}
		}
		return x.Int64s(), nil
	case len(t.Shape) == 2:
		f, err := t.AsFloat32()
		if err != nil {
			return nil, fmt.Errorf("labels: %w", err)
		}
		c := t.Shape[1]
		out := make([]int64, t.Shape[0])
		for i := range out {
			out[i] = int64(argmax(f[i*c : (i+1)*c]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("labels of shape %v: want [N] class indices or [N, classes] one-hot rows", t.Shape)
}

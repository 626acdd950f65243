package compare

import (
	"fmt"
	"iter"
	"reflect"
	"slices"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// SliceBatches splits whole data sets (one tensor per model input, samples
// on axis 0, the same number of samples in each) into batches of batchSize
// samples, the last one possibly smaller. samples > 0 keeps only the first
// samples samples. It returns the batches and the number of samples they
// hold. Batches share the inputs' memory.
func SliceBatches(inputs map[string]*tensor.Tensor, batchSize, samples int) (iter.Seq2[Batch, error], int, error) {
	if batchSize <= 0 {
		return nil, 0, fmt.Errorf("batch size %d: want 1 or more", batchSize)
	}
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, 0, fmt.Errorf("no input data")
	}
	total := -1
	for _, n := range names {
		t := inputs[n]
		if len(t.Shape) == 0 {
			return nil, 0, fmt.Errorf("input %q: a scalar has no batch axis", n)
		}
		if err := t.Validate(); err != nil {
			return nil, 0, fmt.Errorf("input %q: %w", n, err)
		}
		if total >= 0 && t.Shape[0] != total {
			return nil, 0, fmt.Errorf("input %q has %d samples but input %q has %d: every input needs the same number", n, t.Shape[0], names[0], total)
		}
		total = t.Shape[0]
	}
	if samples > 0 {
		total = min(total, samples)
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("input %q holds no samples", names[0])
	}
	seq := func(yield func(Batch, error) bool) {
		for lo := 0; lo < total; lo += batchSize {
			hi := min(lo+batchSize, total)
			b := Batch{}
			for _, n := range names {
				b[n] = rows(inputs[n], lo, hi)
			}
			if !yield(b, nil) {
				return
			}
		}
	}
	return seq, total, nil
}

// rows returns samples [lo, hi) of t, sharing its data.
func rows(t *tensor.Tensor, lo, hi int) *tensor.Tensor {
	inner := tensor.NumElements(t.Shape[1:])
	shape := slices.Clone(t.Shape)
	shape[0] = hi - lo
	data := reflect.ValueOf(t.Data).Slice(lo*inner, hi*inner).Interface()
	return &tensor.Tensor{DType: t.DType, Shape: shape, Data: data}
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

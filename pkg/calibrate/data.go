package calibrate

import (
	"fmt"
	"math/rand/v2"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Source serves calibration samples by index, so that batches of any size
// and shards of the data are cheap slices and memory stays one batch.
type Source interface {
	// Samples is the number of samples available.
	Samples() int
	// Batch returns samples [start, end) of every model input, with the
	// batch on axis 0, keyed by input name.
	Batch(start, end int) (map[string]*tensor.Tensor, error)
	// Random is true when the samples are random rather than real data.
	Random() bool
	Close() error
}

// checkInput checks one input's dtype and per-sample shape (the shape
// without axis 0) against the model input; symbolic model dims accept any
// size.
func checkInput(in runtime.IOInfo, dt tensor.DType, sample []int, where string) error {
	if in.DType != dt {
		return fmt.Errorf("input %q: %s holds %s, the model wants %s", in.Name, where, dt, in.DType)
	}
	if in.Shape == nil {
		return nil
	}
	if len(in.Shape) != len(sample)+1 {
		return fmt.Errorf("input %q: %s has samples of shape %v (rank %d with the batch axis), the model wants rank %d %v",
			in.Name, where, sample, len(sample)+1, len(in.Shape), in.Shape)
	}
	for i, d := range in.Shape[1:] {
		if d >= 0 && int(d) != sample[i] {
			return fmt.Errorf("input %q: %s has samples of shape %v, the model wants %v (dimension %d)", in.Name, where, sample, in.Shape, i+1)
		}
	}
	return nil
}

// RandomSource makes standard-normal float inputs (uniform 0..9 for integer
// inputs) for smoke tests. Sample i is generated from seed i alone, so a
// batch of any size holds the same samples. Stats made from it are marked
// random_data: true.
type RandomSource struct {
	inputs  []runtime.IOInfo
	samples int
}

// MaxSampleElements is the largest sample (elements of one input, without
// the batch axis) random data makes: 2^28, 1 GiB of float32.
const MaxSampleElements = 1 << 28

// NewRandomSource checks that every input has a fixed shape apart from the
// batch axis.
func NewRandomSource(inputs []runtime.IOInfo, samples int) (*RandomSource, error) {
	for _, in := range inputs {
		if len(in.Shape) == 0 {
			return nil, fmt.Errorf("input %q: random data needs a known shape with a batch axis", in.Name)
		}
		n := int64(1)
		for i, d := range in.Shape[1:] {
			if d < 0 {
				return nil, fmt.Errorf("input %q: dimension %d is symbolic; random data needs a fixed shape", in.Name, i+1)
			}
			if d > 0 && n > MaxSampleElements/d {
				return nil, fmt.Errorf("input %q: a sample of shape %v holds more than %d elements, the most random data makes", in.Name, in.Shape[1:], int64(MaxSampleElements))
			}
			n *= d
		}
		switch in.DType {
		case tensor.Float, tensor.Int64, tensor.Int32:
		default:
			return nil, fmt.Errorf("input %q: random data for %s inputs is not supported", in.Name, in.DType)
		}
	}
	return &RandomSource{inputs: inputs, samples: samples}, nil
}

// Samples implements Source.
func (s *RandomSource) Samples() int { return s.samples }

// Random implements Source.
func (s *RandomSource) Random() bool { return true }

// Close implements Source.
func (s *RandomSource) Close() error { return nil }

// Batch implements Source.
func (s *RandomSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	out := map[string]*tensor.Tensor{}
	for k, in := range s.inputs {
		sample := make([]int, len(in.Shape)-1)
		for i, d := range in.Shape[1:] {
			sample[i] = int(d)
		}
		per := tensor.NumElements(sample)
		t := tensor.New(in.DType, append([]int{end - start}, sample...)...)
		for i := start; i < end; i++ {
			r := rand.New(rand.NewPCG(uint64(i), uint64(k)))
			off := (i - start) * per
			for j := range per {
				switch d := t.Data.(type) {
				case []float32:
					d[off+j] = float32(r.NormFloat64())
				case []int64:
					d[off+j] = int64(r.IntN(10))
				case []int32:
					d[off+j] = int32(r.IntN(10))
				}
			}
		}
		out[in.Name] = t
	}
	return out, nil
}

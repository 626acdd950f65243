package calibrate

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// KindMoments observes an activation only for its per-channel second
// moments (data-aware palettization); it keeps the per-tensor min/max and
// counts like KindMinMax.
const KindMoments Kind = "second_moment"

// newMomentObserver is the observer of a tensor watched for moments only.
func newMomentObserver(t TensorToObserve) *Observer {
	o := &Observer{Name: t.Name, Kind: KindMoments, Calculator: "none"}
	axis := *t.Moments
	o.MomentAxis = &axis
	o.initChannels(1)
	return o
}

// observeMoments adds Σx² per channel of x (shape) along MomentAxis; the
// first batch fixes the channel count. Non-finite values count as zero:
// the min/max pass counts them.
func (o *Observer) observeMoments(x []float32, shape []int) error {
	axis, rank := *o.MomentAxis, len(shape)
	if axis < 0 {
		axis += rank
	}
	if axis < 0 || axis >= rank {
		return fmt.Errorf("tensor %q: moment axis %d out of range for shape %v", o.Name, *o.MomentAxis, shape)
	}
	outer, channels, inner := tensor.NumElements(shape[:axis]), shape[axis], tensor.NumElements(shape[axis+1:])
	if o.SumSquares == nil {
		o.MomentAxis = &axis
		o.SumSquares = make([]float64, channels)
	}
	if len(o.SumSquares) != channels {
		return fmt.Errorf("tensor %q: %d channels on axis %d of shape %v, earlier batches had %d", o.Name, channels, axis, shape, len(o.SumSquares))
	}
	kernels.SumSquaresChannels(x, outer, channels, inner, o.SumSquares)
	o.MomentCount += int64(outer * inner)
	return nil
}

// mergeMoments adds p's sums to o's (shards of one calibration).
func (o *Observer) mergeMoments(p *Observer) error {
	if (o.MomentAxis == nil) != (p.MomentAxis == nil) {
		return fmt.Errorf("tensor %q: second moments in one shard only", o.Name)
	}
	switch {
	case p.SumSquares == nil:
	case o.SumSquares == nil:
		o.SumSquares, o.MomentAxis = slices.Clone(p.SumSquares), p.MomentAxis
	case len(o.SumSquares) != len(p.SumSquares):
		return fmt.Errorf("tensor %q: %d moment channels in one shard, %d in another", o.Name, len(o.SumSquares), len(p.SumSquares))
	default:
		for c, s := range p.SumSquares {
			o.SumSquares[c] += s
		}
	}
	o.MomentCount += p.MomentCount
	return nil
}

// SecondMoments is the mean of x² per channel along MomentAxis, nil when
// the observer keeps none or has seen no data.
func (o *Observer) SecondMoments() []float32 {
	if o.SumSquares == nil || o.MomentCount == 0 {
		return nil
	}
	per := float64(o.MomentCount)
	out := make([]float32, len(o.SumSquares))
	for c, s := range o.SumSquares {
		out[c] = float32(s / per)
	}
	return out
}

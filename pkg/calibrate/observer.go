package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Kind is what an observer keeps.
type Kind string

// The observer kinds.
const (
	// KindMinMax keeps the running min/max (spec calculator static).
	KindMinMax Kind = "minmax"
	// KindGlobalMinMax keeps the min/max over all data (global_minmax). For
	// streamed activations this is the same state as KindMinMax; the kind is
	// kept apart so the stats file says what the config asked for.
	KindGlobalMinMax Kind = "global_minmax"
	// KindMovingAverage keeps torch's moving average of per-batch min/max.
	KindMovingAverage Kind = "moving_average_minmax"
	// KindHistogram keeps a Histogram for percentile, entropy and mse.
	KindHistogram Kind = "histogram"
	// KindFixed has a range known in advance (Softmax, Sigmoid, Tanh
	// outputs); it still counts values and NaN/Inf.
	KindFixed Kind = "fixed"
)

// Range is a closed interval of real values.
type Range struct{ Min, Max float32 }

// TensorToObserve is one planned activation.
type TensorToObserve struct {
	Name string
	Spec *spec.QuantizationSpec
	// Axis is the channel axis of a per-channel spec (negative counts from
	// the end). Nil takes Spec.Granularity.Axis, then 1 (NCHW).
	Axis *int
	// Fixed, when set, is the known range of the tensor.
	Fixed *Range
	// Moments, when set, is the channel axis along which the observer
	// also keeps Σx² (data-aware palettization); with a nil Spec the
	// tensor is observed for that alone.
	Moments *int
	// Conditional marks a value inside an If branch or a Loop/Scan body:
	// a batch may not compute it (the other branch ran, or no iteration),
	// and a body computes it once per iteration. The iterations of one
	// batch are observed as one tensor (joined along the first axis), so
	// that a running calculator sees a batch's range, not each step's.
	Conditional bool
}

// Observer watches one tensor. Its exported fields are its state in the
// stats file.
type Observer struct {
	Name string `json:"name"`
	Kind Kind   `json:"observer"`
	// Calculator is the spec calculator (for the stats file reader).
	Calculator        string  `json:"calculator"`
	AveragingConstant float64 `json:"averaging_constant,omitempty"`
	// Axis is the channel axis, non-negative once data has been seen; nil
	// per tensor.
	Axis *int `json:"axis,omitempty"`
	// Min and Max are the exact extremes of the finite values seen, per
	// channel (one element per tensor); +Inf/−Inf before any.
	Min []Float `json:"min"`
	Max []Float `json:"max"`
	// AvgMin and AvgMax are the moving averages (moving_average_minmax).
	AvgMin    []Float    `json:"avg_min,omitempty"`
	AvgMax    []Float    `json:"avg_max,omitempty"`
	Histogram *Histogram `json:"histogram,omitempty"`
	Fixed     *[2]Float  `json:"fixed,omitempty"`
	// Batches is the number of tensors observed; Count the finite values;
	// NaN and Inf the skipped ones.
	Batches int64 `json:"batches"`
	Count   int64 `json:"count"`
	NaN     int64 `json:"nan"`
	Inf     int64 `json:"inf"`
	// MergedShards counts the shards merged into this state (0 or 1: one pass).
	MergedShards int `json:"merged_shards,omitempty"`
	// MomentAxis, SumSquares and MomentCount are the per-channel sums of
	// squares (moments.go) and the values each channel summed.
	MomentAxis  *int      `json:"moment_axis,omitempty"`
	SumSquares  []float64 `json:"sum_squares,omitempty"`
	MomentCount int64     `json:"moment_count,omitempty"`

	bmin, bmax []float32
}

// NewObserver returns the observer a tensor's spec asks for.
func NewObserver(t TensorToObserve) (*Observer, error) {
	if t.Spec == nil && t.Moments != nil {
		return newMomentObserver(t), nil
	}
	if t.Spec == nil {
		return nil, fmt.Errorf("tensor %q: no quantization spec", t.Name)
	}
	calc := t.Spec.Calculator.WithDefaults()
	o := &Observer{Name: t.Name, Calculator: calc.Type.String()}
	switch calc.Type {
	case spec.CalculatorAuto, spec.MovingAverage:
		// Activations default to the moving average (coreai-opt).
		o.Kind = KindMovingAverage
		o.Calculator = spec.MovingAverage.String()
		o.AveragingConstant = calc.AveragingConstant
		if o.AveragingConstant == 0 {
			o.AveragingConstant = spec.DefaultAveragingConstant
		}
	case spec.Static:
		o.Kind = KindMinMax
	case spec.GlobalMinMax:
		o.Kind = KindGlobalMinMax
	case spec.Percentile, spec.Entropy, spec.MSE:
		o.Kind = KindHistogram
		o.Histogram = NewHistogram(calc.NumBins)
	default:
		return nil, fmt.Errorf("tensor %q: unsupported calculator %s", t.Name, calc)
	}
	if t.Spec.Granularity.Type == spec.PerChannel {
		if o.Kind == KindHistogram {
			return nil, fmt.Errorf("tensor %q: the %s calculator is per tensor only; use a min/max calculator for per_channel activations", t.Name, calc.Type)
		}
		axis := 1
		if t.Axis != nil {
			axis = *t.Axis
		} else if t.Spec.Granularity.Axis != nil {
			axis = *t.Spec.Granularity.Axis
		}
		o.Axis = &axis
	} else if t.Spec.Granularity.Type == spec.PerBlock {
		return nil, fmt.Errorf("tensor %q: per_block granularity is for weights, not calibrated activations", t.Name)
	}
	if t.Fixed != nil {
		if !(t.Fixed.Min <= t.Fixed.Max) {
			return nil, fmt.Errorf("tensor %q: fixed range [%g, %g] is empty", t.Name, t.Fixed.Min, t.Fixed.Max)
		}
		o.Kind = KindFixed
		o.Histogram, o.AveragingConstant = nil, 0
		o.Fixed = &[2]Float{Float(t.Fixed.Min), Float(t.Fixed.Max)}
	}
	if o.Axis == nil {
		o.initChannels(1)
	}
	if t.Moments != nil {
		axis := *t.Moments
		o.MomentAxis = &axis
	}
	return o, nil
}

func (o *Observer) initChannels(c int) {
	o.Min, o.Max = make([]Float, c), make([]Float, c)
	for i := range c {
		o.Min[i], o.Max[i] = Float(math.Inf(1)), Float(math.Inf(-1))
	}
	if o.Kind == KindMovingAverage {
		o.AvgMin, o.AvgMax = make([]Float, c), make([]Float, c)
		for i := range c {
			o.AvgMin[i], o.AvgMax[i] = Float(math.Inf(1)), Float(math.Inf(-1))
		}
	}
}

// Channels is the number of (min, max) pairs; 0 for a per-channel observer
// that has seen no data.
func (o *Observer) Channels() int { return len(o.Min) }

// Observe folds one tensor (typically one batch of an activation) into the
// observer. Float tensors of any width are read as float32.
func (o *Observer) Observe(t *tensor.Tensor) error {
	x, ok := t.Data.([]float32)
	if !ok {
		var err error
		if x, err = t.AsFloat32(); err != nil {
			return fmt.Errorf("tensor %q: %w", o.Name, err)
		}
	}
	outer, channels, inner := len(x), 1, 1
	if o.Axis != nil {
		axis := *o.Axis
		rank := len(t.Shape)
		if axis < 0 {
			axis += rank
		}
		if axis < 0 || axis >= rank {
			return fmt.Errorf("tensor %q: channel axis %d out of range for shape %v", o.Name, *o.Axis, t.Shape)
		}
		channels = t.Shape[axis]
		outer, inner = tensor.NumElements(t.Shape[:axis]), tensor.NumElements(t.Shape[axis+1:])
		if o.Min == nil {
			o.Axis = &axis
			o.initChannels(channels)
		}
		if channels != len(o.Min) {
			return fmt.Errorf("tensor %q: %d channels on axis %d of shape %v, earlier batches had %d", o.Name, channels, axis, t.Shape, len(o.Min))
		}
	}
	if cap(o.bmin) < channels {
		o.bmin, o.bmax = make([]float32, channels), make([]float32, channels)
	}
	bmin, bmax := o.bmin[:channels], o.bmax[:channels]
	var nan, inf int
	if o.Kind == KindHistogram {
		var err error
		if nan, inf, err = o.Histogram.Add(x); err != nil {
			return fmt.Errorf("tensor %q: %w", o.Name, err)
		}
		bmin[0], bmax[0] = float32(o.Histogram.Min), float32(o.Histogram.Max)
		if o.Histogram.Total == 0 {
			bmin[0], bmax[0] = float32(math.Inf(1)), float32(math.Inf(-1))
		}
	} else if o.Axis == nil {
		bmin[0], bmax[0], nan, inf = kernels.FiniteMinMax(x)
	} else {
		for c := range channels {
			bmin[c], bmax[c] = float32(math.Inf(1)), float32(math.Inf(-1))
		}
		nan, inf = kernels.FiniteMinMaxChannels(x, outer, channels, inner, bmin, bmax)
	}
	for c := range channels {
		o.Min[c], o.Max[c] = min(o.Min[c], Float(bmin[c])), max(o.Max[c], Float(bmax[c]))
		if o.Kind == KindMovingAverage && bmin[c] <= bmax[c] {
			// torch MovingAverageMinMaxObserver, in float32: the first
			// batch initialises, later ones move by c·(batch − running).
			if math.IsInf(float64(o.AvgMin[c]), 1) {
				o.AvgMin[c], o.AvgMax[c] = Float(bmin[c]), Float(bmax[c])
			} else {
				k := float32(o.AveragingConstant)
				a, b := float32(o.AvgMin[c]), float32(o.AvgMax[c])
				o.AvgMin[c], o.AvgMax[c] = Float(a+k*(bmin[c]-a)), Float(b+k*(bmax[c]-b))
			}
		}
	}
	if o.MomentAxis != nil {
		if err := o.observeMoments(x, t.Shape); err != nil {
			return err
		}
	}
	o.Batches++
	o.Count += int64(len(x) - nan - inf)
	o.NaN += int64(nan)
	o.Inf += int64(inf)
	return nil
}

// Merge folds the state of p, an observer of the same tensor over other
// data (another shard), into o. Min/max and histograms merge exactly: the
// result is what one pass over both data sets gives, whatever the batch
// boundaries. A moving average depends on the order and the boundaries of
// every batch, so shards of it cannot be merged into what one pass gives:
// Merge refuses them (ErrNotMergeable).
func (o *Observer) Merge(p *Observer) error {
	if err := o.checkMergeable(); err != nil {
		return err
	}
	if o.Name != p.Name || o.Kind != p.Kind || o.Calculator != p.Calculator || o.AveragingConstant != p.AveragingConstant {
		return fmt.Errorf("tensor %q: cannot merge %s/%s with %q %s/%s", o.Name, o.Kind, o.Calculator, p.Name, p.Kind, p.Calculator)
	}
	if (o.Axis == nil) != (p.Axis == nil) || (o.Axis != nil && o.Min != nil && p.Min != nil && *o.Axis != *p.Axis) {
		return fmt.Errorf("tensor %q: cannot merge observers with different channel axes", o.Name)
	}
	if o.Fixed != nil && *o.Fixed != *p.Fixed {
		return fmt.Errorf("tensor %q: fixed ranges %v and %v differ", o.Name, *o.Fixed, *p.Fixed)
	}
	if err := o.mergeMoments(p); err != nil {
		return err
	}
	if p.Min == nil {
		return o.addCounts(p)
	}
	if o.Min == nil {
		o.Axis = p.Axis
		o.initChannels(len(p.Min))
	}
	if len(o.Min) != len(p.Min) {
		return fmt.Errorf("tensor %q: %d channels in one shard, %d in another", o.Name, len(o.Min), len(p.Min))
	}
	if o.Histogram != nil {
		if p.Histogram == nil {
			return fmt.Errorf("tensor %q: histogram missing from one shard", o.Name)
		}
		if err := o.Histogram.Merge(p.Histogram); err != nil {
			return fmt.Errorf("tensor %q: %w", o.Name, err)
		}
	}
	for c := range o.Min {
		o.Min[c], o.Max[c] = min(o.Min[c], p.Min[c]), max(o.Max[c], p.Max[c])
	}
	return o.addCounts(p)
}

// ErrNotMergeable marks statistics that shards cannot reproduce exactly.
var ErrNotMergeable = errors.New("cannot be merged exactly")

// checkMergeable refuses a moving-average observer: see Merge.
func (o *Observer) checkMergeable() error {
	if o.Kind == KindMovingAverage {
		return fmt.Errorf("tensor %q (%s calculator): a moving average depends on the order and boundaries of every batch, so its shards %w; calibrate it in one run, or give it a min/max or histogram calculator", o.Name, o.Calculator, ErrNotMergeable)
	}
	return nil
}

func (o *Observer) addCounts(p *Observer) error {
	o.Batches += p.Batches
	o.Count += p.Count
	o.NaN += p.NaN
	o.Inf += p.Inf
	o.MergedShards = max(o.MergedShards, 1) + max(p.MergedShards, 1)
	return nil
}

// Range applies the observer's calculator and returns one (min, max) pair
// per channel, ready for s.QParams. s supplies the quantized type the
// percentile (symmetric or two-tailed), entropy (levels 2^(bits−1)) and mse
// (levels qmax − qmin + 1) calculators need; it may be nil for the others.
func (o *Observer) Range(s *spec.QuantizationSpec) (mins, maxs []float32, err error) {
	if o.Kind == KindFixed {
		return []float32{float32(o.Fixed[0])}, []float32{float32(o.Fixed[1])}, nil
	}
	if o.Count == 0 || len(o.Min) == 0 {
		return nil, nil, fmt.Errorf("tensor %q: no finite values observed in %d batches (%d NaN, %d ±Inf)", o.Name, o.Batches, o.NaN, o.Inf)
	}
	for c := range o.Min {
		if o.Min[c] > o.Max[c] {
			return nil, nil, fmt.Errorf("tensor %q: channel %d saw no finite values", o.Name, c)
		}
	}
	// A min/max calculator reads the observed min/max, which every kind
	// keeps: a spec raised to a min/max calculator after calibration
	// (the accuracy search's 16-bit points) gets the range that observing
	// it with its own kind gives.
	minMax := s != nil && (s.Calculator.Type == spec.Static || s.Calculator.Type == spec.GlobalMinMax)
	switch {
	case o.Kind == KindMinMax, o.Kind == KindGlobalMinMax, minMax:
		return fromFloats(o.Min), fromFloats(o.Max), nil
	case o.Kind == KindMovingAverage:
		return fromFloats(o.AvgMin), fromFloats(o.AvgMax), nil
	}
	if s == nil {
		return nil, nil, fmt.Errorf("tensor %q: the %s calculator needs the quantization spec", o.Name, o.Calculator)
	}
	calc := s.Calculator.WithDefaults()
	h := o.Histogram
	var lo, hi float32
	switch o.Calculator {
	case spec.Percentile.String():
		symmetric := s.QScheme != spec.Asymmetric
		lo, hi = percentileRange(h, calc.Percentile, symmetric)
	case spec.Entropy.String():
		levels := 1 << (max(s.DType.Bits(), 2) - 1)
		if qmin, qmax, ok := s.QuantRange(); ok && s.QScheme == spec.Asymmetric && h.Min >= 0 {
			levels = int(qmax - qmin + 1)
		}
		lo, hi = entropyRange(h, levels)
	case spec.MSE.String():
		dst := 256
		if qmin, qmax, ok := s.QuantRange(); ok {
			dst = int(qmax - qmin + 1)
		}
		lo, hi = mseRange(h, dst)
	default:
		return nil, nil, fmt.Errorf("tensor %q: histogram observer with calculator %q", o.Name, o.Calculator)
	}
	return []float32{lo}, []float32{hi}, nil
}

// clone deep-copies the exported state.
func (o *Observer) clone() *Observer {
	c := *o
	c.Min, c.Max = slices.Clone(o.Min), slices.Clone(o.Max)
	c.AvgMin, c.AvgMax = slices.Clone(o.AvgMin), slices.Clone(o.AvgMax)
	c.SumSquares = slices.Clone(o.SumSquares)
	if o.MomentAxis != nil {
		a := *o.MomentAxis
		c.MomentAxis = &a
	}
	if o.Axis != nil {
		a := *o.Axis
		c.Axis = &a
	}
	if o.Histogram != nil {
		h := *o.Histogram
		h.Counts = slices.Clone(o.Histogram.Counts)
		h.scratch = nil
		c.Histogram = &h
	}
	if o.Fixed != nil {
		f := *o.Fixed
		c.Fixed = &f
	}
	c.bmin, c.bmax = nil, nil
	return &c
}

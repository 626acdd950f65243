package calibrate

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Options controls a calibration run.
type Options struct {
	// Samples caps the samples used (0: all the source has).
	Samples int
	// BatchSize is the samples per engine run (0: 1).
	BatchSize int
	// Shard and Shards select the Shard-th of Shards contiguous slices of
	// the samples (--shard i/n); Shards 0 means the whole data.
	Shard, Shards int
	// ModelSHA256 is recorded in the stats.
	ModelSHA256 string
	// Progress, when set, is called after every batch.
	Progress func(Progress)
}

// Progress reports a finished batch.
type Progress struct {
	Batch, Batches int
	Samples, Total int
	Elapsed        time.Duration
}

// ShardRange is the sample range [start, end) of shard i of n over total
// samples: contiguous slices whose sizes differ by at most one.
func ShardRange(i, n, total int) (start, end int) {
	return i * total / n, (i + 1) * total / n
}

// Calibrate runs the samples of data through session in batches and hands
// each planned activation to its observer through the engine's tap. Memory
// is one batch of inputs and activations plus the observers' fixed state,
// whatever the number of samples.
func Calibrate(ctx context.Context, session runtime.Session, tensors []TensorToObserve, data Source, opts Options) (*Stats, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1
	}
	if opts.Shards == 0 {
		opts.Shards = 1
	}
	if opts.Shard < 0 || opts.Shard >= opts.Shards {
		return nil, fmt.Errorf("shard %d/%d: the shard index must be in [0, %d)", opts.Shard, opts.Shards, opts.Shards)
	}
	total := data.Samples()
	if opts.Samples > 0 {
		total = min(total, opts.Samples)
	}
	start, end := ShardRange(opts.Shard, opts.Shards, total)
	if start >= end {
		return nil, fmt.Errorf("shard %d/%d of %d samples is empty", opts.Shard, opts.Shards, total)
	}
	obs := make(map[string]*Observer, len(tensors))
	stats := &Stats{Version: StatsVersion, ModelSHA256: opts.ModelSHA256, RandomData: data.Random()}
	names := make([]string, 0, len(tensors))
	for _, t := range tensors {
		if _, dup := obs[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q planned twice", t.Name)
		}
		o, err := NewObserver(t)
		if err != nil {
			return nil, err
		}
		if opts.Shards > 1 {
			if err := o.checkMergeable(); err != nil {
				return nil, fmt.Errorf("--shard %d/%d: %w", opts.Shard, opts.Shards, err)
			}
		}
		obs[t.Name] = o
		names = append(names, t.Name)
		stats.Tensors = append(stats.Tensors, o)
	}
	stats.sort()
	conditional, ever := map[string]bool{}, map[string]bool{}
	for _, t := range tensors {
		conditional[t.Name] = t.Conditional
	}
	var tapErr error
	seen := make(map[string]bool, len(tensors))
	pending := map[string][]*tensor.Tensor{}
	tap := func(value string, t *tensor.Tensor) {
		o := obs[value]
		if o == nil || tapErr != nil {
			return
		}
		seen[value] = true
		if conditional[value] {
			pending[value] = append(pending[value], t.Clone())
			return
		}
		tapErr = o.Observe(t)
	}
	began := time.Now()
	batches := (end - start + opts.BatchSize - 1) / opts.BatchSize
	for b := 0; b < batches; b++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s := start + b*opts.BatchSize
		e := min(s+opts.BatchSize, end)
		inputs, err := data.Batch(s, e)
		if err != nil {
			return nil, err
		}
		clear(seen)
		if _, err := session.Run(ctx, inputs, runtime.RunOptions{Tap: tap, TapValues: names}); err != nil {
			return nil, fmt.Errorf("calibration batch %d (samples %d..%d): %w", b+1, s, e-1, err)
		}
		for _, n := range names {
			if parts := pending[n]; len(parts) > 0 && tapErr == nil {
				tapErr = observeJoined(obs[n], parts)
			}
		}
		clear(pending)
		if tapErr != nil {
			return nil, tapErr
		}
		for _, n := range names {
			switch {
			case seen[n]:
				ever[n] = true
			case !conditional[n]:
				return nil, fmt.Errorf("tensor %q: the %s engine did not compute it in batch %d", n, session.Engine(), b+1)
			}
		}
		stats.Samples += int64(e - s)
		stats.Batches++
		if opts.Progress != nil {
			opts.Progress(Progress{Batch: b + 1, Batches: batches, Samples: e - start, Total: end - start, Elapsed: time.Since(began)})
		}
	}
	for _, n := range names {
		// One shard may not run a branch that another does; the merged
		// statistics say whether any did (Observer.Range).
		if !ever[n] && opts.Shards <= 1 {
			return nil, fmt.Errorf("tensor %q: no calibration batch computed it: the If branch or Loop/Scan body that computes it never ran on the data; calibrate with data that runs it, or leave its node in float (op_name_config: {<node>: null})", n)
		}
	}
	return stats, nil
}

// observeJoined observes the values one batch computed for a tensor inside
// a Loop/Scan body, one per iteration, as one tensor: joined along the
// first axis when they share a shape and that axis is not the observer's
// channel axis, else one by one.
func observeJoined(o *Observer, parts []*tensor.Tensor) error {
	joinable := len(parts) > 1 && parts[0].Rank() > 0
	if o.Axis != nil {
		axis := *o.Axis
		if axis < 0 {
			axis += parts[0].Rank()
		}
		joinable = joinable && axis != 0
	}
	for _, p := range parts[1:] {
		joinable = joinable && slices.Equal(p.Shape, parts[0].Shape)
	}
	if !joinable {
		for _, p := range parts {
			if err := o.Observe(p); err != nil {
				return err
			}
		}
		return nil
	}
	data := make([]float32, 0, len(parts)*parts[0].Len())
	for _, p := range parts {
		f, err := p.AsFloat32()
		if err != nil {
			return fmt.Errorf("tensor %q: %w", o.Name, err)
		}
		data = append(data, f...)
	}
	shape := slices.Clone(parts[0].Shape)
	shape[0] *= len(parts)
	return o.Observe(tensor.FromFloat32(data, shape...))
}

package passes

import (
	"context"
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

// ToObserve lists the plan's observed activations (group roots without a
// fixed range) for calibrate.Calibrate.
func ToObserve(plan *Plan) []calibrate.TensorToObserve {
	var out []calibrate.TensorToObserve
	for _, t := range plan.Observed() {
		out = append(out, calibrate.TensorToObserve{Name: t.Value, Spec: t.Spec})
	}
	return out
}

// StatsOf adapts calibration statistics to what finalize.Write reads.
func StatsOf(st *calibrate.Stats) finalize.Stats { return calibStats{st} }

type calibStats struct{ st *calibrate.Stats }

// ActivationParams applies the observer's calculator to the tensor's spec.
func (c calibStats) ActivationParams(t *finalize.TensorPlan) (*finalize.Params, error) {
	o := c.st.Tensor(t.Value)
	if o == nil {
		return nil, fmt.Errorf("activation %q is not in the calibration statistics (were they computed with this config and model?)", t.Value)
	}
	mins, maxs, err := o.Range(t.Spec)
	if err != nil {
		return nil, err
	}
	sc, zp, err := t.Spec.QParams(mins, maxs)
	if err != nil {
		return nil, fmt.Errorf("activation %q: %w", t.Value, err)
	}
	p := &finalize.Params{Scales: sc, ZeroPoints: zp}
	if len(mins) == 1 {
		p.Observed = &finalize.Range{Min: mins[0], Max: maxs[0]}
	}
	return p, nil
}

// EngineCalibrator returns a Calibrator that runs the float model with
// the named engine on data and observes the plan's activations. The
// statistics are also handed to keep, when set (to write a stats file).
func EngineCalibrator(engine string, ropts runtime.Options, data calibrate.Source, copts calibrate.Options, keep func(*calibrate.Stats)) Calibrator {
	return func(ctx context.Context, m *onnxgraph.Model, plan *Plan) (finalize.Stats, error) {
		s, err := runtime.Open(engine, m, ropts)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		st, err := calibrate.Calibrate(ctx, s, ToObserve(plan), data, copts)
		if err != nil {
			return nil, err
		}
		if keep != nil {
			keep(st)
		}
		return StatsOf(st), nil
	}
}

package passes

import (
	"context"
	"fmt"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// ToObserve lists the plan's observed activations (group roots without a
// fixed range) for calibrate.Calibrate.
func ToObserve(plan *Plan) []calibrate.TensorToObserve {
	var out []calibrate.TensorToObserve
	at := map[string]int{}
	for _, t := range plan.Observed() {
		at[t.Value] = len(out)
		out = append(out, calibrate.TensorToObserve{Name: t.Value, Spec: t.Spec})
	}
	// The inputs of palettized weights: their second moments too.
	for _, m := range momentRequests(plan) {
		if i, ok := at[m.Name]; ok {
			out[i].Moments = m.Moments
		} else {
			out = append(out, m)
		}
	}
	return out
}

// markConditional marks the tensors defined inside If/Loop/Scan subgraphs,
// which a batch may compute once, many times or not at all.
func markConditional(m *onnxgraph.Model, tensors []calibrate.TensorToObserve) []calibrate.TensorToObserve {
	inner := map[string]bool{}
	for _, g := range m.Graph.Graphs()[1:] {
		for _, v := range g.Values() {
			if v.Defined() {
				inner[v.Name] = true
			}
		}
	}
	for i := range tensors {
		tensors[i].Conditional = inner[tensors[i].Name]
	}
	return tensors
}

// StatsOf adapts calibration statistics to what DecideQParams reads.
func StatsOf(st *calibrate.Stats) Stats { return calibStats{st} }

type calibStats struct{ st *calibrate.Stats }

// ActivationParams applies the observer's calculator to the tensor's spec.
func (c calibStats) ActivationParams(t *TensorPlan) (*Params, error) {
	o := c.st.Tensor(t.Value)
	if o == nil {
		return nil, fmt.Errorf("activation %q is not in the calibration statistics (were they computed with this config and model?)", t.Value)
	}
	mins, maxs, err := o.Range(keepingMax(t))
	if err != nil {
		return nil, err
	}
	var observed *Range
	if len(mins) == 1 {
		observed = &Range{Min: mins[0], Max: maxs[0]}
	}
	widenForHeadroom(t, mins, maxs)
	sc, zp, err := t.Spec.QParams(mins, maxs)
	if err != nil {
		return nil, fmt.Errorf("activation %q: %w", t.Value, err)
	}
	return &Params{Scales: sc, ZeroPoints: zp, Observed: observed, NaN: o.NaN, Inf: o.Inf}, nil
}

// keepingMax is t's spec, with a min/max calculator in place of a
// histogram search that clips (percentile, mse, entropy) when t keeps its
// calibrated maximum (TensorPlan.KeepMax): the observers keep the
// observed range whatever their calculator. Min/max and moving-average
// calculators stay as the config says.
func keepingMax(t *TensorPlan) *spec.QuantizationSpec {
	if !t.KeepMax || t.Spec == nil {
		return t.Spec
	}
	switch t.Spec.Calculator.Type {
	case spec.Percentile, spec.MSE, spec.Entropy:
	default:
		return t.Spec
	}
	s := *t.Spec
	s.Calculator.Type = spec.GlobalMinMax
	return &s
}

// EngineCalibrator returns a Calibrator that runs the float model with
// the named engine on data and observes the plan's activations. The
// statistics are also handed to keep, when set (to write a stats file).
func EngineCalibrator(engine string, ropts runtime.Options, data calibrate.Source, copts calibrate.Options, keep func(*calibrate.Stats)) Calibrator {
	return func(ctx context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
		s, err := runtime.Open(engine, m, ropts)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		defer runtime.BatchGC()()
		st, err := calibrate.Calibrate(ctx, s, markConditional(m, ToObserve(plan)), data, copts)
		if err != nil {
			return nil, err
		}
		if keep != nil {
			keep(st)
		}
		return StatsOf(st), nil
	}
}

// SecondMoments is E[x²] per channel of an activation observed for
// data-aware palettization, nil for others.
func (c calibStats) SecondMoments(value string) []float32 {
	if o := c.st.Tensor(value); o != nil {
		return o.SecondMoments()
	}
	return nil
}

// Infinities is the number of ±Inf values the activation held during
// calibration.
func (c calibStats) Infinities(value string) int64 {
	if o := c.st.Tensor(value); o != nil {
		return o.Inf
	}
	return 0
}

// infinityCounter is implemented by statistics that count the infinities
// each observed activation held.
type infinityCounter interface {
	Infinities(value string) int64
}

// KeepInfinitiesFloat takes out of the plan every activation group whose
// observed root held ±Inf during calibration, with a note: QuantizeLinear
// saturates an infinity to the end of the grid, so a −Inf attention mask
// (masked_fill before Softmax) would become a finite score and the masked
// positions would get attention weight. The tensors run in float instead.
// An int32 bias whose input is taken out goes with it (it needs the input's
// scale).
func KeepInfinitiesFloat(plan *Plan, st Stats) {
	ic, ok := st.(infinityCounter)
	if !ok {
		return
	}
	drop := map[string]bool{}
	for _, root := range plan.Observed() {
		n := ic.Infinities(root.Value)
		if n == 0 {
			continue
		}
		var group []string
		for _, t := range plan.Tensors {
			if t.Role == Activation && plan.Root(t) == root {
				drop[t.Value] = true
				group = append(group, t.Value)
			}
		}
		sort.Strings(group)
		plan.Notes = append(plan.Notes, fmt.Sprintf("value %q: held %d ±Inf values in calibration (an attention mask?): left in float with %d tensor(s) sharing its qparams %q, since QuantizeLinear would make them finite",
			root.Value, n, len(group), group))
	}
	if len(drop) == 0 {
		return
	}
	for _, t := range plan.Tensors {
		if t.Role == Bias && drop[t.Input] {
			drop[t.Value] = true
			plan.Notes = append(plan.Notes, fmt.Sprintf("bias %q: left in float, its input %q is", t.Value, t.Input))
		}
	}
	plan.Remove(drop)
}

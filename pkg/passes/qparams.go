package passes

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Stats supplies the qparams of calibrated activations.
type Stats interface {
	// ActivationParams returns the qparams of the activation t (a group
	// root without a fixed range) under t.Spec, with the observed range;
	// its errors name t.
	ActivationParams(t *TensorPlan) (*Params, error)
}

// MomentStats are calibration statistics that hold the second moments of
// activations: palettization weighs each weight's error by its input
// channel's moment when they do (data-aware mode).
type MomentStats interface {
	// SecondMoments is E[x²] per channel of an activation, nil when the
	// statistics have none for it.
	SecondMoments(value string) []float32
}

// RangeStats are observed [min, max] ranges by value name; their qparams
// are spec.QParams of the range.
type RangeStats map[string]Range

// ActivationParams implements Stats.
func (r RangeStats) ActivationParams(t *TensorPlan) (*Params, error) {
	rg, ok := r[t.Value]
	if !ok {
		return nil, fmt.Errorf("no calibration range for activation %q", t.Value)
	}
	mins, maxs := []float32{rg.Min}, []float32{rg.Max}
	widenForHeadroom(t, mins, maxs)
	sc, zp, err := t.Spec.QParams(mins, maxs)
	if err != nil {
		return nil, fmt.Errorf("activation %q: %w", t.Value, err)
	}
	return &Params{Scales: sc, ZeroPoints: zp, Observed: &Range{Min: rg.Min, Max: rg.Max}}, nil
}

// WideHeadroomFactor is what a range with wide headroom
// (TensorPlan.WideHeadroom) is multiplied by, away from zero. Every point
// of a model in 16 bits with the observed ranges (calibrated on the shared
// models' calibration files, measured on their evaluation files): 1.25
// took most of the clipped values back (ppocrv3-det 26.3 → 47.0 dB,
// squeezenet1.0 32.0 → 56.2), 1.5 the rest (47.8, 64.7) and 2 no more
// (47.1, 64.4); the resolution it spends showed where a 16-bit step still
// mattered, yolox-nano's unequalized stem (23.6 dB at 1, 22.4 at 1.25,
// 21.4 at 1.5, 19.9 at 2).
const WideHeadroomFactor = 1.5

// widenForHeadroom widens each range away from zero by WideHeadroomFactor
// when t has wide headroom (TensorPlan.WideHeadroom), then raises each max
// by its range's width when t has headroom (TensorPlan.Headroom): one bit
// of the grid above the calibrated maximum.
func widenForHeadroom(t *TensorPlan, mins, maxs []float32) {
	if t.WideHeadroom {
		for i := range maxs {
			mins[i], maxs[i] = WideHeadroomFactor*mins[i], WideHeadroomFactor*maxs[i]
		}
	}
	if !t.Headroom {
		return
	}
	for i := range maxs {
		maxs[i] += maxs[i] - mins[i]
	}
}

// MarkWideHeadroom marks the calibrated activations among tensors whose
// grid has 16 bits or more (TensorPlan.WideHeadroom), unless opts turn
// the rule off, and says how many it marked. At 8 bits a calculator trades
// the rare extremes for a finer step; at 16 the step is fine enough to
// spare a bit, and a value beyond what the calibration samples reached,
// which a few samples make likely, would otherwise be clipped: then the
// clipping, not the step, makes the error.
func MarkWideHeadroom(tensors []*TensorPlan, opts PrepareOptions) int {
	n := 0
	for _, t := range tensors {
		t.WideHeadroom = !opts.NoWideHeadroom && t.Role == Activation && t.SharedWith == "" && t.Fixed == nil && t.Spec != nil &&
			t.Spec.DType.IsInteger() && t.Spec.DType.Bits() >= 16
		if t.WideHeadroom {
			n++
		}
	}
	return n
}

func paramsOfRange(s *spec.QuantizationSpec, rg Range) (*Params, error) {
	sc, zp, err := s.QParams([]float32{rg.Min}, []float32{rg.Max})
	if err != nil {
		return nil, err
	}
	return &Params{Scales: sc, ZeroPoints: zp, Observed: &Range{Min: rg.Min, Max: rg.Max}}, nil
}

func qparamsPass(_ context.Context, u *Unit) error {
	return DecideQParams(u.Model, u.Plan, u.Stats)
}

// DecideQParams sets every scale and zero point the plan writes, so that
// finalize only writes what the plan says: activations from stats (nil
// when the plan has none to calibrate) or their fixed range, biases by the
// int32 rule (input scale × weight scale, enlarging the weight scale of a
// channel whose bias would overflow int32 rather than saturating the bias),
// and weights with float8e8m0 scales rounded to the stored powers of two
// first, so that a bias's scale is the product of the scales stored.
// Weights keep the params prepare gave them otherwise; tensors sharing
// qparams keep none of their own (Plan.Root holds them). The second moments
// of palettized weights' inputs, when stats has them, go to the palettes.
// It may run again on its own result and changes nothing then.
func DecideQParams(m *onnxgraph.Model, p *Plan, stats Stats) error {
	var missing []string
	for _, t := range p.Tensors {
		if t.Role == Bias || t.SharedWith != "" || t.Params != nil {
			continue
		}
		switch {
		case t.Fixed != nil:
			q, err := paramsOfRange(t.Spec, *t.Fixed)
			if err != nil {
				return fmt.Errorf("tensor %q: %w", t.Value, err)
			}
			t.Params = q
		case t.Role == Activation && stats != nil:
			q, err := stats.ActivationParams(t) // its errors name the tensor
			if err != nil {
				return err
			}
			t.Params = q.Clone()
		default:
			missing = append(missing, t.Value)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		more := ""
		if len(missing) > 5 {
			more = fmt.Sprintf(" and %d more", len(missing)-5)
			missing = missing[:5]
		}
		return fmt.Errorf("no qparams for %q%s: activations need calibration statistics (run calibrate, or use a weight-only preset)", missing, more)
	}
	floatMixedConcats(m, p)
	if note := narrowToTails(m, p); note != "" && !slices.Contains(p.Notes, note) {
		p.Notes = append(p.Notes, note)
	}
	for _, t := range p.Tensors {
		if t.SharedWith == "" {
			continue
		}
		root := p.Root(t)
		if root == nil || root.SharedWith != "" {
			return fmt.Errorf("tensor %q: shares qparams with %q, which is not planned", t.Value, t.SharedWith)
		}
		if !root.Spec.Equal(t.Spec) {
			return fmt.Errorf("tensor %q: shares qparams with %q but has spec %s, not %s", t.Value, root.Value, t.Spec, root.Spec)
		}
	}
	for _, t := range p.Tensors {
		if t.Role == Weight && t.SharedWith == "" && t.Spec.ScaleDType == spec.Float8E8M0FNU {
			// The codes, and a bias's scale, must be computed with the
			// scale as stored.
			q := t.Params.Clone()
			for i, s := range q.Scales {
				q.Scales[i] = storedScale(t.Spec, s)
			}
			t.Params = q
		}
	}
	if err := decideBiases(m, p); err != nil {
		return err
	}
	if ms, ok := stats.(MomentStats); ok {
		for _, pp := range p.Palettes {
			if pp.Input != "" {
				pp.InputMoments = ms.SecondMoments(pp.Input)
			}
		}
	}
	return nil
}

// DecidedCopy returns a copy of p with its qparams decided, for a caller
// that writes a variant of the plan (an algorithm before the qparams pass,
// a candidate of the accuracy search); p is left as it is.
func DecidedCopy(m *onnxgraph.Model, p *Plan, stats Stats) (*Plan, error) {
	c := &Plan{Stage: p.Stage, Skipped: p.Skipped, Notes: slices.Clone(p.Notes)}
	for _, t := range p.Tensors {
		tc := *t
		if err := c.Add(&tc); err != nil {
			return nil, err
		}
	}
	for _, pp := range p.Palettes {
		pc := *pp
		c.Palettes = append(c.Palettes, &pc)
	}
	if err := DecideQParams(m, c, stats); err != nil {
		return nil, err
	}
	return c, nil
}

// decideBiases sets each bias's int32 params as input scale × weight
// scale, first enlarging the weight scale of a channel whose bias would
// overflow int32, with a note.
func decideBiases(m *onnxgraph.Model, p *Plan) error {
	for _, t := range p.Tensors {
		if t.Role != Bias {
			continue
		}
		in, wt := p.Tensor(t.Input), p.Tensor(t.Weight)
		if in == nil || wt == nil {
			return fmt.Errorf("bias %q: input %q or weight %q is not planned", t.Value, t.Input, t.Weight)
		}
		ip, wroot := p.Root(in).Params, p.Root(wt)
		wp := wroot.Params
		if len(ip.Scales) != 1 {
			return fmt.Errorf("bias %q: input %q is not quantized per tensor", t.Value, t.Input)
		}
		bv := constantIn(m, t.Value)
		if bv == nil {
			return fmt.Errorf("bias %q: not a constant of the model", t.Value)
		}
		b, _, err := constFloats(m, bv)
		if err != nil {
			return fmt.Errorf("bias %q: %w", t.Value, err)
		}
		beta := t.BiasBeta
		if beta == 0 {
			beta = 1
		}
		sIn := float64(ip.Scales[0])
		owned := false
		for c, v := range b {
			j := c % len(wp.Scales)
			need := math.Abs(float64(v)*float64(beta)) / (sIn * math.MaxInt32)
			if float64(wp.Scales[j]) < need {
				if !owned {
					// The plan's params may be shared with another plan
					// (a sub-plan of a sensitivity run): change a copy.
					wp, owned = wp.Clone(), true
					wroot.Params = wp
				}
				old := wp.Scales[j]
				wp.Scales[j] = storedScale(wroot.Spec, math.Nextafter32(float32(need), float32(math.Inf(1))))
				p.Notes = append(p.Notes, fmt.Sprintf("weight %q: scale %d enlarged from %g to %g so that bias %q fits int32",
					t.Weight, j, old, wp.Scales[j], t.Value))
			}
		}
		scales := make([]float32, len(b))
		for c := range b {
			// float32 product, as a runtime fusing the bias recomputes it.
			scales[c] = ip.Scales[0] * wp.Scales[c%len(wp.Scales)]
		}
		if t.Axis < 0 && len(scales) > 0 {
			scales = scales[:1]
		}
		t.Params = &Params{Scales: scales, ZeroPoints: make([]int32, len(scales))}
	}
	return nil
}

// constantIn returns the constant called name in whichever graph of m
// holds it (a bias may be a subgraph's), nil when none does.
func constantIn(m *onnxgraph.Model, name string) *onnxgraph.Value {
	if v := m.Graph.Value(name); v != nil && v.Const != nil {
		return v
	}
	for _, g := range m.Graph.Graphs()[1:] {
		if v := g.Value(name); v != nil && v.Const != nil {
			return v
		}
	}
	return nil
}

// storedScale is scale s as a weight of spec ws stores it: a float8e8m0
// scale rounded up to its power of two (up, so that an enlarged scale
// still fits its bias), others as they are.
func storedScale(ws *spec.QuantizationSpec, s float32) float32 {
	if ws.ScaleDType != spec.Float8E8M0FNU {
		return s
	}
	return tensor.Float8E8M0ToFloat32(tensor.Float32ToFloat8E8M0(s, true, tensor.E8M0Up))
}

// mixedConcatLevels is the fewest grid levels an input of a model-ending
// Concat may keep under the output's scale: below it (four bits lost of
// eight) the input is rounded to a handful of values, a detector's class
// probabilities to zero beside its boxes in pixels.
const mixedConcatLevels = 16

// floatMixedConcats leaves in float each qparams group holding a
// model-ending Concat output (TensorPlan.MixedConcat) one of whose inputs,
// quantized with qparams of its own (a Sigmoid's fixed [0, 1], a
// calibrated range), would keep fewer than mixedConcatLevels levels of the
// group's grid: the Concats, the data movement after them and the inputs
// that share their scale (a detector's boxes) all go; a note says why. The
// Concats then read their other inputs dequantized, and the model's
// outputs come out in float.
func floatMixedConcats(m *onnxgraph.Model, p *Plan) {
	drop := map[string]bool{}
	for _, t := range p.Tensors {
		if !t.MixedConcat || drop[t.Value] {
			continue
		}
		root := p.Root(t)
		if root == nil || !root.Spec.DType.IsInteger() || root.Params == nil || root.Params.Observed == nil {
			continue
		}
		v := m.Graph.Value(t.Value)
		if v == nil || v.Producer == nil {
			continue
		}
		out := root.Params.Observed
		grid := math.Exp2(float64(root.Spec.DType.Bits()))
		width := float64(out.Max) - float64(out.Min)
		if width <= 0 {
			continue
		}
		for _, in := range v.Producer.Inputs {
			if in == nil {
				continue
			}
			it := p.Tensor(in.Name)
			if it == nil || it.Role != Activation {
				continue
			}
			r := p.Root(it)
			if r == nil || r == root {
				continue
			}
			rg := r.Fixed
			if rg == nil && r.Params != nil {
				rg = r.Params.Observed
			}
			if rg == nil {
				continue
			}
			levels := grid * (float64(rg.Max) - float64(rg.Min)) / width
			if levels >= mixedConcatLevels {
				continue
			}
			p.Notes = append(p.Notes, fmt.Sprintf("value %q: output of Concat %q, which only graph outputs read: left in float with the values sharing its qparams (%q's group), since its input %q spans [%g, %g] of their [%g, %g] and one scale would keep it %.1f of %g levels",
				t.Value, v.Producer.Name, root.Value, in.Name, rg.Min, rg.Max, out.Min, out.Max, levels, grid))
			for _, s := range p.Tensors {
				if p.Root(s) == root {
					drop[s.Value] = true
				}
			}
			break
		}
	}
	// A layer reading a value that goes keeps its weight quantized and
	// its bias in float: the bias scale needs the input's.
	for _, s := range p.Tensors {
		if s.Role == Bias && drop[s.Input] {
			drop[s.Value] = true
		}
	}
	if len(drop) > 0 {
		p.Remove(drop)
	}
}

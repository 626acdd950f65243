package plan

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Check reports every broken invariant of the plan, one error per broken
// rule and tensor, naming the tensor, its first node and its config rule
// (nil when there are none):
//   - each value is planned once, for at least one node, and none is both
//     quantized and palettized;
//   - activations and weights have a spec, biases none, and a bias names a
//     planned activation input and weight;
//   - the axis and block size fit the spec's granularity as applied: axis
//     -1 per tensor, within the shape's rank otherwise (a weight's per
//     channel), a block size only per block along an axis (a per-block
//     spec may be applied per tensor or per channel when one block covers
//     the tensor or its input channels);
//   - a tensor sharing qparams reaches a planned root without a cycle, is
//     an activation as its root is, with the root's spec, and holds no
//     params of its own or the root's;
//   - params hold one scale and one zero point per tensor, channel or block
//     of the shape, scales finite and positive, zero points within the
//     dtype's integer range (0 for float dtypes and int32 biases);
//   - an int32 bias's scale is its input's scale × its weight's (per
//     channel, in float32), the input quantized per tensor;
//   - no tensor is quantized only for nodes the plan leaves in float;
//   - from stage qparams on, every tensor has its qparams (its own or its
//     root's).
func (p *Plan) Check() error {
	var errs []error
	bad := func(t *TensorPlan, format string, args ...any) {
		var where []string
		if len(t.Nodes) > 0 {
			where = append(where, fmt.Sprintf("node %q", t.Nodes[0]))
		}
		if t.Rule.File != "" || t.Rule.Path != "" {
			where = append(where, "rule "+t.Rule.String())
		}
		msg := fmt.Sprintf(format, args...)
		if len(where) > 0 {
			msg += " (" + strings.Join(where, ", ") + ")"
		}
		errs = append(errs, fmt.Errorf("plan: %s %q: %s", t.Role, t.Value, msg))
	}
	seen := make(map[string]bool, len(p.Tensors))
	for _, t := range p.Tensors {
		if seen[t.Value] {
			bad(t, "planned twice")
		}
		seen[t.Value] = true
	}
	floatNodes := map[string]bool{}
	for _, s := range p.Skipped {
		floatNodes[s.Node] = true
	}
	for _, pp := range p.Palettes {
		if seen[pp.Value] {
			errs = append(errs, fmt.Errorf("plan: weight %q is both palettized and quantized", pp.Value))
		}
	}
	for _, t := range p.Tensors {
		p.checkNodes(t, floatNodes, bad)
		p.checkRole(t, bad)
		p.checkSharing(t, bad)
		p.checkParams(t, bad)
	}
	return errors.Join(errs...)
}

type reporter func(t *TensorPlan, format string, args ...any)

func (p *Plan) checkNodes(t *TensorPlan, floatNodes map[string]bool, bad reporter) {
	if len(t.Nodes) == 0 {
		bad(t, "quantized for no node")
		return
	}
	for _, n := range t.Nodes {
		if !floatNodes[n] {
			return
		}
	}
	bad(t, "quantized only for nodes left in float %q", t.Nodes)
}

func (p *Plan) checkRole(t *TensorPlan, bad reporter) {
	if t.Role == Bias {
		if t.Spec != nil {
			bad(t, "an int32 bias with a spec (%s)", t.Spec)
		}
		if in := p.Tensor(t.Input); in == nil || in.Role != Activation {
			bad(t, "input %q is not a planned activation", t.Input)
		}
		if w := p.Tensor(t.Weight); w == nil || w.Role != Weight {
			bad(t, "weight %q is not a planned weight", t.Weight)
		}
		if t.Axis < -1 || t.Axis > 0 || t.BlockSize != 0 {
			bad(t, "axis %d block size %d, not a per-tensor or per-channel bias", t.Axis, t.BlockSize)
		}
		return
	}
	if t.Role != Activation && t.Role != Weight {
		bad(t, "unknown role")
		return
	}
	if t.Spec == nil {
		bad(t, "no spec")
		return
	}
	// The granularity as applied: a per-block spec whose one block covers
	// a tensor or its input channels is applied per tensor or per channel.
	switch g := t.Spec.Granularity.Type; {
	case t.Axis < -1 || t.Shape != nil && t.Axis >= len(t.Shape):
		bad(t, "axis %d of shape %v", t.Axis, t.Shape)
	case g == spec.PerTensor && t.Axis != -1:
		bad(t, "per tensor along axis %d", t.Axis)
	case g == spec.PerChannel && t.Axis < 0 && t.Role == Weight:
		bad(t, "a per channel weight without an axis")
	case t.BlockSize < 0 || t.BlockSize > 0 && (g != spec.PerBlock || t.Axis < 0):
		bad(t, "block size %d along axis %d under %s", t.BlockSize, t.Axis, g)
	}
	if t.Fixed != nil && (t.Role != Activation || !(t.Fixed.Min <= t.Fixed.Max)) {
		bad(t, "fixed range [%g, %g] on a %s", t.Fixed.Min, t.Fixed.Max, t.Role)
	}
}

func (p *Plan) checkSharing(t *TensorPlan, bad reporter) {
	if t.SharedWith == "" {
		return
	}
	root, steps := t, 0
	for root != nil && root.SharedWith != "" && steps <= len(p.Tensors) {
		root, steps = p.Tensor(root.SharedWith), steps+1
	}
	switch {
	case root == nil:
		bad(t, "shares qparams with %q, whose group root is not planned", t.SharedWith)
		return
	case root.SharedWith != "":
		bad(t, "shares qparams in a cycle through %q", t.SharedWith)
		return
	}
	if t.Role != Activation || root.Role != Activation {
		bad(t, "a %s sharing the qparams of %s %q: only activations share", t.Role, root.Role, root.Value)
	}
	if t.Spec != nil && !t.Spec.Equal(root.Spec) {
		bad(t, "spec %s differs from its group root %q's %s", t.Spec, root.Value, root.Spec)
	}
	if t.Params != nil && t.Params != root.Params {
		bad(t, "holds params of its own beside its group root %q's", root.Value)
	}
}

func (p *Plan) checkParams(t *TensorPlan, bad reporter) {
	q := t.Params
	if t.SharedWith != "" {
		if p.Stage >= QParamsDecided {
			if r := p.Root(t); r != nil && r.SharedWith == "" && r.Params == nil {
				bad(t, "no qparams at stage %s: its group root %q has none", p.Stage, r.Value)
			}
		}
		return
	}
	if q == nil {
		if p.Stage >= QParamsDecided {
			bad(t, "no qparams at stage %s", p.Stage)
		}
		return
	}
	if len(q.Scales) != len(q.ZeroPoints) {
		bad(t, "%d scales and %d zero points", len(q.Scales), len(q.ZeroPoints))
		return
	}
	if want, ok := t.paramCount(); ok && len(q.Scales) != want {
		bad(t, "%d scales, want %d for axis %d block size %d of shape %v", len(q.Scales), want, t.Axis, t.BlockSize, t.Shape)
	}
	for i, s := range q.Scales {
		if !(s > 0) || math.IsInf(float64(s), 0) {
			bad(t, "scale %d is %g, not finite and positive", i, s)
			break
		}
	}
	lo, hi := int64(0), int64(0)
	if t.Spec != nil {
		lo, hi = t.Spec.DType.Range()
	}
	for i, z := range q.ZeroPoints {
		if int64(z) < lo || int64(z) > hi {
			dt := "int32 bias"
			if t.Spec != nil {
				dt = t.Spec.DType.String()
			}
			bad(t, "zero point %d is %d, outside [%d, %d] of %s", i, z, lo, hi, dt)
			break
		}
	}
	if t.Role == Bias {
		p.checkBiasScale(t, bad)
	}
}

// paramCount is the number of scales t's granularity needs, when the
// shape is known (weights and biases, whose axis 0 is per channel;
// activations' is not).
func (t *TensorPlan) paramCount() (int, bool) {
	switch {
	case t.Axis < 0:
		return 1, true
	case t.Shape == nil || t.Axis >= len(t.Shape):
		return 0, false
	}
	return tensor.NumElements(quant.ParamShape(t.Shape, t.Axis, t.BlockSize)), true
}

// checkBiasScale checks bias scale = input scale × weight scale.
func (p *Plan) checkBiasScale(t *TensorPlan, bad reporter) {
	in, w := p.Root(p.Tensor(t.Input)), p.Root(p.Tensor(t.Weight))
	if in == nil || w == nil || in.Params == nil || w.Params == nil {
		bad(t, "qparams without those of input %q and weight %q", t.Input, t.Weight)
		return
	}
	if len(in.Params.Scales) != 1 {
		bad(t, "input %q is not quantized per tensor", t.Input)
		return
	}
	for c, s := range t.Params.Scales {
		if want := in.Params.Scales[0] * w.Params.Scales[c%len(w.Params.Scales)]; s != want {
			bad(t, "scale %d is %g, not input scale × weight scale = %g", c, s, want)
			return
		}
	}
}

package passes

import (
	"fmt"
	"math"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
)

// gatedTails are the table's gated-activation patterns with a tail
// (rescaled variants included) by name.
var gatedTails = func() map[string]*ops.Tail {
	out := map[string]*ops.Tail{}
	for _, p := range ops.Patterns() {
		if p.Tail != nil {
			out[p.Name] = p.Tail
		}
	}
	return out
}()

// markTails marks the inputs of the gated activations with a tail (a
// SiLU, matched as a pattern) that nothing else reads and that are not
// graph outputs (TensorPlan.SiLUFloor), for narrowToTails.
func markTails(m *onnxgraph.Model, p *Plan) {
	for _, pm := range FindPatterns(m, PatternsOps) {
		if gatedTails[pm.Pattern] == nil {
			continue
		}
		x := patternInput(pm)
		if x == nil || x.IsGraphOutput || !onlyReadBy(x, pm) {
			continue
		}
		if t := p.Tensor(x.Name); t != nil && t.Role == Activation {
			t.SiLUFloor = true
		}
	}
}

// narrowToTails raises the lower end of the range of every calibrated
// per-tensor activation that prepare marked as a SiLU's input (markTails,
// TensorPlan.SiLUFloor) to the input below which the SiLU's output rounds
// to 0 on its own grid, within a quarter of its step (ops.Tail): the inputs
// below cost nothing clipped, and the grid's levels go to the inputs the
// output shows. A detector's Conv before a SiLU reaches −90 where the
// SiLU's output grid stops telling inputs apart near −4.5. In a rescaled
// variant (the gate reads x times per-channel scales, as equalization
// writes it) the bound holds for the smallest scale, so for every channel.
// A range narrows only by more than one of its steps, so running the pass
// again changes nothing. It returns the note listing what it narrowed (""
// for nothing).
func narrowToTails(m *onnxgraph.Model, p *Plan) string {
	members := map[string]bool{}
	for _, t := range p.Tensors {
		if t.SharedWith != "" {
			members[p.Root(t).Value] = true
		}
	}
	var narrowed []string
	for _, pm := range FindPatterns(m, PatternsOps) {
		tail := gatedTails[pm.Pattern]
		if tail == nil {
			continue
		}
		scale := 1.0
		if strings.HasSuffix(pm.Pattern, ops.RescaledSuffix) {
			s, ok := smallestConst(m, pm.Nodes[0])
			if !ok || !(s > 0) {
				continue
			}
			scale = s
		}
		x := patternInput(pm)
		t, y := p.Tensor(x.Name), p.Tensor(pm.Root().Outputs[0].Name)
		if t == nil || y == nil || !t.SiLUFloor || members[t.Value] || !narrowable(t) {
			continue
		}
		g, ok := gridOf(p.Root(y))
		if !ok {
			continue
		}
		floor, ok := tail.Floor(scale * g / 4)
		if !ok {
			continue
		}
		floor /= scale
		qmin, qmax := t.Spec.DType.Range()
		s, zp := float64(t.Params.Scales[0]), float64(t.Params.ZeroPoints[0])
		lo, hi := (float64(qmin)-zp)*s, (float64(qmax)-zp)*s
		if floor <= lo+s || floor >= hi {
			continue
		}
		// The grid's lowest value must not lie above the floor: a value
		// clipped there would leave the activation a little off 0, the same
		// way for every clipped input. The zero point's rounding moves it by
		// up to half a step, so the range starts half a step lower.
		step := (hi - floor) / float64(qmax-qmin)
		sc, z, err := t.Spec.QParams([]float32{float32(floor - step/2)}, []float32{float32(hi)})
		if err != nil || !(sc[0] < t.Params.Scales[0]) || (float64(qmin)-float64(z[0]))*float64(sc[0]) > floor {
			continue
		}
		q := t.Params.Clone()
		q.Scales, q.ZeroPoints = sc, z
		t.Params, t.Floored = q, true
		// Floored tells compare --per-layer (through the written model's
		// metadata) to set this value against the float one clamped at its
		// grid's lowest value: the clipped inputs do not reach the SiLU.
		why := fmt.Sprintf("SiLU input: quantized from %.4g, below which the SiLU's quantized output is 0 (the inputs clipped there do not reach it)", floor)
		if t.Intrinsic != "" {
			why = t.Intrinsic + "; " + why
		}
		t.Intrinsic = why
		narrowed = append(narrowed, fmt.Sprintf("%q from %.4g to %.4g (%s)", t.Value, lo, floor, pm.Pattern))
	}
	if len(narrowed) == 0 {
		return ""
	}
	shown, more := narrowed, ""
	if len(shown) > 3 {
		shown, more = shown[:3], fmt.Sprintf(" and %d more", len(narrowed)-3)
	}
	return fmt.Sprintf("%d SiLU input(s) quantized from where the SiLU's quantized output leaves 0: %s%s",
		len(narrowed), strings.Join(shown, ", "), more)
}

// narrowable reports whether t is a calibrated per-tensor integer
// activation with its own qparams.
func narrowable(t *TensorPlan) bool {
	return t.Role == Activation && t.SharedWith == "" && t.Fixed == nil && !t.Headroom && !t.KeepMax &&
		t.Params != nil && len(t.Params.Scales) == 1 && t.Spec.DType.IsInteger()
}

// patternInput is the value from outside a match that its first node
// reads (a gated pattern's x).
func patternInput(pm *PatternMatch) *onnxgraph.Value {
	for _, in := range pm.Nodes[0].Inputs {
		if in != nil && !in.IsConst() {
			return in
		}
	}
	return nil
}

// onlyReadBy reports whether every reader of v is a node of the match.
func onlyReadBy(v *onnxgraph.Value, pm *PatternMatch) bool {
	for _, c := range v.Consumers {
		found := false
		for _, n := range pm.Nodes {
			found = found || n == c
		}
		if !found {
			return false
		}
	}
	return true
}

// smallestConst is the smallest value of node n's constant input.
func smallestConst(m *onnxgraph.Model, n *onnxgraph.Node) (float64, bool) {
	for _, in := range n.Inputs {
		if in != nil && in.IsConst() {
			f, _, err := constFloats(m, in)
			if err != nil || len(f) == 0 {
				return 0, false
			}
			s := math.Inf(1)
			for _, v := range f {
				s = math.Min(s, float64(v))
			}
			return s, true
		}
	}
	return 0, false
}

// gridOf is the step of a decided per-tensor integer grid.
func gridOf(t *TensorPlan) (float64, bool) {
	if t == nil || t.Params == nil || len(t.Params.Scales) != 1 || !t.Spec.DType.IsInteger() {
		return 0, false
	}
	return float64(t.Params.Scales[0]), true
}

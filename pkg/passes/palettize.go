package passes

import (
	"fmt"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/calibrate"

	"github.com/coreaiq/coreaiq/pkg/config"
)

// planPalettes adds the weights res palettizes to the plan. A palettized
// weight is not also quantized: its weight plan and the int32 bias that
// depends on the weight's scale are dropped (the bias stays float), each
// with a note.
func planPalettes(plan *Plan, res *config.PaletteResolution) {
	drop := map[string]bool{}
	for _, w := range res.Palettized() {
		p := &PalettePlan{Value: w.Value, Nodes: []string{w.Node.Name}, Rule: w.Rule, Palette: w.Palette,
			Shape: w.Shape, Axis: w.Axis, ScaleAxis: w.ScaleAxis, InputAxis: -1,
			FloatType: int32(w.Node.Inputs[w.Input].DType())}
		if w.Input == 1 && len(w.Node.Inputs) > 0 && w.Node.Inputs[0] != nil && !w.Node.Inputs[0].IsConst() {
			p.Input = w.Node.Inputs[0].Name
			p.InputAxis, p.ActivationAxis, p.Groups = w.InputAxis, w.ActivationAxis, w.Groups
		}
		plan.Palettes = append(plan.Palettes, p)
		if t := plan.Tensor(w.Value); t != nil && t.Role == Weight {
			drop[w.Value] = true
			plan.Notes = append(plan.Notes, fmt.Sprintf("weight %q is palettized (%s), not quantized by %s", w.Value, w.Rule, t.Rule))
		}
	}
	for _, t := range plan.Tensors {
		if t.Role == Bias && drop[t.Weight] {
			drop[t.Value] = true
			plan.Notes = append(plan.Notes, fmt.Sprintf("bias %q stays float: its weight %q is palettized, so there is no weight scale for an int32 bias", t.Value, t.Weight))
		}
	}
	if len(drop) > 0 {
		plan.Remove(drop)
	}
}

// momentRequests are the activations whose second moments data-aware
// palettization reads, with their channel axes, sorted by name.
func momentRequests(plan *Plan) []calibrate.TensorToObserve {
	axes := map[string]int{}
	for _, p := range plan.Palettes {
		if p.Input != "" && p.InputAxis >= 0 {
			axes[p.Input] = p.ActivationAxis
		}
	}
	names := make([]string, 0, len(axes))
	for n := range axes {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]calibrate.TensorToObserve, len(names))
	for i, n := range names {
		a := axes[n]
		out[i] = calibrate.TensorToObserve{Name: n, Moments: &a}
	}
	return out
}

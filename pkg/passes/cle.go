package passes

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

const crossLayerEqualizationName = "cross_layer_equalization"

// runWeightAlgorithms runs the data-free algorithms that change the float
// weights before prepare computes their qparams.
func runWeightAlgorithms(ctx context.Context, u *Unit) error {
	if u.Algorithms == nil || u.Algorithms.CrossLayerEqualization == nil {
		return nil
	}
	return equalize(ctx, u, u.Algorithms.CrossLayerEqualization)
}

// clePair is two Conv layers with a positively homogeneous activation (or
// none) between them: f(x/s) = f(x)/s for s > 0.
type clePair struct {
	first, second *onnxgraph.Node
	w1, w2, b1    *weightData
	// b2 is the second Conv's bias, loaded for high-bias absorption.
	b2 *weightData
	// scale is the product of the factors channel i of the first Conv's
	// output was divided by, and shift what high-bias absorption then
	// took off it (nil: nothing).
	scale []float64
	shift []float32
	// group geometry of the second Conv: input channel i is channel i%per
	// of group i/per, which feeds output channels [g·outPer, (g+1)·outPer).
	per, outPer int
	// others are further Convs reading the activation, besides second
	// (gated pairs only).
	others []cleSecond
	// gate is the gated activation between the Convs (SiLU, GELU,
	// HardSwish: x·g(x)); nil for a positively homogeneous one or none.
	gate *gatedMatch
}

// cleSecond is one Conv reading a pair's activation, with its geometry.
type cleSecond struct {
	node        *onnxgraph.Node
	w           *weightData
	per, outPer int
}

// readers are the pair's second Convs: second, then the others.
func (p *clePair) readers() []cleSecond {
	return append([]cleSecond{{node: p.second, w: p.w2, per: p.per, outPer: p.outPer}}, p.others...)
}

// weightData is a float32 initializer being edited.
type weightData struct {
	v     *onnxgraph.Value
	data  []float32
	shape []int
	// original is the data before the algorithm, for the report.
	original []float32
	// windows are the largest magnitudes of the weight's windows, kept
	// while equalization scales it (windowMaxima).
	windows []float32
}

// windowMaxima are the largest magnitudes of the weight's windows, one per
// (output channel, input channel) pair: the kernel positions of a Conv
// weight [O, C, k...]. Computed once, then kept up to date as equalization
// scales the weight: every element of a window is scaled by the same
// positive factor, rounded, and a rounded product or quotient grows with
// its operand, so the scaled window's largest magnitude is the old one
// scaled and rounded the same way, exactly. A sweep then reads the ranges
// of its rows and columns from them instead of from the whole weight.
func (w *weightData) windowMaxima() (maxima []float32, cols int) {
	cols = 1
	if len(w.shape) > 1 {
		cols = w.shape[1]
	}
	if w.windows == nil {
		rows := w.shape[0] * cols
		inner := len(w.data) / max(rows, 1)
		w.windows = make([]float32, rows)
		for r := range rows {
			w.windows[r] = absMax(w.data[r*inner : (r+1)*inner])
		}
	}
	return w.windows, cols
}

// equalize is cross-layer equalization (Nagel et al., "Data-Free
// Quantization Through Weight Equalization and Bias Correction", 2019):
// for each Conv → (Relu | LeakyRelu | none) → Conv pair, output channel i
// of the first Conv (weights and bias) is divided by
// s_i = sqrt(r1_i / r2_i) and input channel i of the second multiplied by
// it, r1_i and r2_i being the channel's largest weight magnitude in each.
// Both layers then have the same range per channel, √(r1_i·r2_i), and the
// float function is unchanged because the activation commutes with a
// positive scale. Chains are swept cfg.Iterations times, since equalizing
// one pair changes the ranges its neighbours see. Clip with an upper
// bound (Relu6) does not commute with scaling and ends a chain.
func equalize(ctx context.Context, u *Unit, cfg *config.CrossLayerEqualization) error {
	if err := ownModel(u); err != nil {
		return err
	}
	m := u.Model
	weights := map[string]*weightData{}
	load := func(v *onnxgraph.Value) (*weightData, error) {
		if w := weights[v.Name]; w != nil {
			return w, nil
		}
		d, shape, err := constFloats(m, v)
		if err != nil {
			return nil, err
		}
		w := &weightData{v: v, data: d, shape: shape, original: append([]float32(nil), d...)}
		weights[v.Name] = w
		return w, nil
	}
	var pairs []*clePair
	var gates map[string]*gatedMatch
	if cfg.Gated {
		gates = gatedActivations(m)
	}
	for _, n := range m.Graph.Nodes {
		seconds, why := clePartners(m, n)
		var gate *gatedMatch
		if len(seconds) == 0 && why == "" && gates != nil {
			seconds, gate, why = gatedPartners(m, n, gates)
		}
		if len(seconds) == 0 {
			if why != "" {
				u.Layers = append(u.Layers, LayerReport{Algorithm: crossLayerEqualizationName, Node: n.Name, OpType: n.OpType, Measure: "weights", Skipped: why})
			}
			continue
		}
		second, others := seconds[0], seconds[1:]
		if excluded := slices.IndexFunc(seconds, func(c *onnxgraph.Node) bool { return cfg.Excludes(c.Name) }); cfg.Excludes(n.Name) || excluded >= 0 {
			partner := second
			if excluded >= 0 {
				partner = seconds[excluded]
			}
			u.Layers = append(u.Layers, LayerReport{Algorithm: crossLayerEqualizationName, Node: n.Name, OpType: n.OpType, Measure: "weights",
				Skipped: fmt.Sprintf("pair with %q excluded by %s", partner.Name, cfg.Rule.Location())})
			continue
		}
		p := &clePair{first: n, second: second, gate: gate}
		var err error
		if p.w1, err = load(n.Inputs[1]); err != nil {
			return fmt.Errorf("%s: %s: %w", crossLayerEqualizationName, n, err)
		}
		if p.w2, err = load(second.Inputs[1]); err != nil {
			return fmt.Errorf("%s: %s: %w", crossLayerEqualizationName, second, err)
		}
		if len(n.Inputs) > 2 && n.Inputs[2] != nil {
			if p.b1, err = load(n.Inputs[2]); err != nil {
				return fmt.Errorf("%s: %s: %w", crossLayerEqualizationName, n, err)
			}
		}
		channels := p.w1.shape[0]
		geometry, lines := cleGeometry(second, p.w2, channels)
		if !lines || (p.b1 != nil && len(p.b1.data) != channels) {
			u.Layers = append(u.Layers, LayerReport{Algorithm: crossLayerEqualizationName, Node: n.Name, OpType: n.OpType, Measure: "weights",
				Skipped: fmt.Sprintf("channels of %q do not line up with %q's weight %v", n.Name, second.Name, p.w2.shape)})
			continue
		}
		p.per, p.outPer = geometry.per, geometry.outPer
		lined := true
		for _, o := range others {
			w, err := load(o.Inputs[1])
			if err != nil {
				return fmt.Errorf("%s: %s: %w", crossLayerEqualizationName, o, err)
			}
			sc, ok := cleGeometry(o, w, channels)
			if !ok {
				u.Layers = append(u.Layers, LayerReport{Algorithm: crossLayerEqualizationName, Node: n.Name, OpType: n.OpType, Measure: "weights",
					Skipped: fmt.Sprintf("channels of %q do not line up with %q's weight %v", n.Name, o.Name, w.shape)})
				lined = false
				break
			}
			p.others = append(p.others, sc)
		}
		if !lined {
			continue
		}
		p.scale = make([]float64, channels)
		for i := range p.scale {
			p.scale[i] = 1
		}
		pairs = append(pairs, p)
	}
	pairs, notes, err := selectGated(ctx, u, cfg, pairs)
	if err != nil {
		return err
	}
	for range cfg.Iterations {
		changed := false
		for _, p := range pairs {
			changed = p.equalize() || changed
		}
		if !changed {
			break // every channel balanced: more sweeps change nothing
		}
	}
	if cfg.HighBiasAbsorption {
		for _, p := range pairs {
			if p.gate != nil {
				continue // the gate does not commute with a shift
			}
			note, err := p.absorbHighBias(m, u.batchNormFloors[p.first.Outputs[0].Name], load)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", crossLayerEqualizationName, p.second, err)
			}
			notes[p.first.Name] = note
		}
	}
	for _, p := range pairs {
		// The first Conv's output, and the activation's after it, are
		// divided by scale and shifted down; the second Conv undoes both.
		scale := make([]float32, len(p.scale))
		for i, f := range p.scale {
			scale[i] = float32(f)
		}
		u.noteRescale(p.first.Outputs[0].Name, 1, scale, p.shift)
		if between := p.second.Inputs[0]; between != p.first.Outputs[0] {
			u.noteRescale(between.Name, 1, scale, p.shift)
		}
	}
	reported := map[string]bool{}
	for _, p := range pairs {
		ws := []*weightData{p.w1, p.w2, p.b1, p.b2}
		for _, o := range p.others {
			ws = append(ws, o.w)
		}
		for _, w := range ws {
			if w == nil || weights[w.v.Name] == nil {
				continue
			}
			if err := setConst(m, w.v, w.data, w.shape); err != nil {
				return fmt.Errorf("%s: %w", crossLayerEqualizationName, err)
			}
			delete(weights, w.v.Name)
		}
		for _, n := range append([]*onnxgraph.Node{p.first}, readerNodes(p)...) {
			if reported[n.Name] {
				continue
			}
			reported[n.Name] = true
			u.pendingWeightReports = append(u.pendingWeightReports, pendingWeightReport{
				algorithm: crossLayerEqualizationName, node: n, weight: n.Inputs[1].Name, before: weightsOf(pairs, n.Inputs[1].Name), note: notes[n.Name]})
		}
	}
	return insertGateRescales(u, pairs)
}

// readerNodes are the pair's second Convs.
func readerNodes(p *clePair) []*onnxgraph.Node {
	var out []*onnxgraph.Node
	for _, r := range p.readers() {
		out = append(out, r.node)
	}
	return out
}

// weightsOf finds the original data of a weight among the pairs.
func weightsOf(pairs []*clePair, name string) *weightData {
	for _, p := range pairs {
		for _, w := range []*weightData{p.w1, p.w2} {
			if w.v.Name == name {
				return w
			}
		}
		for _, o := range p.others {
			if o.w.v.Name == name {
				return o.w
			}
		}
	}
	return nil
}

// equalize scales one pair's shared channels once and reports whether it
// changed any. The ranges come from
// the weights' window maxima (windowMaxima), which the scaling keeps
// exact; the scaling itself goes over each weight once, in memory order
// (a channel's scale changes its row of the first weight and its column
// of the second only, so the channels are independent).
func (p *clePair) equalize() (changed bool) {
	channels := p.w1.shape[0]
	per1 := len(p.w1.data) / channels
	m1, cols1 := p.w1.windowMaxima()
	r2 := make([]float32, channels)
	for _, sc := range p.readers() {
		m2, cols := sc.w.windowMaxima()
		for o := range sc.w.shape[0] {
			g := o / sc.outPer
			ranges, row := r2[g*sc.per:g*sc.per+cols], m2[o*cols:(o+1)*cols]
			for j, m := range row {
				// max(ranges[j], m) for the non-negative maxima, NaN kept,
				// without the builtin's signed-zero handling.
				if r := ranges[j]; r == r && !(m <= r) {
					ranges[j] = m
				}
			}
		}
	}
	s := make([]float32, channels)
	for i := range channels {
		// The maxima are non-negative: their largest magnitude is their
		// largest, taken by the vector kernel on long rows.
		r1 := absMax(m1[i*cols1 : (i+1)*cols1])
		if r1 == 0 || r2[i] == 0 {
			continue
		}
		s[i] = float32(math.Sqrt(float64(r1) / float64(r2[i])))
		if s[i] == 1 {
			continue // balanced already: scaling by one changes nothing
		}
		changed = true
		for k := i * per1; k < (i+1)*per1; k++ {
			p.w1.data[k] /= s[i]
		}
		for j := i * cols1; j < (i+1)*cols1; j++ {
			m1[j] /= s[i]
		}
		if p.b1 != nil {
			p.b1.data[i] /= s[i]
		}
		p.scale[i] *= float64(s[i])
	}
	for _, sc := range p.readers() {
		m2, cols := sc.w.windowMaxima()
		inner2 := len(sc.w.data) / (sc.w.shape[0] * cols)
		for o := range sc.w.shape[0] {
			g := o / sc.outPer
			for j := range cols {
				si := s[g*sc.per+j]
				if si == 0 || si == 1 {
					continue
				}
				base := (o*cols + j) * inner2
				for k := base; k < base+inner2; k++ {
					sc.w.data[k] *= si
				}
				m2[o*cols+j] *= si
			}
		}
	}
	return changed
}

// absorbHighBias is high-bias absorption (Nagel et al. 2019): channel i
// of the first Conv's output, before the activation, stays above
// c_i = max(0, β_i − 3|γ_i|)/scale_i (its folded BatchNorm's floor, scaled
// as equalization scaled the channel), and Relu, LeakyRelu, Clip(0, ∞)
// and no activation all satisfy f(x − c) = f(x) − c for x ≥ c ≥ 0. So c_i
// leaves the first Conv's bias and W2·c enters the second's: the float
// function is unchanged wherever x ≥ c, and the activation's range, which
// quantization covers, shrinks by c. A second Conv that pads its input
// would see c missing at the borders and is left alone. It returns the
// report's note: what moved, or why nothing did.
func (p *clePair) absorbHighBias(m *onnxgraph.Model, floors []float32, load func(*onnxgraph.Value) (*weightData, error)) (string, error) {
	channels := p.w1.shape[0]
	switch {
	case len(p.others) > 0:
		return fmt.Sprintf("no high-bias absorption: %q is read by %s", p.second.Inputs[0].Name, readerNames(p)), nil
	case floors == nil:
		return fmt.Sprintf("no high-bias absorption: %q comes from no folded BatchNormalization, whose statistics bound it", p.first.Outputs[0].Name), nil
	case len(floors) != channels || p.b1 == nil:
		return fmt.Sprintf("no high-bias absorption: %q's folded BatchNormalization does not match its %d channels", p.first.Name, channels), nil
	case convPads(p.second):
		return fmt.Sprintf("no high-bias absorption: %s pads its input, where the absorbed constant would be missing", p.second), nil
	case len(p.second.Inputs) < 3 || p.second.Inputs[2] == nil:
		return fmt.Sprintf("no high-bias absorption: %s has no bias to take the constant", p.second), nil
	case initializerIndex(m, p.second.Inputs[2]) < 0 || len(p.second.Inputs[2].Consumers) != 1:
		return fmt.Sprintf("no high-bias absorption: %s's bias is not an initializer of its own", p.second), nil
	}
	b2, err := load(p.second.Inputs[2])
	if err != nil {
		return "", err
	}
	if len(b2.data) != p.w2.shape[0] {
		return fmt.Sprintf("no high-bias absorption: %s's bias has %d values for %d outputs", p.second, len(b2.data), p.w2.shape[0]), nil
	}
	p.b2 = b2
	inner2 := len(p.w2.data) / (p.w2.shape[0] * p.w2.shape[1])
	moved, largest := 0, float32(0)
	for i := range channels {
		c := float32(float64(floors[i]) / p.scale[i])
		if !(c > 0) {
			continue
		}
		moved++
		largest = max(largest, c)
		p.b1.data[i] -= c
		if p.shift == nil {
			p.shift = make([]float32, channels)
		}
		p.shift[i] = c
		g, j := i/p.per, i%p.per
		for o := g * p.outPer; o < (g+1)*p.outPer; o++ {
			base := (o*p.w2.shape[1] + j) * inner2
			var sum float32
			for _, w := range p.w2.data[base : base+inner2] {
				sum += w
			}
			b2.data[o] += c * sum
		}
	}
	if moved == 0 {
		return "no high-bias absorption: no channel's BatchNorm floor β − 3|γ| is above zero", nil
	}
	return fmt.Sprintf("high-bias absorption: %d of %d channels moved up to %.4g into %s's bias (BatchNorm floors β − 3|γ|)", moved, channels, largest, p.second), nil
}

// convPads reports whether Conv n pads its input.
func convPads(n *onnxgraph.Node) bool {
	if a := n.Attr("auto_pad"); a != nil && string(a.GetS()) != "NOTSET" && string(a.GetS()) != "VALID" {
		return true
	}
	if a := n.Attr("pads"); a != nil {
		for _, v := range a.GetInts() {
			if v != 0 {
				return true
			}
		}
	}
	return false
}

func absMax(x []float32) float32 {
	if len(x) >= 64 {
		// The vector kernel's extremes: the same value as the loop below
		// for finite data; short slices (a kernel window) cost more in
		// the call than in the loop.
		if lo, hi, nan, inf := kernels.FiniteMinMax(x); nan == 0 && inf == 0 {
			return max(0, -lo, hi)
		}
	}
	m := float32(0)
	for _, v := range x {
		m = max(m, math.Float32frombits(math.Float32bits(v)&^(1<<31)))
	}
	return m
}

// clePartners returns the Convs that read n's output through at most one
// positively homogeneous activation, when n and they form an equalizable
// pair (every reader of the activation is such a Conv); why says what
// stops a Conv → activation → Conv chain that is not one ("" when n
// starts no such chain).
func clePartners(m *onnxgraph.Model, n *onnxgraph.Node) ([]*onnxgraph.Node, string) {
	if !isPlainConv(m, n) {
		return nil, ""
	}
	v := n.Outputs[0]
	if len(v.Consumers) == 0 || v.IsGraphOutput {
		return nil, ""
	}
	if next := v.Consumers[0]; len(v.Consumers) == 1 && next.Domain == "" && next.OpType != "Conv" {
		if !homogeneous(m, next) {
			if next.OpType == "Clip" && len(next.Outputs[0].Consumers) == 1 && next.Outputs[0].Consumers[0].OpType == "Conv" {
				return nil, fmt.Sprintf("%s has an upper bound: scaling its input would change its output", next)
			}
			return nil, ""
		}
		v = next.Outputs[0]
		if len(v.Consumers) == 0 || v.IsGraphOutput {
			return nil, ""
		}
	}
	seconds := convReaders(m, v)
	if len(seconds) == 0 {
		return nil, ""
	}
	if why := pairBlocker(m, n, seconds); why != "" {
		return nil, why
	}
	return seconds, ""
}

// convReaders are v's readers when every one is a plain Conv reading it as
// its input, else nil.
func convReaders(m *onnxgraph.Model, v *onnxgraph.Value) []*onnxgraph.Node {
	var seconds []*onnxgraph.Node
	for _, c := range v.Consumers {
		if !isPlainConv(m, c) || c.Inputs[0] != v || slices.Contains(seconds, c) {
			return nil
		}
		seconds = append(seconds, c)
	}
	return seconds
}

// pairBlocker says why Conv n and the Convs reading its activation cannot
// be equalized, "" when they can: rescaling edits their weights and n's
// bias, which must be theirs alone.
func pairBlocker(m *onnxgraph.Model, n *onnxgraph.Node, seconds []*onnxgraph.Node) string {
	for _, c := range append([]*onnxgraph.Node{n}, seconds...) {
		if len(c.Inputs[1].Consumers) != 1 {
			return "a weight is shared with other nodes"
		}
	}
	if len(n.Inputs) > 2 && n.Inputs[2] != nil && (initializerIndex(m, n.Inputs[2]) < 0 || len(n.Inputs[2].Consumers) != 1) {
		return "the bias is not an initializer of its own"
	}
	return ""
}

// isPlainConv reports whether n is a Conv of the default domain with a
// float32 initializer as weight.
func isPlainConv(m *onnxgraph.Model, n *onnxgraph.Node) bool {
	return n.Domain == "" && n.OpType == "Conv" && len(n.Inputs) >= 2 && n.Inputs[1] != nil && n.Inputs[1].IsConst() &&
		initializerIndex(m, n.Inputs[1]) >= 0 && len(n.Outputs) == 1
}

// homogeneous reports whether n computes f with f(x·s) = f(x)·s for s > 0:
// Relu, LeakyRelu, and a Clip with lower bound 0 and no upper bound.
func homogeneous(m *onnxgraph.Model, n *onnxgraph.Node) bool {
	if n.Domain != "" || len(n.Outputs) != 1 {
		return false
	}
	switch n.OpType {
	case "Relu", "LeakyRelu":
		return true
	case "Clip":
		lo, hi := clipBounds(m, n)
		return lo != nil && *lo == 0 && hi == nil
	}
	return false
}

func attrInt(n *onnxgraph.Node, name string, def int64) int64 {
	if a := n.Attr(name); a != nil {
		return a.GetI()
	}
	return def
}

// pendingWeightReport is a weight an algorithm changed before prepare:
// its report needs the planned spec, known after prepare.
type pendingWeightReport struct {
	algorithm string
	node      *onnxgraph.Node
	weight    string
	before    *weightData
	note      string
}

// reportWeights fills in the reports of weights changed before prepare:
// the weight's quantize-dequantize SQNR under its planned spec, for the
// original and the changed data.
func reportWeights(u *Unit) error {
	for _, r := range u.pendingWeightReports {
		rep := LayerReport{Algorithm: r.algorithm, Node: r.node.Name, OpType: r.node.OpType, Measure: "weights", Note: r.note}
		tp := u.Plan.Tensor(r.weight)
		if tp == nil || tp.Role != Weight || tp.Params == nil || r.before == nil {
			rep.Skipped = fmt.Sprintf("weight %q is not quantized", r.weight)
			u.Layers = append(u.Layers, rep)
			continue
		}
		before, err := weightSQNR(r.before.original, r.before.shape, tp, u.Prepare, nil)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", r.algorithm, r.node, err)
		}
		after, err := weightSQNR(r.before.data, r.before.shape, tp, u.Prepare, tp.Params)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", r.algorithm, r.node, err)
		}
		rep.Before, rep.After = before, after
		u.Layers = append(u.Layers, rep)
	}
	u.pendingWeightReports = nil
	return nil
}

// weightSQNR is the SQNR of quantizing data as the plan quantizes the
// weight tp: with params, or with the params prepare would compute.
func weightSQNR(data []float32, shape []int, tp *TensorPlan, opts PrepareOptions, params *Params) (DB, error) {
	if params == nil {
		var err error
		if params, err = weightParams(data, shape, tp.Axis, tp.BlockSize, tp.Spec, weightClipping(tp.Spec, opts)); err != nil {
			return 0, err
		}
	}
	fq, err := finalize.FakeQuantize(data, shape, tp.Axis, tp.BlockSize, tp.Spec, params)
	if err != nil {
		return 0, err
	}
	var sig, noise float64
	for i, x := range data {
		d := float64(x) - float64(fq[i])
		sig += float64(x) * float64(x)
		noise += d * d
	}
	return sqnrDB(sig, noise), nil
}

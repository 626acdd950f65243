package passes

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Gated activations (SiLU, GELU, HardSwish: x·g(x)) do not commute with a
// per-channel scale, so cross-layer equalization cannot move a scale
// through them as it does through Relu. It can when the gate reads x
// multiplied back: with the first Conv's channel i divided by s_i, the
// activation's input is x/s, and x/s · g(s·(x/s)) = (x·g(x))/s, which the
// second Convs undo. The Mul by s before the gate is one elementwise op
// more in the model (it runs in float inside the gated pattern, which
// prepare quantizes at its boundary), so a pair is equalized only where
// the activation's quantization noise, estimated at the second Convs,
// falls by cfg.GatedMinGain dB or more.

// gatedActivations maps the input value of every gated-activation pattern
// match (ops.Pattern.GateReads; not the rescaled variants, which an
// equalization already wrote) to its match.
func gatedActivations(m *onnxgraph.Model) map[string]*gatedMatch {
	gates := map[string][]int{}
	for _, p := range ops.Patterns() {
		if len(p.GateReads) > 0 {
			gates[p.Name] = p.GateReads
		}
	}
	out := map[string]*gatedMatch{}
	for _, pm := range FindPatterns(m, PatternsOps) {
		reads, ok := gates[pm.Pattern]
		if !ok {
			continue
		}
		// The gate's first read is the pattern's first statement (the table's
		// GateReads), whose variable input is x.
		if x := patternInput(pm); x != nil && reads[0] == 0 {
			out[x.Name] = &gatedMatch{PatternMatch: pm, x: x, gateReads: reads}
		}
	}
	// The ops themselves (HardSwish from opset 14, Gelu from opset 20):
	// equalizing one writes it out as its pattern's rescaled variant.
	for _, n := range m.Graph.Nodes {
		if n.Domain != "" || len(n.Inputs) == 0 || n.Inputs[0] == nil || len(n.Outputs) != 1 || out[n.Inputs[0].Name] != nil {
			continue
		}
		switch {
		case n.OpType == "HardSwish":
		case n.OpType == "Gelu" && attrString(n, "approximate", "none") == "none":
		default:
			continue
		}
		out[n.Inputs[0].Name] = &gatedMatch{PatternMatch: &PatternMatch{Pattern: n.OpType, Nodes: []*onnxgraph.Node{n}}, x: n.Inputs[0], op: n}
	}
	return out
}

func attrString(n *onnxgraph.Node, name, def string) string {
	if a := n.Attr(name); a != nil {
		return string(a.GetS())
	}
	return def
}

// gatedMatch is a gated activation's match with its input x and the
// statements that read x for the gate.
type gatedMatch struct {
	*PatternMatch
	x         *onnxgraph.Value
	gateReads []int
	// op is a HardSwish or Gelu node standing for its written-out form
	// (nil for a pattern match).
	op *onnxgraph.Node
}

// gatedPartners returns the Convs that read the gated activation n's
// output goes through, when n, the activation and they form an
// equalizable gated pair: n's output is read by the activation's nodes
// only, and the activation's output by Convs only (as their input).
func gatedPartners(m *onnxgraph.Model, n *onnxgraph.Node, gates map[string]*gatedMatch) ([]*onnxgraph.Node, *gatedMatch, string) {
	if !isPlainConv(m, n) {
		return nil, nil, ""
	}
	v := n.Outputs[0]
	g := gates[v.Name]
	if g == nil || v.IsGraphOutput {
		return nil, nil, ""
	}
	for _, c := range v.Consumers {
		if !slices.Contains(g.Nodes, c) {
			return nil, nil, ""
		}
	}
	a := g.Root().Outputs[0]
	if a == nil || a.IsGraphOutput || len(a.Consumers) == 0 {
		return nil, nil, ""
	}
	seconds := convReaders(m, a)
	if len(seconds) == 0 {
		return nil, nil, ""
	}
	if why := pairBlocker(m, n, seconds); why != "" {
		return nil, nil, why
	}
	return seconds, g, ""
}

// cleGeometry returns a reader's group geometry for channels channels of
// the first Conv, or false when they do not line up.
func cleGeometry(second *onnxgraph.Node, w *weightData, channels int) (cleSecond, bool) {
	group := int(attrInt(second, "group", 1))
	if len(w.shape) < 2 || group <= 0 || channels%group != 0 || w.shape[1]*group != channels || w.shape[0]%group != 0 {
		return cleSecond{}, false
	}
	return cleSecond{node: second, w: w, per: channels / group, outPer: w.shape[0] / group}, true
}

// selectGated keeps the gated pairs worth their Mul: each one's
// activation ranges (the largest magnitude of every channel over the
// calibration samples) set the estimate (gatedGain) of the equalization's
// first step. Without calibration data the gated pairs are left alone.
// It returns the pairs kept (the others untouched) and the gated pairs'
// report notes by first Conv.
func selectGated(ctx context.Context, u *Unit, cfg *config.CrossLayerEqualization, pairs []*clePair) ([]*clePair, map[string]string, error) {
	var gated []*clePair
	for _, p := range pairs {
		if p.gate != nil {
			gated = append(gated, p)
		}
	}
	notes := map[string]string{}
	if len(gated) == 0 {
		return pairs, notes, nil
	}
	drop := map[*clePair]string{}
	if u.Data == nil || u.Data.Source == nil {
		for _, p := range gated {
			drop[p] = fmt.Sprintf("gated activation %s: choosing the pairs worth a Mul before the gate needs calibration data", p.gate.Pattern)
		}
	} else {
		ranges := map[string][]float64{}
		var taps []string
		for _, p := range gated {
			a := p.gate.Root().Outputs[0].Name
			taps = append(taps, a)
			ranges[a] = make([]float64, p.w1.shape[0])
		}
		var tapErr error
		tap := func(name string, t *tensor.Tensor) {
			r := ranges[name]
			if r == nil || tapErr != nil {
				return
			}
			f, err := t.AsFloat32()
			if err != nil || len(t.Shape) < 2 || t.Shape[1] != len(r) {
				tapErr = fmt.Errorf("value %q of shape %v: want %d channels on axis 1", name, t.Shape, len(r))
				return
			}
			inner := tensor.NumElements(t.Shape[2:])
			for i, x := range f {
				c := (i / max(inner, 1)) % len(r)
				r[c] = math.Max(r[c], math.Abs(float64(x)))
			}
		}
		if err := u.Data.forEachBatch(ctx, u.Model, cfg.Samples, taps, tap, func() error { return tapErr }); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", crossLayerEqualizationName, err)
		}
		for _, p := range gated {
			gain := p.gatedGain(ranges[p.gate.Root().Outputs[0].Name])
			if gain < cfg.GatedMinGain {
				drop[p] = fmt.Sprintf("gated activation %s: equalizing would lower its quantization noise at %s by an estimated %.1f dB, under the %.3g dB a Mul before the gate must buy (gated_min_gain)", p.gate.Pattern, readerNames(p), gain, cfg.GatedMinGain)
				continue
			}
			notes[p.first.Name] = fmt.Sprintf("gated activation %s: a Mul by the channels' scales feeds its gate; its quantization noise at %s estimated %.1f dB lower", p.gate.Pattern, readerNames(p), gain)
		}
	}
	var kept []*clePair
	for _, p := range pairs {
		if why, ok := drop[p]; ok {
			u.Layers = append(u.Layers, LayerReport{Algorithm: crossLayerEqualizationName, Node: p.first.Name, OpType: p.first.OpType, Measure: "weights", Skipped: why})
			continue
		}
		kept = append(kept, p)
	}
	return kept, notes, nil
}

// readerNames names the pair's second Convs for the report.
func readerNames(p *clePair) string {
	var names []string
	for _, r := range p.readers() {
		names = append(names, fmt.Sprintf("%q", r.node.Name))
	}
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%s and %s", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// gatedGain estimates, in dB, how much one equalization step lowers the
// quantization noise of the pair's activation as the second Convs see it.
// A per-tensor grid has the step of the widest channel, max_i R_i, and
// channel i's noise reaches the readers through their weights on it, whose
// energy is E_i; after channel i is divided by s_i = √(r1_i/r2_i) the step
// is max_i R_i/s_i and the energy s_i²·E_i. The float output does not
// change, so the gain is the ratio of the noise powers:
// (max R)²·ΣE / ((max R/s)²·Σs²E).
func (p *clePair) gatedGain(ranges []float64) float64 {
	channels := p.w1.shape[0]
	per1 := len(p.w1.data) / channels
	r2 := make([]float64, channels)
	energy := make([]float64, channels)
	for _, sc := range p.readers() {
		cols := sc.w.shape[1]
		inner := len(sc.w.data) / (sc.w.shape[0] * cols)
		for o := range sc.w.shape[0] {
			g := o / sc.outPer
			for j := range cols {
				i := g*sc.per + j
				for _, w := range sc.w.data[(o*cols+j)*inner : (o*cols+j+1)*inner] {
					r2[i] = math.Max(r2[i], math.Abs(float64(w)))
					energy[i] += float64(w) * float64(w)
				}
			}
		}
	}
	var maxR, maxRS, before, after float64
	for i := range channels {
		s := 1.0
		if r1 := float64(absMax(p.w1.data[i*per1 : (i+1)*per1])); r1 > 0 && r2[i] > 0 {
			s = math.Sqrt(r1 / r2[i])
		}
		maxR = math.Max(maxR, ranges[i])
		maxRS = math.Max(maxRS, ranges[i]/s)
		before += energy[i]
		after += s * s * energy[i]
	}
	if maxR == 0 || maxRS == 0 || before == 0 || after == 0 {
		return 0
	}
	return 10 * math.Log10(maxR*maxR*before/(maxRS*maxRS*after))
}

// insertGateRescales writes, for each equalized gated pair, the Mul by the
// channels' scales that its gate reads instead of the first Conv's
// output: a constant of shape [1, C, 1, ...] and a node right after the
// first Conv. The model is rebuilt once for all of them.
func insertGateRescales(u *Unit, pairs []*clePair) error {
	var gated []*clePair
	for _, p := range pairs {
		if p.gate != nil {
			gated = append(gated, p)
		}
	}
	if len(gated) == 0 {
		return nil
	}
	m := u.Model
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	taken := map[string]bool{}
	for _, v := range m.Graph.Values() {
		taken[v.Name] = true
	}
	for _, n := range m.Graph.AllNodes() {
		taken[n.Name] = true
	}
	unique := func(name string) string {
		for i := 1; taken[name]; i++ {
			name = fmt.Sprintf("%s_%d", name, i)
		}
		taken[name] = true
		return name
	}
	after := map[int][]*onnxpb.NodeProto{}
	replaced := map[int]bool{}
	for _, p := range gated {
		// The constants take the type the first Conv computes in (its
		// weight's): Mul and the written-out gates want one type.
		dt := tensor.DType(p.w1.v.Const.GetDataType())
		scalar := func(name string, v float32) (string, error) {
			name = unique(name)
			c, err := floatConst(name, []float32{v}, nil, dt)
			if err != nil {
				return "", err
			}
			g.Initializer = append(g.Initializer, c)
			return name, nil
		}
		y := p.first.Outputs[0].Name
		scale := make([]float32, len(p.scale))
		for i, f := range p.scale {
			scale[i] = float32(f)
		}
		shape := make([]int, len(p.w1.shape))
		for i := range shape {
			shape[i] = 1
		}
		shape[1] = len(scale)
		constName, outName := unique(y+"_gate_scale"), unique(y+"_gate_input")
		c, err := floatConst(constName, scale, shape, dt)
		if err != nil {
			return fmt.Errorf("%s: %w", crossLayerEqualizationName, err)
		}
		g.Initializer = append(g.Initializer, c)
		after[p.first.Index] = append(after[p.first.Index], &onnxpb.NodeProto{
			Name: proto.String(unique(p.first.Name + "_gate_rescale")), OpType: proto.String("Mul"),
			Input: []string{y, constName}, Output: []string{outName}})
		if op := p.gate.op; op != nil {
			nodes, err := writtenOut(op, y, outName, unique, scalar)
			if err != nil {
				return err
			}
			replaced[op.Index] = true
			after[op.Index] = append(after[op.Index], nodes...)
			continue
		}
		for _, k := range p.gate.gateReads {
			np := g.Node[p.gate.Nodes[k].Index]
			for j, in := range np.Input {
				if in == y {
					np.Input[j] = outName
				}
			}
		}
	}
	var nodes []*onnxpb.NodeProto
	for i, np := range g.Node {
		if !replaced[i] {
			nodes = append(nodes, np)
		}
		nodes = append(nodes, after[i]...)
	}
	g.Node = nodes
	rebuilt, err := m.Derive(out, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", crossLayerEqualizationName, err)
	}
	rebuilt.Path = m.Path
	u.Model, u.ownsModel = rebuilt, true
	return nil
}

// writtenOut is a HardSwish or Gelu node op written out as its gated
// pattern's rescaled variant: the gate reads gateIn (x times the
// equalization's scales), the product reads x, and the last node keeps the
// op's name and output.
func writtenOut(op *onnxgraph.Node, x, gateIn string, unique func(string) string, scalar func(string, float32) (string, error)) ([]*onnxpb.NodeProto, error) {
	out := op.Outputs[0].Name
	node := func(opType, name string, inputs []string, output string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(opType), Input: inputs, Output: []string{output}, Attribute: attrs}
	}
	inner := func(suffix string) string { return unique(op.Name + "/" + suffix) }
	switch op.OpType {
	case "HardSwish":
		// HardSwish(x) = x · max(0, min(1, x/6 + 1/2)) = x · HardSigmoid(x; 1/6, 1/2).
		h := inner("hard_sigmoid")
		return []*onnxpb.NodeProto{
			node("HardSigmoid", h, []string{gateIn}, h,
				&onnxpb.AttributeProto{Name: proto.String("alpha"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(1.0 / 6)},
				&onnxpb.AttributeProto{Name: proto.String("beta"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(0.5)}),
			node("Mul", op.Name, []string{x, h}, out),
		}, nil
	case "Gelu":
		// Gelu(x) = x · (1 + erf(x/√2)) · ½, as the gelu pattern writes it.
		sqrt2, err := scalar(op.Name+"/sqrt2", float32(math.Sqrt2))
		if err != nil {
			return nil, err
		}
		one, err := scalar(op.Name+"/one", 1)
		if err != nil {
			return nil, err
		}
		half, err := scalar(op.Name+"/half", 0.5)
		if err != nil {
			return nil, err
		}
		a, e, u, gx := inner("div"), inner("erf"), inner("add"), inner("mul")
		return []*onnxpb.NodeProto{
			node("Div", a, []string{gateIn, sqrt2}, a),
			node("Erf", e, []string{a}, e),
			node("Add", u, []string{e, one}, u),
			node("Mul", gx, []string{x, u}, gx),
			node("Mul", op.Name, []string{gx, half}, out),
		}, nil
	}
	return nil, fmt.Errorf("%s: %s has no written-out form", crossLayerEqualizationName, op)
}

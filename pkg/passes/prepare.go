package passes

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// WeightClipping selects how weight ranges are computed in prepare.
type WeightClipping uint8

const (
	// ClipMinMax uses each group's min and max (no clipping).
	ClipMinMax WeightClipping = iota
	// ClipMSE shrinks each group's range to the one that minimises the
	// squared quantization error, calibrate.WeightMSERange (also chosen per
	// tensor by the mse calculator).
	ClipMSE
)

// PrepareOptions tune prepare. The zero value is the default behaviour.
type PrepareOptions struct {
	// ConcatOwnQParams gives each Concat input its own qparams. By default
	// the inputs share the output's (coreai-opt's concat pattern ties them
	// to one observer; ONNX Runtime's QLinearConcat wants one scale).
	ConcatOwnQParams bool
	// NoOpIntrinsics turns off the op-intrinsic rules (intrinsicOf): the
	// outputs of Relu and Clip then keep the spec's qscheme and calibrated
	// range, and Softmax, Sigmoid and Tanh keep the spec's qscheme on their
	// fixed range.
	NoOpIntrinsics bool
	// NoHeadroom keeps the calibrated range of the values whose largest
	// entries decide a Softmax's or an ArgMax's output (TensorPlan.Headroom).
	NoHeadroom bool
	// NoMixedConcat quantizes a model-ending Concat whatever its inputs'
	// ranges (TensorPlan.MixedConcat).
	NoMixedConcat bool
	// NoSiLUFloor keeps the calculator's range for a SiLU's input
	// (TensorPlan.SiLUFloor).
	NoSiLUFloor bool
	// NoWideHeadroom keeps the calibrated range of activations on grids of
	// 16 bits or more (TensorPlan.WideHeadroom).
	NoWideHeadroom bool
	// WeightClipping applies to every weight; a weight spec with the mse
	// calculator is clipped regardless.
	WeightClipping WeightClipping
	// KeepBatchNorm leaves BatchNormalization after Conv as a separate
	// node instead of folding it into the Conv (finalize.FoldBatchNorm).
	KeepBatchNorm bool
	// Target decides where Q/DQ pairs go (placement.go); nil places them
	// wherever the config asks (the generic target).
	Target *config.Target
	// Patterns selects the multi-node patterns (patternTable) quantized at
	// their boundaries only; the values inside others are quantized like
	// any value.
	Patterns Patterns
	// Progress, when set, is called after each weight is planned.
	Progress func(WeightProgress)
}

// request is one node asking for a value to be quantized.
type request struct {
	spec *spec.QuantizationSpec
	rule config.Rule
	node string
}

// Prepare turns the resolved config into a Plan: one entry per quantized
// tensor, each node left in float listed with a reason, weight qparams
// computed from the weights.
func Prepare(m *onnxgraph.Model, res *config.Resolution, opts PrepareOptions) (*Plan, error) {
	p := &preparer{m: m, g: m.Graph, nodes: m.Graph.AllNodes(), ambiguous: reused(m.Graph), noted: map[string]bool{}, res: res, opts: opts, plan: &Plan{Stage: Prepared},
		requests: map[string][]request{}, fused: map[string]bool{}}
	if err := p.run(); err != nil {
		return nil, err
	}
	p.plan.Sort()
	return p.plan, nil
}

type preparer struct {
	m *onnxgraph.Model
	g *onnxgraph.Graph
	// nodes are the main graph's nodes and those inside its If/Loop/Scan
	// subgraphs, in topological order (Graph.AllNodes).
	nodes []*onnxgraph.Node
	res   *config.Resolution
	opts  PrepareOptions
	plan  *Plan

	// requests are the activation requests by value, producer first then
	// consumers in topological order.
	requests map[string][]request
	order    []string
	fused    map[string]bool
	// quantized counts the planned tensors of each node.
	quantized map[string]int
	// types are the inferred element types (elemTypes), computed on first use.
	types map[string]tensor.DType
	// nonNeg are the values known to be non-negative (nonNegative),
	// computed on first use.
	nonNeg map[string]bool
	// place is the target's placement.
	place *placement
	// inside maps each value inside a pattern to its match, and
	// patternOf each node of a match to it.
	inside    map[string]*PatternMatch
	patternOf map[string]*PatternMatch
	// ambiguous are value names that several subgraphs define (an If's
	// two branches may reuse one): the plan names tensors by value, so
	// they stay float. noted records the ones already reported.
	ambiguous, noted map[string]bool
}

// reused finds the value names defined in more than one graph.
func reused(g *onnxgraph.Graph) map[string]bool {
	defined, out := map[string]int{}, map[string]bool{}
	for _, sg := range g.Graphs() {
		for _, v := range sg.Values() {
			if v.Defined() {
				if defined[v.Name]++; defined[v.Name] > 1 {
					out[v.Name] = true
				}
			}
		}
	}
	return out
}

// isAmbiguous reports (once, as a note) a value that stays float because
// several graphs define its name.
func (p *preparer) isAmbiguous(value string) bool {
	if !p.ambiguous[value] {
		return false
	}
	if !p.noted[value] {
		p.noted[value] = true
		p.note("value %q: left in float: several subgraphs define a value of that name, and Q/DQ are placed by name", value)
	}
	return true
}

func (p *preparer) note(format string, args ...any) {
	p.plan.Notes = append(p.plan.Notes, fmt.Sprintf(format, args...))
}

func (p *preparer) request(value string, r request) {
	if p.isAmbiguous(value) {
		return
	}
	if _, ok := p.requests[value]; !ok {
		p.order = append(p.order, value)
	}
	p.requests[value] = append(p.requests[value], r)
}

func (p *preparer) run() error {
	p.quantized = map[string]int{}
	p.place = place(p.g, p.res, p.opts.Target)
	p.findPatterns()
	// Fused activations: Conv → Relu has no Q/DQ in between.
	var fusedPairs [][3]string
	wanted := map[string]bool{}
	for _, n := range p.nodes {
		r, ok := ruleOf(n)
		if !ok || !r.fusesRelu || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			continue
		}
		v := n.Outputs[0]
		if v.IsGraphOutput || len(v.Consumers) == 0 {
			continue
		}
		if c := v.Consumers[0]; len(v.Consumers) == 1 && isActivation(c) {
			p.fused[v.Name] = true
			fusedPairs = append(fusedPairs, [3]string{v.Name, n.String(), c.String()})
		} else if gate := p.fusedGate(n, v); gate != "" {
			p.fused[v.Name] = true
			fusedPairs = append(fusedPairs, [3]string{v.Name, n.String(), gate})
		}
	}
	// Collect activation requests, producer side first. Module boundary
	// specs apply whether or not the op has a rule.
	for _, n := range p.nodes {
		nr := p.res.Node(n.Name)
		r, ok := ruleOf(n)
		if nr == nil || p.place.floatWhy[n.Name] != "" {
			continue
		}
		for _, t := range nr.Tensors {
			if t.Spec == nil || t.Role == config.RoleState || (!ok && !t.Boundary) {
				continue
			}
			if p.inside[t.Value] != nil {
				continue
			}
			wanted[t.Value] = true
			if t.Role == config.RoleOutput && (t.Boundary || r.quantizesOutput(t.Index)) && !p.fused[t.Value] && !p.place.floatOutput[n.Name] {
				p.request(t.Value, request{spec: t.Spec, rule: t.Rule, node: n.Name})
			}
		}
	}
	for _, n := range p.nodes {
		nr := p.res.Node(n.Name)
		r, ok := ruleOf(n)
		if nr == nil || p.place.floatWhy[n.Name] != "" {
			continue
		}
		for _, t := range nr.Tensors {
			if t.Spec == nil || t.Role != config.RoleInput || (!t.Boundary && (!ok || !r.quantizesInput(t.Index))) || p.inside[t.Value] != nil {
				continue
			}
			if p.fused[t.Value] {
				wanted[t.Value] = true
				continue
			}
			p.request(t.Value, request{spec: t.Spec, rule: t.Rule, node: n.Name})
		}
	}
	for _, f := range fusedPairs {
		if wanted[f[0]] {
			p.note("value %q: no Q/DQ between %s and %s (fused activation)", f[0], f[1], f[2])
		}
	}
	// Plan activations in topological order of their producers, so that a
	// shared op's input is decided before its output.
	if err := p.planActivations(); err != nil {
		return err
	}
	if err := p.planStates(); err != nil {
		return err
	}
	if !p.opts.ConcatOwnQParams {
		p.shareConcat()
	}
	if !p.opts.NoHeadroom {
		p.giveHeadroom()
	}
	if !p.opts.NoMixedConcat {
		p.markEndingConcats()
	}
	if n := MarkWideHeadroom(p.plan.Tensors, p.opts); n > 0 {
		p.note("%d activations on grids of 16 bits or more: their ranges get headroom beyond the calibrated extremes (times 1.5, away from zero)", n)
	}
	if !p.opts.NoSiLUFloor && p.opts.Patterns != PatternsNone {
		// With the patterns off, the SiLU's Sigmoid output is quantized
		// too, and a clipped input no longer leaves its output at 0.
		markTails(p.m, p.plan)
	}
	p.skips()
	return nil
}

// valueOrder lists requested values: graph inputs, then each node's
// outputs in topological order.
func (p *preparer) valueOrder() []*onnxgraph.Value {
	var out []*onnxgraph.Value
	seen := map[string]bool{}
	add := func(v *onnxgraph.Value) {
		if v != nil && !seen[v.Name] {
			if _, ok := p.requests[v.Name]; ok {
				out = append(out, v)
				seen[v.Name] = true
			}
		}
	}
	for _, v := range p.g.Inputs {
		add(v)
	}
	for _, n := range p.nodes {
		for _, v := range n.Inputs {
			if v != nil && v.Producer == nil {
				add(v)
			}
		}
		for _, v := range n.Outputs {
			add(v)
		}
	}
	return out
}

func floatTypeOf(v *onnxgraph.Value) int32 { return floatTypeOfDType(v.DType()) }

// elemType is v's declared or inferred element type.
func (p *preparer) elemType(v *onnxgraph.Value) tensor.DType {
	if dt := v.DType(); dt != tensor.Undefined {
		return dt
	}
	if p.types == nil {
		p.types = elemTypes(p.g)
	}
	return p.types[v.Name]
}

func floatTypeOfDType(dt tensor.DType) int32 {
	switch dt {
	case tensor.Float16, tensor.BFloat16:
		return int32(dt)
	}
	return int32(tensor.Float)
}

func (p *preparer) planActivations() error {
	unused := &unusedCalculators{}
	defer unused.notes(p)
	for _, v := range p.valueOrder() {
		reqs := p.requests[v.Name]
		first := reqs[0]
		if v.IsConst() {
			p.note("value %q: constant input of %q is not an activation; left in float (quantize it as a state with op_state_spec)", v.Name, first.node)
			continue
		}
		switch dt := p.elemType(v); dt {
		case tensor.Float, tensor.Float16, tensor.BFloat16:
		case tensor.Undefined:
			p.note("value %q: element type unknown (no value_info, and not inferable from its producer); left unquantized", v.Name)
			continue
		default:
			p.note("value %q: %s tensors are not quantized", v.Name, dt)
			continue
		}
		if first.spec.Granularity.Type != spec.PerTensor {
			p.note("value %q: %s activations are not supported, only per_tensor (rule %s); left in float", v.Name, first.spec.Granularity.Type, first.rule)
			continue
		}
		t := &TensorPlan{Value: v.Name, Role: Activation, Spec: first.spec, Rule: first.rule,
			FloatType: floatTypeOfDType(p.elemType(v)), Axis: -1}
		seenNode := map[string]bool{}
		for _, r := range reqs {
			if !seenNode[r.node] {
				t.Nodes = append(t.Nodes, r.node)
				seenNode[r.node] = true
			}
			if !r.spec.Equal(first.spec) {
				p.note("value %q: node %q asks for %s (%s), using %s from node %q (%s): one Q/DQ pair per tensor",
					v.Name, r.node, r.spec, r.rule, first.spec, first.node, first.rule)
			}
		}
		if prod := v.Producer; prod != nil {
			r, _ := ruleOf(prod)
			in, hasIntrinsic := intrinsicOf(p.m, prod, p.isNonNeg)
			switch {
			case hasIntrinsic && !p.opts.NoOpIntrinsics && first.node == prod.Name:
				p.applyIntrinsic(t, in, prod)
			case r.fixed != nil:
				t.Fixed = r.fixed
			case r.kind == opShared && len(prod.Inputs) > 0 && prod.Inputs[0] != nil:
				if in := p.plan.Tensor(prod.Inputs[0].Name); in != nil && in.Role == Activation {
					root := p.plan.Root(in)
					t.SharedWith = root.Value
					if !t.Spec.Equal(root.Spec) {
						p.note("value %q: shares qparams with %q through %s, so uses its spec %s", v.Name, root.Value, prod, root.Spec)
						t.Spec = root.Spec
					}
				}
			}
		}
		unused.add(t)
		if err := p.plan.Add(t); err != nil {
			return err
		}
		for _, n := range t.Nodes {
			p.quantized[n]++
		}
	}
	return nil
}

// unusedCalculators collects the values whose spec names a qparam
// calculator that their fixed range (a Sigmoid's, a Softmax's, a Clip's
// bounds) makes moot, by config rule, so that a calculator a user chose
// for them is never silently ignored: one note per rule. The default
// activation calculator (moving average, which a spec that names none
// gets) and presets are left out: a user did not choose them.
type unusedCalculators struct {
	rules []string
	count map[string]int
	first map[string]*TensorPlan
}

func (u *unusedCalculators) add(t *TensorPlan) {
	if t.Fixed == nil || t.Spec.Calculator.Type == spec.CalculatorAuto || t.Spec.Calculator.Type == spec.MovingAverage || strings.HasPrefix(t.Rule.File, "preset:") {
		return
	}
	key := t.Rule.String() + "\x00" + t.Spec.Calculator.Type.String()
	if u.count == nil {
		u.count, u.first = map[string]int{}, map[string]*TensorPlan{}
	}
	if u.count[key] == 0 {
		u.rules = append(u.rules, key)
		u.first[key] = t
	}
	u.count[key]++
}

func (u *unusedCalculators) notes(p *preparer) {
	for _, key := range u.rules {
		t := u.first[key]
		p.note("rule %s: its qparam_calculator %s is not used for %d value(s) with a fixed range (first %q, [%g, %g]): their qparams come from the range",
			t.Rule, t.Spec.Calculator.Type, u.count[key], t.Value, t.Fixed.Min, t.Fixed.Max)
	}
}

// isNonNeg reports whether v is known to be non-negative (nonNegative),
// computed on first use.
func (p *preparer) isNonNeg(v *onnxgraph.Value) bool {
	if p.nonNeg == nil {
		p.nonNeg = nonNegative(p.m)
	}
	return v != nil && p.nonNeg[v.Name]
}

// applyIntrinsic sets t's qscheme and range from its producer's
// op-intrinsic rule, over the config's spec (coreai-opt gives the rule a
// higher priority than any config level), and records it on the tensor and
// as a note when it changes the spec.
func (p *preparer) applyIntrinsic(t *TensorPlan, in opIntrinsic, prod *onnxgraph.Node) {
	var did []string
	if in.scheme != spec.QSchemeAuto && t.Spec.DType.IsInteger() && t.Spec.QScheme != in.scheme {
		s := t.Spec.Clone()
		s.QScheme = in.scheme
		p.note("value %q: %s, so %s, not %s as %s asks (op-intrinsic rule of %s)", t.Value, in.what, in.scheme, t.Spec.QScheme, t.Rule, prod)
		t.Spec = s
		did = append(did, in.scheme.String())
	}
	if in.fixed != nil {
		f := *in.fixed
		t.Fixed = &f
		did = append(did, fmt.Sprintf("fixed range [%g, %g]", f.Min, f.Max))
	}
	if len(did) > 0 {
		t.Intrinsic = in.what + ": " + strings.Join(did, ", ")
	}
}

// planStates plans the constant inputs: weights with their spec and
// qparams, and the int32 biases of compute ops.
func (p *preparer) planStates() error {
	var report func(v *onnxgraph.Value)
	if p.opts.Progress != nil {
		tensors, total := p.weightWork()
		start, done, bytes := time.Now(), map[string]bool{}, int64(0)
		report = func(v *onnxgraph.Value) {
			if done[v.Name] || v.Const == nil {
				return
			}
			done[v.Name] = true
			bytes += constBytes(v)
			p.opts.Progress(WeightProgress{Tensor: len(done), Tensors: tensors, Bytes: bytes, Total: total,
				Name: v.Name, Elapsed: time.Since(start)})
		}
	}
	for _, n := range p.nodes {
		nr := p.res.Node(n.Name)
		r, ok := ruleOf(n)
		if !ok || nr == nil || p.place.floatWhy[n.Name] != "" {
			continue
		}
		for _, t := range nr.Tensors {
			if t.Role != config.RoleState {
				continue
			}
			v := n.Inputs[t.Index]
			if r.kind == opCompute && t.Index == r.bias {
				if err := p.planBias(n, v, t); err != nil {
					return err
				}
				continue
			}
			if t.Spec == nil {
				continue
			}
			if err := p.planWeight(n, v, t.Spec, t.Rule); err != nil {
				return err
			}
			if report != nil {
				report(v)
			}
		}
	}
	return nil
}

// forEachWeight calls fn for each (node, weight) pair planStates plans as
// a weight, in its order.
func (p *preparer) forEachWeight(fn func(n *onnxgraph.Node, v *onnxgraph.Value)) {
	for _, n := range p.nodes {
		nr := p.res.Node(n.Name)
		r, ok := ruleOf(n)
		if !ok || nr == nil {
			continue
		}
		for _, t := range nr.Tensors {
			if t.Role == config.RoleState && t.Spec != nil && !(r.kind == opCompute && t.Index == r.bias) {
				fn(n, n.Inputs[t.Index])
			}
		}
	}
}

func (p *preparer) planWeight(n *onnxgraph.Node, v *onnxgraph.Value, s *spec.QuantizationSpec, rule config.Rule) error {
	if p.isAmbiguous(v.Name) {
		return nil
	}
	if prev := p.plan.Tensor(v.Name); prev != nil {
		if prev.Role != Weight || !prev.Spec.Equal(s) {
			p.note("weight %q: node %q asks for %s (%s) but it is already quantized as %s for %q; one DequantizeLinear serves both",
				v.Name, n.Name, s, rule, prev.SpecString(), prev.Nodes[0])
		}
		prev.Nodes = append(prev.Nodes, n.Name)
		p.quantized[n.Name]++
		return nil
	}
	t, err := tensor.FromProto(v.Const, p.m)
	if err != nil {
		return fmt.Errorf("%s: weight %q: %w", n, v.Name, err)
	}
	data, err := t.AsFloat32()
	if err != nil {
		return fmt.Errorf("%s: weight %q: %w", n, v.Name, err)
	}
	tp := &TensorPlan{Value: v.Name, Role: Weight, Spec: s, Rule: rule, Nodes: []string{n.Name},
		FloatType: floatTypeOf(v), Shape: t.Shape, Axis: -1}
	if g := s.Granularity; g.Type != spec.PerTensor {
		if g.Axis == nil {
			return fmt.Errorf("%s: weight %q: %s granularity without an axis (rule %s)", n, v.Name, g.Type, rule)
		}
		tp.Axis = *g.Axis
		if tp.Axis < 0 || tp.Axis >= len(t.Shape) {
			return fmt.Errorf("%s: weight %q of shape %v: axis %d out of range (rule %s)", n, v.Name, t.Shape, tp.Axis, rule)
		}
		if g.Type == spec.PerBlock {
			tp.BlockSize = g.BlockSize
			if len(t.Shape) == 1 && t.Shape[0] <= g.BlockSize {
				// One block covering a 1-D tensor is per-tensor
				// quantization; ONNX Runtime refuses block_size with a
				// one-element scale ("block_size must be 0 for per-tensor
				// quantization").
				tp.Axis, tp.BlockSize = -1, 0
				p.note("weight %q of %s: one block of %d covers its %d values; quantized per tensor", v.Name, n, g.BlockSize, t.Shape[0])
			} else if ch, ok := blockChannelAxis(n, t.Shape, tp.Axis); ok && t.Shape[tp.Axis] <= g.BlockSize {
				// coreai-opt's block spans block_size input channels and
				// the whole kernel (the kernel dimensions collapse in the
				// scale shape). When one block covers every input channel
				// that is one scale per output channel; ONNX blocked
				// quantization would instead give every kernel position
				// its own block, down to blocks of one weight for a Conv
				// with one input channel.
				p.note("weight %q of %s: one block of %d covers its %d input channels; quantized per channel on axis %d",
					v.Name, n, g.BlockSize, t.Shape[tp.Axis], ch)
				tp.Axis, tp.BlockSize = ch, 0
			}
		}
	}
	params, err := weightParams(data, t.Shape, tp.Axis, tp.BlockSize, s, weightClipping(s, p.opts))
	if err != nil {
		return fmt.Errorf("%s: weight %q: %w", n, v.Name, err)
	}
	tp.Params = params
	p.quantized[n.Name]++
	return p.plan.Add(tp)
}

// weightClipping is the clipping a weight of spec s gets.
func weightClipping(s *spec.QuantizationSpec, opts PrepareOptions) WeightClipping {
	if s.Calculator.Type == spec.MSE || isNarrow(s.DType) {
		// 4-bit and narrower grids are coarse enough that min/max ranges
		// waste most codes on rare outliers; the MSE range search is
		// what GPTQ-free 4-bit quantizers default to.
		return ClipMSE
	}
	return opts.WeightClipping
}

// WeightParamsAs is the qparams prepare would give weight t of model m
// had the config given it spec s in place of its own: the accuracy search
// widens a planned weight with it.
func WeightParamsAs(m *onnxgraph.Model, t *TensorPlan, s *spec.QuantizationSpec, opts PrepareOptions) (*Params, error) {
	v := constantIn(m, t.Value)
	if v == nil || t.Role != Weight {
		return nil, fmt.Errorf("weight %q: not a constant weight of the model", t.Value)
	}
	data, shape, err := constFloats(m, v)
	if err != nil {
		return nil, fmt.Errorf("weight %q: %w", t.Value, err)
	}
	return weightParams(data, shape, t.Axis, t.BlockSize, s, weightClipping(s, opts))
}

// weightParams computes a weight's qparams per group from its data. The
// observed range in the params is the data's, whatever the clipping.
func weightParams(data []float32, shape []int, axis, block int, s *spec.QuantizationSpec, clip WeightClipping) (*Params, error) {
	if _, ok := s.IntGrid(); ok && clip == ClipMSE {
		n := tensor.NumElements(quant.ParamShape(shape, axis, block))
		mins, maxs := make([]float32, n), make([]float32, n)
		lo, hi := calibrate.WeightRanges(data, shape, axis, block, s, mins, maxs)
		sc, zp, err := s.QParams(mins, maxs)
		if err != nil {
			return nil, err
		}
		return &Params{Scales: sc, ZeroPoints: zp, Observed: &Range{Min: lo, Max: hi}}, nil
	}
	mins, maxs, err := finalize.GroupRanges(data, shape, axis, block)
	if err != nil {
		return nil, err
	}
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	for i := range mins {
		lo, hi = min(lo, mins[i]), max(hi, maxs[i])
	}
	if len(mins) == 0 {
		lo, hi = 0, 0
	}
	if clip == ClipMSE {
		groups, err := finalize.GroupValues(data, shape, axis, block)
		if err != nil {
			return nil, err
		}
		for i, g := range groups {
			mins[i], maxs[i] = calibrate.WeightMSERange(g, mins[i], maxs[i], s)
		}
	}
	sc, zp, err := s.QParams(mins, maxs)
	if err != nil {
		return nil, err
	}
	return &Params{Scales: sc, ZeroPoints: zp, Observed: &Range{Min: lo, Max: hi}}, nil
}

// planBias plans the int32 bias of a Conv/ConvTranspose/Gemm when its
// input and weight are quantized with integer per-tensor/per-channel
// qparams; otherwise the bias keeps the spec the config gave it (or stays
// float), with a note saying why.
func (p *preparer) planBias(n *onnxgraph.Node, v *onnxgraph.Value, t *config.TensorResolution) error {
	if p.isAmbiguous(v.Name) {
		return nil
	}
	if t.Spec == nil && t.Explicit {
		p.note("bias %q of %s: left in float, as %s asks", v.Name, n, t.Rule)
		return nil
	}
	why := p.biasBlocker(n, v)
	if why == "" {
		in, w := p.plan.Tensor(n.Inputs[0].Name), p.plan.Tensor(n.Inputs[1].Name)
		tp := &TensorPlan{Value: v.Name, Role: Bias, Rule: w.Rule, Nodes: []string{n.Name},
			FloatType: floatTypeOf(v), Input: in.Value, Weight: w.Value, Axis: -1}
		if t.Spec != nil {
			tp.Rule = t.Rule
			p.note("bias %q of %s: int32 with scale = input scale × weight scale (the spec %s of rule %s does not apply)", v.Name, n, t.Spec, t.Rule)
		}
		if w.Axis >= 0 {
			tp.Axis = 0
		}
		if n.OpType == "Gemm" {
			if a := n.Attr("beta"); a != nil && a.GetF() != 1 {
				tp.BiasBeta = a.GetF()
			}
		}
		if dims, _ := v.Shape(); len(dims) == 1 {
			tp.Shape = []int{int(dims[0].Size)}
		}
		p.quantized[n.Name]++
		return p.plan.Add(tp)
	}
	if t.Spec != nil {
		p.note("bias %q of %s: not int32 (%s); quantized with its own spec", v.Name, n, why)
		return p.planWeight(n, v, t.Spec, t.Rule)
	}
	if p.plan.Tensor(n.Inputs[1].Name) != nil {
		p.note("bias %q of %s: left in float (%s)", v.Name, n, why)
	}
	return nil
}

// biasBlocker says why a compute op's bias cannot be int32, "" if it can.
func (p *preparer) biasBlocker(n *onnxgraph.Node, v *onnxgraph.Value) string {
	if len(n.Inputs) < 2 || n.Inputs[0] == nil || n.Inputs[1] == nil {
		return "no weight"
	}
	in := p.plan.Tensor(n.Inputs[0].Name)
	if in == nil || in.Role != Activation {
		return "the input is not quantized"
	}
	if r := p.plan.Root(in); !r.Spec.DType.IsInteger() {
		return "the input is not integer-quantized"
	}
	w := p.plan.Tensor(n.Inputs[1].Name)
	if w == nil || w.Role != Weight {
		return "the weight is not quantized"
	}
	if !w.Spec.DType.IsInteger() {
		return "the weight is not integer-quantized"
	}
	if w.BlockSize > 0 {
		return "the weight is quantized per block"
	}
	if w.Axis >= 0 && w.Axis != channelAxis(n, len(w.Shape)) {
		return fmt.Sprintf("the weight's axis %d is not the output-channel axis", w.Axis)
	}
	if dims, ok := v.Shape(); !ok || len(dims) != 1 {
		return "the bias is not 1-D"
	}
	if len(v.Consumers) != 1 {
		return "the bias is shared by several nodes"
	}
	if n.OpType == "Gemm" {
		if a := n.Attr("alpha"); a != nil && a.GetF() != 1 {
			return "Gemm alpha is not 1"
		}
	}
	return ""
}

// shareConcat makes each Concat input's qparam group use the output's.
func (p *preparer) shareConcat() {
	for _, n := range p.nodes {
		if n.OpType != "Concat" || n.Domain != "" || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			continue
		}
		out := p.plan.Tensor(n.Outputs[0].Name)
		if out == nil || out.SharedWith != "" || out.Fixed != nil {
			continue
		}
		for _, v := range n.Inputs {
			if v == nil {
				continue
			}
			in := p.plan.Tensor(v.Name)
			if in == nil || in.Role != Activation {
				continue
			}
			root := p.plan.Root(in)
			switch {
			case root == out:
			case root.Fixed != nil || !root.Spec.Equal(out.Spec):
				p.note("concat %q: input %q keeps its own qparams (fixed range or different spec)", n.Name, v.Name)
			default:
				root.SharedWith = out.Value
			}
		}
	}
}

// skips lists every node that has no quantized tensor, with the reason.
func (p *preparer) skips() {
	for _, n := range p.nodes {
		if p.quantized[n.Name] > 0 {
			continue
		}
		reason := ""
		_, ok := ruleOf(n)
		switch {
		case p.place.floatWhy[n.Name] != "":
			reason = p.place.floatWhy[n.Name]
		case len(n.Subgraphs) > 0:
			reason = "control flow: runs in float; the nodes inside its subgraphs are quantized by their own rules"
		case p.patternOf[n.Name] != nil:
			pm := p.patternOf[n.Name]
			reason = fmt.Sprintf("inside pattern %s (output node %q): quantized at its boundary", pm.Pattern, pm.Root().Name)
		case !ok && n.Domain != "":
			reason = fmt.Sprintf("no quantization rule for op %s.%s; runs in float", n.Domain, n.OpType)
		case !ok:
			reason = fmt.Sprintf("no quantization rule for op %s; runs in float", n.OpType)
		default:
			reason = p.configReason(n)
		}
		p.plan.Skipped = append(p.plan.Skipped, Skip{Node: n.Name, OpType: n.OpType, Reason: reason})
	}
	sort.SliceStable(p.plan.Skipped, func(i, j int) bool { return p.plan.Skipped[i].Node < p.plan.Skipped[j].Node })
}

// configReason explains why a supported node got no quantized tensor.
func (p *preparer) configReason(n *onnxgraph.Node) string {
	nr := p.res.Node(n.Name)
	if nr == nil {
		return "not reached by the config resolution"
	}

	for _, t := range nr.Tensors {
		if t.Spec == nil && t.Reason != "" {
			return fmt.Sprintf("%s: %s (%s)", t.Label(), t.Reason, t.Rule)
		}
	}
	for _, t := range nr.Tensors {
		if p.fused[t.Value] {
			return fmt.Sprintf("%s %q is fused with its activation", t.Label(), t.Value)
		}
	}
	return "no float tensor to quantize"
}

// isNarrow reports whether d is a 4-bit or narrower integer type.
func isNarrow(d spec.DType) bool {
	switch d {
	case spec.Int4, spec.UInt4, spec.Int2, spec.UInt2:
		return true
	}
	return false
}

// blockChannelAxis is the output-channel axis of a weight blocked along
// blockAxis: the other of axes 0 and 1 for Conv, ConvTranspose, Gemm and
// Gather tables, the other of the last two axes for MatMul. ok is false
// for any other layout.
func blockChannelAxis(n *onnxgraph.Node, shape []int, blockAxis int) (int, bool) {
	r := len(shape)
	if r < 2 || n.Domain != "" {
		return 0, false
	}
	switch n.OpType {
	case "MatMul":
		switch blockAxis {
		case r - 2:
			return r - 1, true
		case r - 1:
			return r - 2, true
		}
	case "Conv", "ConvTranspose", "Gemm", "Gather":
		switch blockAxis {
		case 0:
			return 1, true
		case 1:
			return 0, true
		}
	}
	return 0, false
}

// giveHeadroom marks the activations whose largest values decide a
// Softmax's output (ops.Op.DecidedByMax): its input and, back through
// pools and data movement (MaxFromInput, Shared), the values that input's
// maximum comes from. Calibration sees a few samples; a class scored
// higher than any of them would otherwise be clipped to the same code as
// the runner-up. The input of the layer those values come from keeps its
// calibrated maximum (keepClassifierInputMax).
func (p *preparer) giveHeadroom() {
	for _, n := range p.nodes {
		op, ok := ops.Of(n)
		if !ok || !op.DecidedByMax || len(n.Inputs) == 0 {
			continue
		}
		for v := n.Inputs[0]; v != nil; {
			if t := p.plan.Tensor(v.Name); t != nil && t.Role == Activation {
				if root := p.plan.Root(t); root != nil && root.Fixed == nil && !root.Headroom {
					root.Headroom = true
					p.note("value %q: its largest values decide %s, so its range gets one bit of headroom above the calibrated maximum", root.Value, n)
				}
			}
			prod := v.Producer
			if prod == nil || len(prod.Inputs) == 0 {
				break
			}
			pop, ok := ops.Of(prod)
			if !ok || !(pop.MaxFromInput || pop.Quant != nil && pop.Quant.Kind == ops.Shared) {
				p.keepClassifierInputMax(n, prod)
				break
			}
			v = prod.Inputs[0]
		}
	}
}

// keepClassifierInputMax marks the input of the weighted layer that
// computes the values deciding n (prod, or the layer before prod when prod
// is that layer's activation) to keep its calibrated maximum
// (TensorPlan.KeepMax), and the values it comes from through data
// movement. A classifier's class scores are a linear map of its last
// features, so a feature's largest, rarest values, which a percentile
// range clips, are what makes one class win: on squeezenet1.0 under the
// ort-x86 target's 99.999th-percentile ranges, fire9's output (read by
// the 1×1 classifier conv10) was cut from [0, 453] to [0, 304].
func (p *preparer) keepClassifierInputMax(n, prod *onnxgraph.Node) {
	if q := ops.QuantOf(prod); q != nil && q.Activation && len(prod.Inputs) > 0 && prod.Inputs[0] != nil && prod.Inputs[0].Producer != nil {
		prod = prod.Inputs[0].Producer
	}
	q := ops.QuantOf(prod)
	if q == nil || q.Kind != ops.Compute || len(prod.Inputs) < 2 || prod.Inputs[1] == nil || !prod.Inputs[1].IsConst() {
		return // not a layer of constant weights (attention's scores, a pool)
	}
	for v := prod.Inputs[0]; v != nil; {
		if t := p.plan.Tensor(v.Name); t != nil && t.Role == Activation {
			if root := p.plan.Root(t); root != nil && root.Fixed == nil && !root.KeepMax {
				root.KeepMax = true
				p.note("value %q: the input of %s, whose outputs decide %s, keeps its calibrated maximum (no percentile, mse or entropy clipping)", root.Value, prod, n)
			}
		}
		pr := v.Producer
		if pr == nil || len(pr.Inputs) == 0 {
			break
		}
		if pq := ops.QuantOf(pr); pq == nil || pq.Kind != ops.Shared {
			break
		}
		v = pr.Inputs[0]
	}
}

// markEndingConcats marks the Concat outputs that only graph outputs read,
// directly or through data movement and further Concats
// (TensorPlan.MixedConcat): no integer kernel needs them quantized, so
// DecideQParams may leave their qparams group in float when the inputs'
// ranges are too far apart for one scale. A detector writes one Concat of
// boxes and probabilities per scale and a last one across the scales.
func (p *preparer) markEndingConcats() {
	for _, n := range p.nodes {
		if n.OpType != "Concat" || n.Domain != "" || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			continue
		}
		t := p.plan.Tensor(n.Outputs[0].Name)
		if t == nil || t.Role != Activation || t.Fixed != nil {
			continue
		}
		if endsModel(n.Outputs[0]) {
			t.MixedConcat = true
		}
	}
}

// endsModel reports whether v is a graph output or is read only by data
// movement (input 0 of an op of kind Shared) and Concats whose outputs end
// the model the same way.
func endsModel(v *onnxgraph.Value) bool {
	if len(v.Consumers) == 0 {
		return v.IsGraphOutput
	}
	for _, c := range v.Consumers {
		if len(c.Outputs) != 1 || c.Outputs[0] == nil {
			return false
		}
		q := ops.QuantOf(c)
		moves := q != nil && q.Kind == ops.Shared && len(c.Inputs) > 0 && c.Inputs[0] == v && !slices.Contains(c.Inputs[1:], v)
		concat := c.OpType == "Concat" && c.Domain == ""
		if !moves && !concat || !endsModel(c.Outputs[0]) {
			return false
		}
	}
	return true
}

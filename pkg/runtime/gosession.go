package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/ops"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// GoSession is a model compiled for the built-in engine: a program of
// kernels, one per node that was not folded into a constant.
type GoSession struct {
	model   *onnxgraph.Model
	prog    *program
	threads int
	inputs  []IOInfo
	outputs []IOInfo
	arenas  arenas
	profile *Profile
	choices map[string]string
}

// KernelChoices returns, by node name, the kernels chosen when the
// session was compiled: a Conv whose weights are constant and whose input
// declares its channels and spatial size has its way decided then (the
// profile shows the choices made at run time for the others).
func (s *GoSession) KernelChoices() map[string]string { return maps.Clone(s.choices) }

// chose records a compile-time kernel choice for node.
func (c *compiler) chose(node, kernel string) {
	if c.choices == nil {
		c.choices = map[string]string{}
	}
	c.choices[node] = kernel
}

// NewGoSession compiles m for the built-in engine. Every node the engine
// cannot run is reported at once in an *UnsupportedError, before anything runs.
func NewGoSession(m *onnxgraph.Model, opts Options) (*GoSession, error) {
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	c := &compiler{model: m, threads: threads, convWay: opts.ConvWay, packs: newPackBudget(packBudgetBytes)}
	prog, err := c.compileGraph(m.Graph, nil, nil)
	if err != nil {
		return nil, err
	}
	if len(c.unsupported) > 0 {
		return nil, &UnsupportedError{Items: c.unsupported}
	}
	s := &GoSession{model: m, prog: prog, threads: threads, profile: opts.Profile, choices: c.choices}
	s.arenas.poison, s.arenas.pool = opts.poisonArena, opts.Buffers
	for _, v := range m.Graph.Inputs {
		s.inputs = append(s.inputs, ioInfo(v))
	}
	for _, v := range m.Graph.Outputs {
		s.outputs = append(s.outputs, ioInfo(v))
	}
	return s, nil
}

func ioInfo(v *onnxgraph.Value) IOInfo {
	info := IOInfo{Name: v.Name, DType: v.DType()}
	if dims, ok := v.Shape(); ok {
		info.Shape = make([]int64, len(dims))
		info.DimParams = make([]string, len(dims))
		for i, d := range dims {
			info.Shape[i] = d.Size
			info.DimParams[i] = d.Param
		}
	}
	return info
}

// Engine returns "go".
func (s *GoSession) Engine() string { return "go" }

// Inputs describes the model inputs.
func (s *GoSession) Inputs() []IOInfo { return s.inputs }

// Outputs describes the model outputs.
func (s *GoSession) Outputs() []IOInfo { return s.outputs }

// Close releases the session: its free run buffers go to
// Options.Buffers, if given.
func (s *GoSession) Close() error {
	s.arenas.close()
	return nil
}

// Run executes the model. Graph inputs and every node output are handed to
// opts.Tap (filtered by opts.TapValues) as soon as they exist.
func (s *GoSession) Run(ctx context.Context, inputs map[string]*tensor.Tensor, opts RunOptions) (map[string]*tensor.Tensor, error) {
	for _, name := range sortedKeys(inputs) {
		if s.prog.graph.Value(name) == nil || !slices.ContainsFunc(s.inputs, func(i IOInfo) bool { return i.Name == name }) {
			return nil, fmt.Errorf("input %q is not an input of the model (inputs: %s)", name, ioNames(s.inputs))
		}
	}
	feeds := make([]*tensor.Tensor, len(s.prog.inputs))
	symbols := map[string]int{}
	for i, in := range s.prog.inputs {
		t := inputs[in.value.Name]
		if t == nil {
			return nil, fmt.Errorf("input %q is missing (inputs: %s)", in.value.Name, ioNames(s.inputs))
		}
		ct, err := checkInput(in.value, t, symbols)
		if err != nil {
			return nil, err
		}
		feeds[i] = ct
	}
	rc := &runCtx{ctx: ctx, threads: s.threads, tap: opts.Tap, arena: s.arenas.get(), profile: s.profile}
	defer s.arenas.put(rc.arena)
	if rc.profile != nil {
		rc.lane = rc.profile.beginRun()
		start := time.Now()
		defer func() { rc.profile.endRun(rc.lane, time.Since(start)) }()
	}
	if opts.Tap != nil && opts.TapValues != nil {
		rc.tapSet = map[string]bool{}
		for _, n := range opts.TapValues {
			rc.tapSet[n] = true
		}
	}
	if opts.TapsOnly && rc.tapSet != nil {
		rc.needed = s.prog.needed(rc.tapSet)
	}
	outs, err := s.prog.run(rc, feeds, nil)
	if err != nil {
		return nil, err
	}
	if rc.needed != nil {
		return map[string]*tensor.Tensor{}, nil
	}
	res := make(map[string]*tensor.Tensor, len(outs))
	for i, v := range s.prog.graph.Outputs {
		t := outs[i]
		if want := v.DType(); want != tensor.Undefined && want != t.DType {
			if t, err = castTensor(t, want); err != nil {
				return nil, fmt.Errorf("output %q: %w", v.Name, err)
			}
		}
		res[v.Name] = t
	}
	return res, nil
}

func ioNames(infos []IOInfo) string {
	names := make([]string, len(infos))
	for i, in := range infos {
		names[i] = fmt.Sprintf("%q", in.Name)
	}
	return strings.Join(names, ", ")
}

// checkInput checks t against v's declared type and shape, binding
// symbolic dimensions in symbols, and returns t in compute form.
func checkInput(v *onnxgraph.Value, t *tensor.Tensor, symbols map[string]int) (*tensor.Tensor, error) {
	want := v.DType()
	if want != tensor.Undefined && want != t.DType {
		return nil, &InputError{Input: v.Name, Expected: "element type " + want.String(), Given: t.DType.String()}
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("input %q: %w", v.Name, err)
	}
	if dims, ok := v.Shape(); ok {
		expected := func() string {
			parts := make([]string, len(dims))
			for i, d := range dims {
				parts[i] = d.String()
			}
			return "shape [" + strings.Join(parts, " ") + "]"
		}
		// Formatted only on failure: a run checks every input.
		given := func() string { return fmt.Sprintf("shape %v", t.Shape) }
		if len(dims) != len(t.Shape) {
			return nil, &InputError{Input: v.Name, Expected: expected(), Given: given()}
		}
		for i, d := range dims {
			switch {
			case d.Size >= 0 && d.Param == "":
				if int(d.Size) != t.Shape[i] {
					return nil, &InputError{Input: v.Name, Expected: expected(), Given: given()}
				}
			case d.Param != "":
				if prev, ok := symbols[d.Param]; ok && prev != t.Shape[i] {
					return nil, &InputError{Input: v.Name, Expected: fmt.Sprintf("%s with %s = %d (as bound by an earlier input)", expected(), d.Param, prev), Given: given()}
				}
				symbols[d.Param] = t.Shape[i]
			}
		}
	}
	return toCompute(t)
}

// runCtx is the state of one run shared by all kernels.
type runCtx struct {
	ctx     context.Context
	threads int
	tap     Tap
	tapSet  map[string]bool
	// arena recycles intermediate float32 buffers (nil: plain allocation).
	arena *arena
	// profile, when set, times the main graph's steps (depth 1), on the
	// timeline row lane; a step's kernel may name the way it chose with
	// chose.
	profile *Profile
	lane    int
	depth   int
	kernel  string
	// place is the running step's placement (floatOutPart,
	// concatInPlace); placed holds the buffers of the in-place Concats
	// whose parts are being computed.
	place  *placement
	placed map[*concatPlan][]float32
	// needed, when set, marks the main graph's steps a TapsOnly run
	// computes; the others are skipped.
	needed []bool
}

// profiling reports whether the step running now is being profiled, so
// that kernels name their choice only when someone reads it.
func (rc *runCtx) profiling() bool { return rc.profile != nil && rc.depth == 1 }

// chose records the way the running step's kernel computed its node, for
// the profile.
func (rc *runCtx) chose(kernel string) {
	if rc.profiling() {
		rc.kernel = kernel
	}
}

// wants reports whether the run's tap asks for the value name.
func (rc *runCtx) wants(name string) bool {
	return rc.tap != nil && (rc.tapSet == nil || rc.tapSet[name])
}

func (rc *runCtx) emit(name string, t *tensor.Tensor) {
	if rc.tap == nil || t == nil {
		return
	}
	if rc.tapSet != nil && !rc.tapSet[name] {
		return
	}
	rc.tap(name, t)
}

// kernel computes a node's outputs from its inputs (nil for an omitted
// optional input). Kernels never modify their inputs.
type kernel func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error)

type step struct {
	node *onnxgraph.Node
	k    kernel
	in   []int // slot per input, -1 when omitted
	out  []int // slot per output, -1 when omitted
	// free lists the slots whose last reader is this step.
	free []int
	// fused names the nodes a fused step computes besides node, for the
	// profile ("+BatchNormalization+Relu").
	fused string
	// place is the step's role in a Concat computed in place (nil: none).
	place *placement
	// covers are the nodes whose work the step does besides node (a
	// fused step's), whose outputs a tap may ask for.
	covers []*onnxgraph.Node
}

type inputSlot struct {
	value *onnxgraph.Value
	slot  int
}

// program is one compiled graph.
type program struct {
	graph  *onnxgraph.Graph
	nslots int
	// consts are the slots known at compile time: initializers, Constant
	// outputs and folded subgraphs.
	consts map[int]*tensor.Tensor
	// folded lists the folded node outputs, to tap them at every run.
	folded []int
	names  []string
	inputs []inputSlot
	// outer are the slots of values read from enclosing graphs, in the
	// order the caller passes them.
	outer   []int
	steps   []step
	outputs []int
}

// run executes the program. feeds are the graph inputs in order; outer are
// the enclosing graphs' values in p.outer order.
func (p *program) run(rc *runCtx, feeds, outer []*tensor.Tensor) ([]*tensor.Tensor, error) {
	rc.depth++
	defer func() { rc.depth-- }()
	profiling := rc.profiling()
	slots := make([]*tensor.Tensor, p.nslots)
	for s, t := range p.consts {
		slots[s] = t
	}
	for i, s := range p.outer {
		slots[s] = outer[i]
	}
	for i, in := range p.inputs {
		slots[in.slot] = feeds[i]
		rc.emit(in.value.Name, feeds[i])
	}
	for _, s := range p.folded {
		rc.emit(p.names[s], slots[s])
	}
	args := make([]*tensor.Tensor, 0, 8)
	// held marks the slots counted in the arena: only those are released.
	var held []bool
	if rc.arena != nil {
		held = make([]bool, p.nslots)
	}
	pruned := rc.needed != nil && rc.depth == 1
	for i := range p.steps {
		st := &p.steps[i]
		if err := rc.ctx.Err(); err != nil {
			return nil, err
		}
		if pruned && !rc.needed[i] {
			p.free(rc, st, slots, held)
			continue
		}
		args = args[:0]
		for _, s := range st.in {
			if s < 0 {
				args = append(args, nil)
			} else {
				args = append(args, slots[s])
			}
		}
		var t0 time.Time
		if profiling {
			rc.kernel = ""
			t0 = time.Now()
		}
		rc.place = st.place
		outs, err := runKernel(st, rc, args)
		rc.place = nil
		if err != nil {
			return nil, err
		}
		if profiling {
			rc.profile.record(st.node.Name, st.node.OpType, strings.TrimSpace(st.fused+" "+rc.kernel), rc.lane, t0, time.Since(t0))
			t0 = time.Now()
		}
		for j, s := range st.out {
			if s < 0 {
				continue
			}
			if j >= len(outs) || outs[j] == nil {
				return nil, fmt.Errorf("%s: output %d was not computed", st.node, j)
			}
			slots[s] = outs[j]
			if held != nil {
				rc.arena.hold(outs[j])
				held[s] = true
			}
			rc.emit(p.names[s], outs[j])
		}
		if profiling && rc.tap != nil {
			rc.profile.record(tapsNode, tapsNode, "", rc.lane, t0, time.Since(t0))
		}
		p.free(rc, st, slots, held)
	}
	if pruned {
		return nil, nil
	}
	res := make([]*tensor.Tensor, len(p.outputs))
	for i, s := range p.outputs {
		if slots[s] == nil {
			return nil, fmt.Errorf("graph output %q was not computed", p.names[s])
		}
		res[i] = slots[s]
	}
	return res, nil
}

// free drops the slots whose last reader is st, giving the arena back
// the buffers it counted.
func (p *program) free(rc *runCtx, st *step, slots []*tensor.Tensor, held []bool) {
	for _, s := range st.free {
		if held != nil && held[s] {
			rc.arena.release(slots[s])
			held[s] = false
		}
		slots[s] = nil
	}
}

// needed marks the steps that compute the values named in want and the
// steps those read from. It returns nil, so that every step runs, when a
// name is none of the graph's own values (a value inside a subgraph).
func (p *program) needed(want map[string]bool) []bool {
	producer := map[string]int{}
	bySlot := map[int]int{}
	for i := range p.steps {
		st := &p.steps[i]
		for _, n := range append([]*onnxgraph.Node{st.node}, st.covers...) {
			for _, v := range n.Outputs {
				if v != nil {
					producer[v.Name] = i
				}
			}
		}
		for _, s := range st.out {
			if s >= 0 {
				bySlot[s] = i
			}
		}
	}
	need := make([]bool, len(p.steps))
	var stack []int
	mark := func(i int) {
		if !need[i] {
			need[i] = true
			stack = append(stack, i)
		}
	}
	for name := range want {
		if i, ok := producer[name]; ok {
			mark(i)
		} else if !slices.Contains(p.names, name) {
			return nil
		}
	}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range p.steps[i].in {
			if j, ok := bySlot[s]; ok && s >= 0 {
				mark(j)
			}
		}
	}
	return need
}

// runKernel runs one step, turning a panic in a kernel (a bug, or input the
// checks missed) into an error that names the node.
func runKernel(st *step, rc *runCtx, args []*tensor.Tensor) (outs []*tensor.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: internal error: %v", st.node, r)
		}
	}()
	outs, err = st.k(rc, args)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", st.node, err)
	}
	return outs, nil
}

// compiler turns graphs into programs, collecting unsupported nodes.
type compiler struct {
	model   *onnxgraph.Model
	threads int
	// noFuse disables Conv fusion (tests compare both ways).
	noFuse bool
	// convWay is the SgemmConv way asked for (Options.ConvWay).
	convWay kernels.ConvWay
	// constOf gives the compile-time value of a value of the graph being
	// compiled (nil when it is computed at run time).
	constOf func(*onnxgraph.Value) *tensor.Tensor
	// choices are the kernel choices made at compile time, by node.
	choices     map[string]string
	unsupported []Unsupported
	// packs bounds what the session's GEMM nodes keep packed (nil: no
	// bound).
	packs *packBudget
}

// newPackCache is a pack cache for one node, drawing on the session's
// budget.
func (c *compiler) newPackCache() *packCache { return &packCache{budget: c.packs} }

// compileGraph compiles g. outer names the enclosing values the graph may
// read (in the order the caller will pass them); formal is nil for the main
// graph (its inputs are g.Inputs) and names the subgraph's formal inputs.
func (c *compiler) compileGraph(g *onnxgraph.Graph, outer []*onnxgraph.Value, _ []string) (*program, error) {
	p := &program{graph: g, consts: map[int]*tensor.Tensor{}}
	slotOf := map[*onnxgraph.Value]int{}
	newSlot := func(v *onnxgraph.Value) int {
		if s, ok := slotOf[v]; ok {
			return s
		}
		s := p.nslots
		p.nslots++
		slotOf[v] = s
		p.names = append(p.names, v.Name)
		return s
	}
	for _, v := range outer {
		p.outer = append(p.outer, newSlot(v))
	}
	for _, v := range g.Initializers {
		s := newSlot(v)
		t, err := c.constTensor(v)
		if err != nil {
			return nil, err
		}
		p.consts[s] = t
	}
	for _, v := range g.Proto.GetInput() {
		val := g.Value(v.GetName())
		if val == nil || val.IsInitializer && !slices.Contains(g.Inputs, val) {
			continue
		}
		p.inputs = append(p.inputs, inputSlot{value: val, slot: newSlot(val)})
	}
	lastUse := map[int]int{}
	constOf := func(v *onnxgraph.Value) *tensor.Tensor {
		if v == nil {
			return nil
		}
		s, ok := slotOf[v]
		if !ok {
			return nil
		}
		return p.consts[s]
	}
	outerConsts := c.constOf
	c.constOf = constOf
	defer func() { c.constOf = outerConsts }()
	// fusedAway holds the nodes whose work a fused Conv step does.
	fusedAway := map[*onnxgraph.Node]bool{}
	ready := func(v *onnxgraph.Value) bool {
		_, ok := slotOf[v]
		return ok
	}
	for _, n := range g.Nodes {
		if fusedAway[n] {
			continue
		}
		st := step{node: n}
		var chain *convChain
		var siluMul, dequant *onnxgraph.Node
		var hswish *hardSwishChain
		switch {
		case c.noFuse:
		case ops.FusionOf(n) == ops.FuseConv:
			chain = planConvChain(n, constOf, ready)
		case ops.FusionOf(n) == ops.FuseSigmoidMul:
			siluMul = planSiLU(n)
		case ops.FusionOf(n) == ops.FuseRoundTrip:
			dequant = planRoundTrip(n, constOf)
		default:
			hswish = c.planHardSwish(n, constOf)
		}
		var ew *ewChain
		if !c.noFuse && chain == nil && siluMul == nil && hswish == nil && dequant == nil {
			ew = c.planEWChain(n, func(m *onnxgraph.Node) bool { return fusedAway[m] })
		}
		args := append(slices.Clone(n.Inputs), n.OuterInputs...)
		if ew != nil {
			args = []*onnxgraph.Value{ew.x}
		}
		if chain != nil && chain.add != nil {
			// The fused step reads the residual after the Conv's inputs.
			args = append(args, chain.residual)
		}
		allConst := true
		for _, v := range args {
			if v == nil {
				st.in = append(st.in, -1)
				continue
			}
			s, ok := slotOf[v]
			if !ok {
				// A value of an enclosing graph that the caller did not pass:
				// the view guarantees this does not happen for valid models.
				return nil, fmt.Errorf("%s: input %q is not available in graph %q", n, v.Name, g.Name)
			}
			st.in = append(st.in, s)
			if _, isConst := p.consts[s]; !isConst {
				allConst = false
			}
		}
		if chain != nil && allConst {
			chain = nil
			st.in = st.in[:len(n.Inputs)+len(n.OuterInputs)]
		}
		if allConst {
			siluMul, hswish, dequant = nil, nil, nil
		}
		outs := n.Outputs
		switch {
		case chain != nil:
			outs = []*onnxgraph.Value{chain.out}
		case siluMul != nil:
			outs = siluMul.Outputs
		case hswish != nil:
			outs = hswish.tail.Outputs
		case dequant != nil:
			outs = dequant.Outputs
		case ew != nil:
			outs = []*onnxgraph.Value{ew.out}
		}
		for _, v := range outs {
			if v == nil {
				st.out = append(st.out, -1)
				continue
			}
			st.out = append(st.out, newSlot(v))
		}
		var k kernel
		var err error
		if chain != nil {
			k, err = c.buildConvChain(chain, constOf)
			if err == nil {
				for _, f := range []*onnxgraph.Node{chain.bn, chain.add, chain.act} {
					if f != nil {
						fusedAway[f] = true
						st.covers = append(st.covers, f)
					}
				}
				st.fused = chain.fusedOps()
			}
		} else if siluMul != nil {
			k, err = c.buildSiLU(n, siluMul)
			if err == nil {
				fusedAway[siluMul] = true
				st.covers = []*onnxgraph.Node{siluMul}
				st.fused = "+Mul"
			}
		} else if dequant != nil {
			k, err = c.buildRoundTrip(n, dequant)
			if err == nil {
				fusedAway[dequant] = true
				st.covers = []*onnxgraph.Node{dequant}
				st.fused = "+DequantizeLinear"
			}
		} else if hswish != nil {
			k, err = c.buildHardSwish(hswish, constOf)
			if err == nil {
				fusedAway[hswish.clip], fusedAway[hswish.mul], fusedAway[hswish.tail] = true, true, true
				st.covers = []*onnxgraph.Node{hswish.clip, hswish.mul, hswish.tail}
				st.fused = hswish.fusedOps()
			}
		} else if ew != nil {
			k, err = c.buildEWChain(ew)
			if err == nil {
				for _, f := range ew.nodes[1:] {
					fusedAway[f] = true
				}
				st.covers = slices.Clone(ew.nodes[1:])
				st.fused = ew.fusedOps()
			}
		} else {
			k, err = c.build(n)
		}
		if err != nil {
			var fe *featureError
			if errors.As(err, &fe) {
				c.unsupported = append(c.unsupported, Unsupported{Node: n.Name, OpType: n.OpType, Domain: n.Domain, Opset: n.Opset(), Feature: fe.msg})
				continue
			}
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		st.k = k
		if allConst && len(c.unsupported) == 0 && foldable(n) {
			args := make([]*tensor.Tensor, len(st.in))
			for i, s := range st.in {
				if s >= 0 {
					args[i] = p.consts[s]
				}
			}
			rc := &runCtx{ctx: context.Background(), threads: c.threads}
			outs, err := runKernel(&st, rc, args)
			if err != nil {
				return nil, fmt.Errorf("folding constants: %w", err)
			}
			for j, s := range st.out {
				if s >= 0 && j < len(outs) {
					p.consts[s] = outs[j]
					p.folded = append(p.folded, s)
				}
			}
			continue
		}
		for _, s := range st.in {
			if s >= 0 {
				lastUse[s] = len(p.steps)
			}
		}
		p.steps = append(p.steps, st)
	}
	for _, v := range g.Outputs {
		s, ok := slotOf[v]
		if !ok {
			return nil, fmt.Errorf("graph %q: output %q is not computed by any node", g.Name, v.Name)
		}
		p.outputs = append(p.outputs, s)
	}
	planConcats(p)
	// A slot is freed after its last reader unless it outlives the run:
	// constants, graph outputs and values that enclosing graphs own.
	keep := map[int]bool{}
	for _, s := range p.outputs {
		keep[s] = true
	}
	for _, s := range p.outer {
		keep[s] = true
	}
	for _, s := range sortedIntKeys(lastUse) {
		if _, isConst := p.consts[s]; isConst || keep[s] {
			continue
		}
		st := &p.steps[lastUse[s]]
		st.free = append(st.free, s)
	}
	return p, nil
}

// constTensor decodes an initializer or Constant into compute form.
func (c *compiler) constTensor(v *onnxgraph.Value) (*tensor.Tensor, error) {
	t, err := tensor.FromProtoReadOnly(v.Const, c.model)
	if err != nil {
		return nil, fmt.Errorf("initializer %q: %w", v.Name, err)
	}
	return toCompute(t)
}

// foldable reports whether a node whose inputs are all constant may be
// computed at compile time: deterministic ops without subgraphs.
func foldable(n *onnxgraph.Node) bool {
	if len(n.Subgraphs) > 0 {
		return false
	}
	switch n.OpType {
	case "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli":
		return false
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedIntKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package passes

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

const adaroundAlgorithmName = "adaround"

// The rectified sigmoid's stretch (Nagel et al. 2020): h(v) =
// clamp(σ(v)·(ζ − γ) + γ, 0, 1) reaches 0 and 1 at finite v.
const (
	adaZeta  = 1.1
	adaGamma = -0.1
)

// adaLayer is one Conv, ConvTranspose, Gemm or MatMul whose constant
// weight AdaRound rounds. The weight is seen, per group, as an ng×kg
// matrix: ng outputs, each the dot product of kg input features (input
// channels × kernel positions for a convolution) with its row.
type adaLayer struct {
	node   *onnxgraph.Node
	weight *onnxgraph.Value
	plan   *TensorPlan
	w      []float32
	shape  []int
	// groups, ng and kg: see the type's comment. A Gemm or MatMul has one
	// group.
	groups, ng, kg int
	// index is the flat position in w of row o (global output), feature k.
	index func(o, k int) int
	// bias is subtracted from the float output to give the target of the
	// weight product (nil: none); alpha divides it (Gemm's alpha).
	bias  []float32
	alpha float32
	// patches is a model that turns a ConvTranspose's input into its
	// patch matrix (nil for the others: a Conv's patches are the engine's
	// column matrix, and Gemm's and MatMul's input rows are theirs).
	patches *onnxgraph.Model
	// upstream are the layers whose output reaches this layer's input.
	upstream []int

	// halves are the statistics of the even calibration samples, which
	// the rounding is fitted on, and of the odd ones, which check it.
	halves                 [2]adaStats
	stride, pos, samplePos int
}

// adaStats are a layer's statistics over some calibration rows, per
// group: the quadratic form A = XᵀX (kg×kg) and resid = Xᵀ(XWᵀ − T)
// (kg×ng); per output: signal = Σ y² of the float output and inputErr =
// Σ (xw − t)², the error of the float weights on the quantized input.
type adaStats struct {
	form             []adaForm
	resid            [][]float32
	signal, inputErr []float64
	rows             int
}

// adaForm is one group's A = XᵀX, held as the sum itself (gram, kg×kg) or,
// when the rows are fewer than half of kg, as the rows X (r×kg): products
// D·A then cost 2·ng·kg·r instead of ng·kg², and the rows take less memory
// than the sum. The last layers of a CNN read long patches at few output
// positions (ResNet-18's 3×3 convolutions on 512 channels: kg = 4608,
// 49 positions a sample).
type adaForm struct {
	gram   []float32
	x      []float32
	byRows bool
	kg     int
	tmp    []float32
	// packs are mul's right-hand operands (the sum, or Xᵀ and X), which
	// stay the same through a layer's iterations: packed once, on the
	// first product, instead of by every product (packed products are
	// bit-identical to unpacked ones).
	packs []*kernels.PackedB
}

// mul sets out = D·A for D of ng rows (ng×kg, both row-major).
func (f *adaForm) mul(threads, ng int, d, out []float32) {
	kg := f.kg
	if !f.byRows {
		if f.packs == nil {
			f.packs = []*kernels.PackedB{kernels.PackB(false, kg, kg, f.gram, kg)}
		}
		kernels.SgemmPackedB(threads, false, ng, 1, d, kg, f.packs[0], 0, out, kg, nil)
		return
	}
	r := len(f.x) / kg
	if r == 0 {
		clear(out[:ng*kg])
		return
	}
	if len(f.tmp) < ng*r {
		f.tmp = make([]float32, ng*r)
	}
	if f.packs == nil {
		f.packs = []*kernels.PackedB{kernels.PackB(true, kg, r, f.x, kg), kernels.PackB(false, r, kg, f.x, kg)}
	}
	kernels.SgemmPackedB(threads, false, ng, 1, d, kg, f.packs[0], 0, f.tmp, r, nil)
	kernels.SgemmPackedB(threads, false, ng, 1, f.tmp, r, f.packs[1], 0, out, kg, nil)
}

// add sums the rows xr (rows×kg) into A.
func (f *adaForm) add(threads int, xr []float32) {
	f.packs = nil
	if f.byRows {
		f.x = append(f.x, xr...)
		return
	}
	kg := f.kg
	kernels.SgemmParallel(threads, true, false, kg, kg, len(xr)/kg, 1, xr, kg, xr, kg, 1, f.gram, kg)
}

// runAdaRound is AdaRound (Nagel et al., "Up or Down? Adaptive Rounding
// for Post-Training Quantization", 2020) on the plan's weight qparams:
// layer by layer in graph order, each weight's rounding direction is
// learned so that the layer's output on its input in the quantized model
// (the layers before already rounded, activations quantized as finalize
// writes them) matches the float layer's output on its float input. The
// objective is quadratic in the weight, so each layer needs only XᵀX and
// Xᵀ(XW − T) of at most cfg.Rows rows, summed batch by batch: memory holds
// one batch of one layer's patches and two small matrices per layer, and
// the frontiers' values that cross the current cut (bounded by
// frontierBudget), never every layer's activations. Layers whose inputs do
// not depend on each other share a pass over the data; the passes are
// sequential because a layer's rounding compensates part of its input's
// error, which depends on the rounding of every layer before it. A layer keeps round-to-nearest
// in every output whose error the learned rounding does not lower.
func runAdaRound(ctx context.Context, u *Unit, cfg *config.AdaRound) error {
	if err := ownModel(u); err != nil {
		return err
	}
	m := u.Model
	// The float model as it is now: the target every layer matches.
	float, err := m.Derive(proto.CloneOf(m.Proto), nil)
	if err != nil {
		return err
	}
	var layers []*adaLayer
	byNode := map[*onnxgraph.Node]int{}
	for _, n := range m.Graph.Nodes {
		l, why, err := adaLayerOf(u, n, cfg)
		if err != nil {
			return err
		}
		if why != "" {
			u.Layers = append(u.Layers, LayerReport{Algorithm: adaroundAlgorithmName, Node: n.Name, OpType: n.OpType, Measure: "output", Skipped: why})
		}
		if l != nil {
			byNode[n] = len(layers)
			layers = append(layers, l)
		}
	}
	if len(layers) == 0 {
		return nil
	}
	linkUpstream(m, layers, byNode)
	// The float model's layer outputs and the quantized model's layer
	// inputs are read wave by wave through frontiers: each node runs once
	// per batch, not once per wave.
	var outs []string
	for _, l := range layers {
		outs = append(outs, l.node.Outputs[0].Name)
	}
	floats, err := newFrontier(u.Data, cfg.Samples, float, outs)
	if err != nil {
		return fmt.Errorf("%s: %w", adaroundAlgorithmName, err)
	}
	var quants *frontier
	done := make([]bool, len(layers))
	for remaining := len(layers); remaining > 0; {
		// One pass over the data serves the layers whose inputs no layer
		// left to round reaches.
		var wave []*adaLayer
		var ready []int
		for i, l := range layers {
			if !done[i] && allDone(l.upstream, done) {
				wave = append(wave, l)
				ready = append(ready, i)
			}
		}
		for _, i := range ready {
			done[i] = true
		}
		remaining -= len(ready)
		if err := adaCollect(ctx, u, float, floats, &quants, layers, wave, cfg); err != nil {
			return fmt.Errorf("%s: %w", adaroundAlgorithmName, err)
		}
		for _, l := range wave {
			if err := ctx.Err(); err != nil {
				return err
			}
			rep, err := l.round(u, cfg)
			if err != nil {
				return fmt.Errorf("%s: %s: weight %q: %w", adaroundAlgorithmName, l.node, l.weight.Name, err)
			}
			u.Layers = append(u.Layers, rep)
		}
	}
	return nil
}

func allDone(idx []int, done []bool) bool {
	for _, i := range idx {
		if !done[i] {
			return false
		}
	}
	return true
}

// linkUpstream fills each layer's upstream layers: those on a path from
// the graph's inputs to its activation input.
func linkUpstream(m *onnxgraph.Model, layers []*adaLayer, byNode map[*onnxgraph.Node]int) {
	words := (len(layers) + 63) / 64
	reach := map[string][]uint64{} // value → the layers upstream of it, inclusive
	for _, n := range m.Graph.Nodes {
		set := make([]uint64, words)
		for _, in := range n.Inputs {
			if in == nil {
				continue
			}
			for i, w := range reach[in.Name] {
				set[i] |= w
			}
		}
		if i, ok := byNode[n]; ok {
			l := layers[i]
			for j := range layers {
				if set[j/64]&(1<<(j%64)) != 0 {
					l.upstream = append(l.upstream, j)
				}
			}
			set[i/64] |= 1 << (i % 64)
		}
		for _, out := range n.Outputs {
			if out != nil {
				reach[out.Name] = set
			}
		}
	}
}

// adaLayerOf returns n as an AdaRound layer, or why it is not one ("" for
// nodes the algorithm does not apply to at all).
func adaLayerOf(u *Unit, n *onnxgraph.Node, cfg *config.AdaRound) (*adaLayer, string, error) {
	switch n.OpType {
	case "Conv", "ConvTranspose", "Gemm", "MatMul":
	default:
		return nil, "", nil
	}
	if n.Domain != "" || len(n.Inputs) < 2 || n.Inputs[0] == nil || n.Inputs[1] == nil || len(n.Outputs) == 0 {
		return nil, "", nil
	}
	wv, tp, why := roundableWeight(u, n, adaroundAlgorithmName, &cfg.AlgorithmCommon)
	if tp == nil {
		return nil, why, nil
	}
	w, shape, err := constFloats(u.Model, wv)
	if err != nil {
		return nil, "", fmt.Errorf("%s: weight %q: %w", n, wv.Name, err)
	}
	l := &adaLayer{node: n, weight: wv, plan: tp, w: w, shape: shape, groups: 1, alpha: 1}
	switch n.OpType {
	case "Conv", "ConvTranspose":
		if len(shape) < 3 {
			return nil, fmt.Sprintf("weight of rank %d, want at least 3", len(shape)), nil
		}
		if a := n.Attr("group"); a != nil && a.GetI() > 1 {
			l.groups = int(a.GetI())
		}
		ks := tensor.NumElements(shape[2:])
		if n.OpType == "Conv" {
			// W [N, C/g, k...]: row o is contiguous.
			l.ng, l.kg = shape[0]/l.groups, tensor.NumElements(shape[1:])
			l.index = func(o, k int) int { return o*l.kg + k }
		} else {
			// W [C, N/g, k...]: feature k = (c, kp) of group o/ng.
			cg := shape[0] / l.groups
			l.ng, l.kg = shape[1], cg*ks
			l.index = func(o, k int) int {
				g, c, kp := o/l.ng, k/ks, k%ks
				return ((g*cg+c)*l.ng+o%l.ng)*ks + kp
			}
		}
		if n.OpType == "ConvTranspose" {
			// A Conv's patches are the engine's column matrix
			// (runtime.ConvPatches); a ConvTranspose's come from a model.
			if l.patches, err = patchModel(u.Model, n, shape, l.groups); err != nil {
				return nil, "", err
			}
		}
	default:
		if len(shape) != 2 {
			return nil, fmt.Sprintf("weight of rank %d, want a matrix", len(shape)), nil
		}
		l.kg, l.ng = shape[0], shape[1]
		l.index = func(o, k int) int { return k*l.ng + o }
		if a := n.Attr("transB"); n.OpType == "Gemm" && a != nil && a.GetI() != 0 {
			l.kg, l.ng = shape[1], shape[0]
			l.index = func(o, k int) int { return o*l.kg + k }
		}
		if a := n.Attr("alpha"); n.OpType == "Gemm" && a != nil {
			l.alpha = a.GetF()
		}
		if l.alpha == 0 {
			return nil, "Gemm alpha is 0", nil
		}
	}
	if len(n.Inputs) > 2 && n.Inputs[2] != nil {
		why, err := l.readBias(u.Model, n)
		if why != "" || err != nil {
			return nil, why, err
		}
	}
	return l, "", nil
}

// readBias reads the bias the float output carries (Conv's B, Gemm's
// beta·C), per output.
func (l *adaLayer) readBias(m *onnxgraph.Model, n *onnxgraph.Node) (string, error) {
	bv := n.Inputs[2]
	if !bv.IsConst() {
		return "the bias is not a constant", nil
	}
	b, _, err := constFloats(m, bv)
	if err != nil {
		return "", fmt.Errorf("%s: bias %q: %w", n, bv.Name, err)
	}
	out := l.groups * l.ng
	beta := float32(1)
	if a := n.Attr("beta"); n.OpType == "Gemm" && a != nil {
		beta = a.GetF()
	}
	l.bias = make([]float32, out)
	switch len(b) {
	case out:
		for o := range out {
			l.bias[o] = beta * b[o]
		}
	case 1:
		for o := range out {
			l.bias[o] = beta * b[0]
		}
	default:
		return fmt.Sprintf("bias of %d values for %d outputs", len(b), out), nil
	}
	return "", nil
}

// patchModel is a model holding a copy of the ConvTranspose n (its
// attributes, group included) whose weight is the identity over its
// kernel window: output channel g·kg + c·ks + kp of it receives input
// channel c of group g through kernel position kp only, so it writes the
// patch matrix of its input with the layer's own geometry, and the
// layer's output at every position is its weight rows times that
// position's patch.
func patchModel(m *onnxgraph.Model, n *onnxgraph.Node, shape []int, groups int) (*onnxgraph.Model, error) {
	ks := tensor.NumElements(shape[2:])
	cg := shape[0] / groups
	idShape := append([]int{groups * cg, cg * ks}, shape[2:]...)
	id := make([]float32, tensor.NumElements(idShape))
	for g := range groups {
		for c := range cg {
			for kp := range ks {
				// [g·cg + c, c·ks + kp, kp]
				id[((g*cg+c)*cg*ks+c*ks+kp)*ks+kp] = 1
			}
		}
	}
	g := &onnxpb.GraphProto{Name: proto.String("patches")}
	wp, err := tensor.ToProto(tensor.FromFloat32(id, idShape...), "identity")
	if err != nil {
		return nil, err
	}
	g.Initializer = append(g.Initializer, wp)
	g.Input = append(g.Input, floatValueInfo("x"))
	g.Output = append(g.Output, floatValueInfo("patches"))
	np := proto.CloneOf(n.Proto)
	np.Name = proto.String("patches")
	np.Input = []string{"x", "identity"}
	np.Output = []string{"patches"}
	g.Node = append(g.Node, np)
	mp := &onnxpb.ModelProto{IrVersion: m.Proto.IrVersion, OpsetImport: m.Proto.GetOpsetImport(), Graph: g}
	return onnxgraph.FromProto(mp, "")
}

// adaCollect runs the calibration samples through the float model and the
// model finalize would write now (earlier layers rounded), each as far as
// the wave needs beyond what its frontier holds, and sums each wave
// layer's statistics over its rows: the patches of its quantized input
// against its float output. The quantized model's frontier is made at the
// first wave (*quants nil), its targets every layer's input.
func adaCollect(ctx context.Context, u *Unit, float *onnxgraph.Model, floats *frontier, quants **frontier, layers, wave []*adaLayer, cfg *config.AdaRound) error {
	now, err := DecidedCopy(u.Model, u.Plan, u.Stats)
	if err != nil {
		return err
	}
	res, err := finalize.Write(u.Model, now, u.Write)
	if err != nil {
		return err
	}
	if *quants == nil {
		var ins []string
		for _, l := range layers {
			ins = append(ins, quantizedInput(res.Model, l.node))
		}
		if *quants, err = newFrontier(u.Data, cfg.Samples, res.Model, ins); err != nil {
			return err
		}
	}
	d := u.Data
	patchSessions := make([]runtime.Session, len(wave))
	defer func() {
		for _, s := range patchSessions {
			if s != nil {
				s.Close()
			}
		}
	}()
	var outTaps, inTaps []string
	for i, l := range wave {
		if l.patches != nil {
			if patchSessions[i], err = runtime.Open(d.Engine, l.patches, d.Runtime); err != nil {
				return err
			}
		}
		outTaps = append(outTaps, l.node.Outputs[0].Name)
		inTaps = append(inTaps, quantizedInput(res.Model, l.node))
		l.stride, l.pos, l.samplePos = 0, 0, 0
	}
	fstep, err := floats.step(float, outTaps)
	if err != nil {
		return fmt.Errorf("float model: %w", err)
	}
	defer fstep.close()
	qstep, err := (*quants).step(res.Model, inTaps)
	if err != nil {
		return fmt.Errorf("quantized model: %w", err)
	}
	defer qstep.close()
	total := d.sampleCount(cfg.Samples)
	for b, span := range floats.batches {
		if err := ctx.Err(); err != nil {
			return err
		}
		start, end := span[0], span[1]
		fo, err := fstep.run(ctx, b)
		if err != nil {
			return fmt.Errorf("samples %d..%d: float model: %w", start, end-1, err)
		}
		qi, err := qstep.run(ctx, b)
		if err != nil {
			return fmt.Errorf("samples %d..%d: quantized model: %w", start, end-1, err)
		}
		for i, l := range wave {
			x, y := qi[inTaps[i]], fo[outTaps[i]]
			if x == nil || y == nil {
				return fmt.Errorf("%s: its input %q or output %q was not computed", l.node, inTaps[i], outTaps[i])
			}
			if err := l.accumulate(ctx, patchSessions[i], x, y, total, cfg.Rows, threadCount(d.Runtime.Threads)); err != nil {
				return fmt.Errorf("samples %d..%d: %s: %w", start, end-1, l.node, err)
			}
		}
	}
	for _, l := range wave {
		if l.halves[0].form == nil {
			return fmt.Errorf("%s: no calibration sample reached it", l.node)
		}
	}
	return nil
}

// quantizedInput is the name, in the written model q, of what the node
// reads as its activation input. A dequantized activation keeps the float
// value's name (finalize.ValueNaming), except a graph input's: its
// consumers read the end of the chain (Cast →) QuantizeLinear →
// DequantizeLinear (→ Cast) hanging off it.
func quantizedInput(q *onnxgraph.Model, n *onnxgraph.Node) string {
	name := n.Inputs[0].Name
	if n.Inputs[0].Producer != nil {
		return name
	}
	v := q.Graph.Value(name)
	for _, want := range []string{"Cast", "QuantizeLinear", "DequantizeLinear", "Cast"} {
		if v == nil {
			break
		}
		var next *onnxgraph.Value
		for _, c := range v.Consumers {
			if c.OpType == want && len(c.Outputs) > 0 {
				next = c.Outputs[0]
				break
			}
		}
		switch {
		case next != nil:
			v = next
			if want == "DequantizeLinear" {
				name = v.Name
			}
		case want == "Cast":
			// optional
		default:
			return name
		}
	}
	if v != nil && v.Name != name && len(v.Consumers) > 0 && v.Producer != nil && v.Producer.OpType == "Cast" {
		name = v.Name
	}
	return name
}

// floatCopy is value name's tensor t as float32 values of its own.
func floatCopy(name string, t *tensor.Tensor) (*tensor.Tensor, error) {
	f, err := t.AsFloat32()
	if err != nil {
		return nil, fmt.Errorf("value %q: %w", name, err)
	}
	return tensor.FromFloat32(append([]float32(nil), f...), t.Shape...), nil
}

// runKeeping runs s on in as far as the named values need and returns
// copies of them.
func runKeeping(ctx context.Context, s runtime.Session, in map[string]*tensor.Tensor, names []string) (map[string]*tensor.Tensor, error) {
	kept := map[string]*tensor.Tensor{}
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		if _, ok := kept[name]; ok || tapErr != nil {
			return
		}
		kept[name], tapErr = floatCopy(name, t)
	}
	if _, err := s.Run(ctx, in, runtime.RunOptions{Tap: tap, TapValues: names, TapsOnly: true}); err != nil {
		return nil, err
	}
	return kept, tapErr
}

// accumulate adds one batch: x is the layer's input in the quantized
// model, y its output in the float model.
func (l *adaLayer) accumulate(ctx context.Context, patches runtime.Session, x, y *tensor.Tensor, samples, maxRows, threads int) error {
	xf := x
	switch {
	case patches != nil:
		out, err := patches.Run(ctx, map[string]*tensor.Tensor{"x": x}, runtime.RunOptions{})
		if err != nil {
			return fmt.Errorf("patches: %w", err)
		}
		xf = out["patches"]
	case l.node.OpType == "Conv":
		var err error
		if xf, err = runtime.ConvPatches(l.node, x, l.shape, threads); err != nil {
			return err
		}
	}
	patched := xf != x
	xs, err := xf.AsFloat32()
	if err != nil {
		return err
	}
	ys, err := y.AsFloat32()
	if err != nil {
		return err
	}
	out := l.groups * l.ng
	// Rows: for a convolution, (sample, output position) with the patch on
	// axis 1; for Gemm and MatMul, every leading index with the features on
	// the last axis.
	var n, positions int
	if patched {
		if len(xf.Shape) < 2 || xf.Shape[1] != l.groups*l.kg || len(y.Shape) < 2 || y.Shape[1] != out {
			return fmt.Errorf("patches %v and output %v do not fit the weight %v", xf.Shape, y.Shape, l.shape)
		}
		n, positions = xf.Shape[0], tensor.NumElements(xf.Shape[2:])
		if tensor.NumElements(y.Shape[2:]) != positions || y.Shape[0] != n {
			return fmt.Errorf("patches %v and output %v do not fit", xf.Shape, y.Shape)
		}
	} else {
		if len(xs)%l.kg != 0 || len(ys)%out != 0 || len(xs)/l.kg != len(ys)/out {
			return fmt.Errorf("input %v and output %v do not fit the weight %v", x.Shape, y.Shape, l.shape)
		}
		n, positions = len(xs)/l.kg, 1
	}
	if l.stride == 0 {
		per := positions
		if !patched {
			per = max(n/max(1, x.Shape[0]), 1)
		}
		l.stride = max(1, (samples*per+maxRows-1)/maxRows)
		l.allocStats((samples*per + l.stride - 1) / l.stride)
	}
	// The kept rows: every stride-th of the rows seen so far, split by
	// the parity of their sample.
	perSample := n * positions / max(x.Shape[0], 1)
	var keep [2][]int
	for r := range n * positions {
		if (l.pos+r)%l.stride == 0 {
			h := (l.samplePos + r/max(perSample, 1)) % 2
			keep[h] = append(keep[h], r)
		}
	}
	l.pos += n * positions
	l.samplePos += x.Shape[0]
	for h, rows := range keep {
		if len(rows) > 0 {
			l.accumulateRows(&l.halves[h], rows, xs, ys, patched, positions, threads)
		}
	}
	return nil
}

// allocStats makes both halves' statistics for about kept rows in all,
// choosing the form of A by the rows a half gets.
func (l *adaLayer) allocStats(kept int) {
	byRows := 2*((kept+1)/2) < l.kg
	for h := range l.halves {
		st := &l.halves[h]
		st.form, st.resid = make([]adaForm, l.groups), make([][]float32, l.groups)
		for g := range l.groups {
			st.form[g] = adaForm{kg: l.kg, byRows: byRows}
			if !byRows {
				st.form[g].gram = make([]float32, l.kg*l.kg)
			}
			st.resid[g] = make([]float32, l.kg*l.ng)
		}
		out := l.groups * l.ng
		st.signal, st.inputErr, st.rows = make([]float64, out), make([]float64, out), 0
	}
}

// accumulateRows adds the rows keep of one batch (patches or input rows
// xs, float outputs ys) to st.
func (l *adaLayer) accumulateRows(st *adaStats, keep []int, xs, ys []float32, conv bool, positions, threads int) {
	out := l.groups * l.ng
	rows := len(keep)
	xr := make([]float32, rows*l.kg)
	tr := make([]float32, rows*l.ng)
	rr := make([]float32, rows*l.ng)
	sig := make([]float32, rows*l.ng) // the float output, bias included
	wg := make([]float32, l.ng*l.kg)
	for g := range l.groups {
		for i, r := range keep {
			s, p := r/positions, r%positions
			dst := xr[i*l.kg : (i+1)*l.kg]
			for k := range dst {
				if conv {
					dst[k] = xs[((s*l.groups+g)*l.kg+k)*positions+p]
				} else {
					dst[k] = xs[r*l.kg+k]
				}
			}
			for j := range l.ng {
				o := g*l.ng + j
				var v float32
				if conv {
					v = ys[(s*out+o)*positions+p]
				} else {
					v = ys[r*out+o]
				}
				sig[i*l.ng+j] = v
				if l.bias != nil {
					v -= l.bias[o]
				}
				tr[i*l.ng+j] = v / l.alpha
			}
		}
		for j := range l.ng {
			for k := range l.kg {
				wg[j*l.kg+k] = l.w[l.index(g*l.ng+j, k)]
			}
		}
		// R = X·Wᵀ − T.
		copy(rr, tr)
		kernels.SgemmParallel(threads, false, true, rows, l.ng, l.kg, 1, xr, l.kg, wg, l.kg, -1, rr, l.ng)
		for i := range rows {
			for j := range l.ng {
				o := g*l.ng + j
				y, e := float64(sig[i*l.ng+j]), float64(rr[i*l.ng+j])*float64(l.alpha)
				st.signal[o] += y * y
				st.inputErr[o] += e * e
			}
		}
		st.form[g].add(threads, xr)
		kernels.SgemmParallel(threads, true, false, l.kg, l.ng, rows, 1, xr, l.kg, rr, l.ng, 1, st.resid[g], l.ng)
	}
	st.rows += rows
}

// adaGroup is one group's rounding problem: minimise over the codes
// Σₒ δₒᵀAδₒ + 2δₒᵀgₒ, δₒ being row o of the rounded minus the float
// weight, A = XᵀX (kg×kg) and gₒ = Xᵀ(X wₒ − tₒ) (row o of an ng×kg g).
type adaGroup struct {
	ng, kg int
	w      []float32 // ng×kg, float weights
	scale  []float32 // per element
	floor  []float32 // ⌊w/scale⌋ per element
	lo, hi []float32 // code range minus the zero point, per element
	rtn    []float32 // round-to-nearest code minus the zero point
}

// extra returns, per row, δᵀAδ + 2δᵀg for the codes q (minus zero
// points): the error added to the float weights' on the quantized input.
func (p *adaGroup) extra(a *adaForm, g []float32, q []float32, threads int) []float64 {
	d := make([]float32, p.ng*p.kg)
	for i := range d {
		d[i] = p.scale[i]*q[i] - p.w[i]
	}
	da := make([]float32, p.ng*p.kg)
	a.mul(threads, p.ng, d, da)
	out := make([]float64, p.ng)
	for o := range p.ng {
		var s float64
		for k := range p.kg {
			i := o*p.kg + k
			s += float64(d[i]) * (float64(da[i]) + 2*float64(g[i]))
		}
		out[o] = s
	}
	return out
}

// learn runs AdaRound's optimisation and returns the hard codes (minus
// zero points): the rectified-sigmoid variables start at each weight's
// fractional part, Adam minimises the reconstruction error (normalised to
// 1 at round-to-nearest) plus, after the warmup, the regularisation
// λ·mean(1 − |2h − 1|^β) with β annealed from BetaStart to BetaEnd. The
// element-wise steps run in float32 in the vector kernels (the sigmoid,
// then Adam's step, kernels.AdaRoundUpdate): they are as many as the
// weights per iteration, as costly as the product with XᵀX without them.
func (p *adaGroup) learn(cfg *config.AdaRound, a *adaForm, g []float32, rtnErr float64, threads int) []float32 {
	n := p.ng * p.kg
	v := make([]float32, n)
	for i := range v {
		frac := float64(p.w[i]/p.scale[i] - p.floor[i])
		h := min(max((frac-adaGamma)/(adaZeta-adaGamma), 1e-4), 1-1e-4)
		v[i] = float32(math.Log(h / (1 - h)))
	}
	mom, vel := make([]float32, n), make([]float32, n)
	d := make([]float32, n)
	da := make([]float32, n)
	sig := make([]float32, n)
	const stretch, shift = float32(adaZeta - adaGamma), float32(adaGamma)
	// The reconstruction gradient's factor per element, 2·scale/rtnErr, and
	// the soft fraction's range inside the grid (the codes' range minus the
	// rounded-down code: exact, both are integers).
	norm := float32(1 / max(rtnErr, 1e-30))
	gradScale, low, high := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		gradScale[i] = 2 * p.scale[i] * norm
		low[i], high[i] = p.lo[i]-p.floor[i], p.hi[i]-p.floor[i]
	}
	regScale := cfg.Regularization / float64(n)
	warm := int(cfg.Warmup * float64(cfg.Iterations))
	const b1, b2 = 0.9, 0.999 // Adam's, as kernels.AdaRoundUpdate has them
	for it := range cfg.Iterations {
		parallelRows(threads, p.ng, func(o int) {
			lo, hi := o*p.kg, (o+1)*p.kg
			kernels.Sigmoid(sig[lo:hi], v[lo:hi])
			kernels.AdaRoundDelta(d[lo:hi], sig[lo:hi], p.floor[lo:hi], p.lo[lo:hi], p.hi[lo:hi], p.scale[lo:hi], p.w[lo:hi], stretch, shift)
		})
		a.mul(threads, p.ng, d, da)
		step := kernels.AdaRoundStep{Stretch: stretch, Shift: shift}
		if it >= warm {
			// λ/n·(1 − |2h − 1|^β), β annealed linearly after the warm-up.
			f := float64(it-warm) / float64(max(cfg.Iterations-warm-1, 1))
			beta := cfg.BetaStart + (cfg.BetaEnd-cfg.BetaStart)*f
			step.RegStep, step.Exponent = float32(2*regScale*beta), float32(beta-1)
		}
		t := float64(it + 1)
		step.Step, step.InvC2 = float32(cfg.LearningRate/(1-math.Pow(b1, t))), float32(1/(1-math.Pow(b2, t)))
		parallelRows(threads, p.ng, func(o int) {
			lo, hi := o*p.kg, (o+1)*p.kg
			kernels.AdaRoundUpdate(v[lo:hi], mom[lo:hi], vel[lo:hi], sig[lo:hi], da[lo:hi], g[lo:hi], gradScale[lo:hi], low[lo:hi], high[lo:hi], step)
		})
	}
	q := make([]float32, n)
	for i := range q {
		up := float32(0)
		if sig[i]*stretch+shift >= 0.5 {
			up = 1
		}
		q[i] = min(max(p.floor[i]+up, p.lo[i]), p.hi[i])
	}
	return q
}

// round learns the layer's rounding group by group on the even
// calibration samples, keeps it in each output where it lowers the error
// on the even and on the odd samples (so on all of them), round to
// nearest elsewhere, writes the rounded weight, and reports the layer's
// output SQNR over all the rows (its input from the quantized model)
// before (round to nearest) and after.
func (l *adaLayer) round(u *Unit, cfg *config.AdaRound) (LayerReport, error) {
	rep := LayerReport{Algorithm: adaroundAlgorithmName, Node: l.node.Name, OpType: l.node.OpType, Measure: "output"}
	tp := l.plan
	grid, _ := tp.Spec.IntGrid()
	layout, err := quant.NewLayout(l.shape, tp.Axis, tp.BlockSize)
	if err != nil {
		return rep, err
	}
	threads := threadCount(u.Data.Runtime.Threads)
	fit, check := &l.halves[0], &l.halves[1]
	out := make([]float32, len(l.w))
	var signal, inputErr, errRTN, errAda float64
	for _, st := range l.halves {
		for o := range l.groups * l.ng {
			signal += st.signal[o]
			inputErr += st.inputErr[o]
		}
	}
	// The statistics are of the product before Gemm's alpha scales it.
	a2 := float64(l.alpha) * float64(l.alpha)
	kept := 0
	for g := range l.groups {
		p := &adaGroup{ng: l.ng, kg: l.kg}
		n := l.ng * l.kg
		p.w, p.scale, p.floor = make([]float32, n), make([]float32, n), make([]float32, n)
		p.lo, p.hi, p.rtn = make([]float32, n), make([]float32, n), make([]float32, n)
		for j := range l.ng {
			for k := range l.kg {
				i := j*l.kg + k
				idx := l.index(g*l.ng+j, k)
				grp := layout.Of(idx)
				s, zp := tp.Params.Scales[grp], int64(tp.Params.ZeroPoints[grp])
				w := l.w[idx]
				p.w[i], p.scale[i] = w, s
				p.floor[i] = float32(math.Floor(float64(w / s)))
				p.lo[i], p.hi[i] = float32(grid.QMin-zp), float32(grid.QMax-zp)
				p.rtn[i] = float32(quant.Int(w, s, zp, grid.QMin, grid.QMax) - zp)
			}
		}
		fitA, fitG := &fit.form[g], p.rowMajor(fit.resid[g])
		checkA, checkG := &check.form[g], p.rowMajor(check.resid[g])
		rtnFit := p.extra(fitA, fitG, p.rtn, threads)
		var total float64
		for j := range l.ng {
			total += max(rtnFit[j]+fit.inputErr[g*l.ng+j], 0)
		}
		learned := p.learn(cfg, fitA, fitG, total, threads)
		adaFit := p.extra(fitA, fitG, learned, threads)
		rtnCheck := p.extra(checkA, checkG, p.rtn, threads)
		adaCheck := p.extra(checkA, checkG, learned, threads)
		for j := range l.ng {
			rtn, ada := rtnFit[j]+rtnCheck[j], adaFit[j]+adaCheck[j]
			chosen := learned
			if !(adaFit[j] < rtnFit[j] && adaCheck[j] < rtnCheck[j]) {
				chosen, ada = p.rtn, rtn
				kept++
			}
			errRTN += a2 * rtn
			errAda += a2 * ada
			for k := range l.kg {
				i := j*l.kg + k
				out[l.index(g*l.ng+j, k)] = p.scale[i] * chosen[i]
			}
		}
	}
	for h := range l.halves {
		l.halves[h].form, l.halves[h].resid = nil, nil
	}
	rep.Before = sqnrDB(signal, max(inputErr+errRTN, 0))
	rep.After = sqnrDB(signal, max(inputErr+errAda, 0))
	rep.Note = fmt.Sprintf("fitted on %d calibration rows, checked on %d; %d of %d outputs kept round-to-nearest; the quantized input alone: %s dB",
		fit.rows, check.rows, kept, l.groups*l.ng, sqnrDB(signal, inputErr))
	if !(errAda < errRTN) {
		return rep, nil
	}
	if err := setConst(u.Model, l.weight, out, l.shape); err != nil {
		return rep, err
	}
	if u.roundedWeights == nil {
		u.roundedWeights = map[string][]float32{}
	}
	u.roundedWeights[l.weight.Name] = l.w
	return rep, nil
}

// rowMajor returns a kg×ng matrix as ng×kg.
func (p *adaGroup) rowMajor(m []float32) []float32 {
	t := make([]float32, p.ng*p.kg)
	for k := range p.kg {
		for j := range p.ng {
			t[j*p.kg+k] = m[k*p.ng+j]
		}
	}
	return t
}

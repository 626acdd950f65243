package passes

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"sync"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

const gptqAlgorithmName = "gptq"

// gptqLayer is one MatMul or Gemm whose constant weight GPTQ rounds. The
// weight is viewed as a K×N matrix (K input features, N outputs), stored
// as [K, N] or, for Gemm with transB, [N, K].
type gptqLayer struct {
	node       *onnxgraph.Node
	weight     *onnxgraph.Value
	plan       *TensorPlan
	w          []float32
	shape      []int
	threads    int
	transposed bool
	k, n       int
	// offset is the flat index of the view's first element: a Conv
	// group's outputs are rows offset/k onward of the [N, k] weight.
	offset int
	// xtx is XᵀX of the layer's input over the calibration rows, shared by
	// the layers that read the same input.
	xtx *gramAccumulator
	// perm, when set, is the order of the features in the view: feature
	// k of the view is the weight's input feature perm[k] (act-order).
	perm []int
	// groups are a Conv's views, one per group (each k = C/group times
	// the kernel size, n = N/group, transposed, with its own XᵀX of the
	// group's patch rows); nil for MatMul and Gemm, whose view is l.
	groups []*gptqLayer
}

// at is the flat index of element (input feature k of the view, output n).
func (l *gptqLayer) at(k, n int) int {
	if l.perm != nil {
		k = l.perm[k]
	}
	if l.transposed {
		return l.offset + n*l.k + k
	}
	return l.offset + k*l.n + n
}

// views returns the matrices GPTQ rounds one by one: a Conv's groups, or
// the layer itself.
func (l *gptqLayer) views() []*gptqLayer {
	if l.groups != nil {
		return l.groups
	}
	return []*gptqLayer{l}
}

// parallelRows calls fn(i) for i in [0, n) on threads goroutines (0: one
// per CPU), each i once.
func parallelRows(threads, n int, fn func(i int)) {
	if threads <= 0 {
		threads = goruntime.GOMAXPROCS(0)
	}
	workers := min(threads, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// runGPTQ is GPTQ (Frantar et al., "GPTQ: Accurate Post-Training
// Quantization for Generative Pre-trained Transformers", 2023) with the
// qparams prepare chose: for every MatMul and Gemm whose constant weight
// the plan quantizes to an integer grid, it collects H = XᵀX of the
// layer's input on calibration data, dampens it by damp·mean(diag H),
// and rounds the weight one input feature at a time, each rounding error
// spread over the features not yet rounded through the Cholesky factor of
// H⁻¹ (gptqRound: in lazy batches, the products in the SGEMM kernels).
// The rounded values are written back into the float weight, which
// finalize then quantizes to the same codes. A layer keeps round-to-nearest
// when GPTQ does not lower its error ‖X(W − Ŵ)‖² (the report says so).
//
// Where planBlocks finds blocks, the layers go block by block: each
// block's inputs are the outputs of the blocks before it with their
// weights rounded, run by the block runner, which holds the activations
// crossing the current cut for all calibration samples and decodes one
// block's weights at a time. Elsewhere the float model runs once for all
// layers. Memory holds one K×K matrix per distinct input of the layers
// being rounded (all of them on the whole-model path), each factored once
// for the layers that share it and freed after the last of them.
func runGPTQ(ctx context.Context, u *Unit, cfg *config.GPTQ) error {
	if err := ownModel(u); err != nil {
		return err
	}
	// The rounded weights go to the writer's scratch file as they are
	// made (see round): the model reads them back from there.
	if err := useScratch(u); err != nil {
		return err
	}
	var layers []*gptqLayer
	for _, n := range u.Model.Graph.AllNodes() {
		l, why, err := gptqLayerOf(u, n, cfg)
		if err != nil {
			return err
		}
		if why != "" {
			u.Layers = append(u.Layers, LayerReport{Algorithm: gptqAlgorithmName, Node: n.Name, OpType: n.OpType, Measure: "output", Skipped: why})
		}
		if l != nil {
			layers = append(layers, l)
		}
	}
	if len(layers) == 0 {
		return nil
	}
	byNode := map[*onnxgraph.Node]*gptqLayer{}
	for _, l := range layers {
		byNode[l.node] = l
	}
	blocks, why := planBlocks(u.Model.Graph, func(n *onnxgraph.Node) bool { return byNode[n] != nil })
	if blocks == nil {
		u.Plan.Notes = append(u.Plan.Notes, fmt.Sprintf("%s: every layer calibrated at once on the float model's activations, not block by block: %s", gptqAlgorithmName, why))
		if err := gptqCollect(layers, u.Data.Runtime.Threads, func(taps []string, tap runtime.Tap, after func() error) error {
			return u.Data.forEachBatch(ctx, u.Model, cfg.Samples, taps, tap, after)
		}); err != nil {
			return err
		}
		return gptqRoundAll(ctx, u, cfg, layers)
	}
	u.Plan.Notes = append(u.Plan.Notes, fmt.Sprintf("%s: block by block (%d blocks): each block's layers calibrated on the outputs of the blocks before it, already rounded", gptqAlgorithmName, len(blocks)))
	r, err := newBlockRunner(u, blocks, cfg.Samples)
	if err != nil {
		return fmt.Errorf("%s: %w", gptqAlgorithmName, err)
	}
	prog := u.Data.blockProgress(gptqAlgorithmName, len(blocks))
	for _, b := range blocks {
		var bl []*gptqLayer
		for _, n := range b.layers {
			bl = append(bl, byNode[n])
		}
		collect := func(taps []string, tap runtime.Tap, after func() error) error {
			return r.run(ctx, b, taps, tap, after, false)
		}
		if gptqWholeModelBlocks {
			collect = func(taps []string, tap runtime.Tap, after func() error) error {
				return u.Data.forEachBatch(ctx, u.Model, cfg.Samples, taps, tap, after)
			}
		}
		if err := gptqCollect(bl, u.Data.Runtime.Threads, collect); err != nil {
			return err
		}
		if err := gptqRoundAll(ctx, u, cfg, bl); err != nil {
			return err
		}
		if b.index < len(blocks)-1 && !gptqWholeModelBlocks {
			if err := r.run(ctx, b, nil, nil, nil, true); err != nil {
				return fmt.Errorf("%s: %w", gptqAlgorithmName, err)
			}
		}
		prog(b)
	}
	return nil
}

// gptqWholeModelBlocks, when set, makes block-by-block GPTQ collect each
// block's layer inputs by running the whole model with the weights rounded
// so far, instead of the block runner: the slow reference the tests hold
// the block runner to.
var gptqWholeModelBlocks bool

// gptqCollect gives each layer the XᵀX of its input, one accumulator per
// distinct input of the MatMul and Gemm layers and one per group of each
// Conv (of its patches, which depend on the node's geometry), summed over
// the batches run feeds to the tap.
func gptqCollect(layers []*gptqLayer, threads int, run func(taps []string, tap runtime.Tap, after func() error) error) error {
	grams := map[string]*gramAccumulator{}
	convs := map[string][]*gptqLayer{}
	var taps []string
	tapOnce := func(in string) {
		if grams[in] == nil && convs[in] == nil {
			taps = append(taps, in)
		}
	}
	for _, l := range layers {
		in := l.node.Inputs[0].Name
		if l.groups != nil {
			tapOnce(in)
			for _, v := range l.groups {
				v.xtx = &gramAccumulator{value: in, k: v.k, sum: make([]float64, v.k*v.k), threads: threads, users: 1}
			}
			convs[in] = append(convs[in], l)
			continue
		}
		g := grams[in]
		if g == nil {
			tapOnce(in)
			g = &gramAccumulator{value: in, k: l.k, sum: make([]float64, l.k*l.k), threads: threads}
			grams[in] = g
		} else if g.k != l.k {
			return fmt.Errorf("%s: %s: input %q has %d features for one layer and %d for another", gptqAlgorithmName, l.node, in, g.k, l.k)
		}
		l.xtx = g
		g.users++
	}
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		if tapErr != nil {
			return
		}
		for _, l := range convs[name] {
			if err := l.addPatches(t, threads); err != nil {
				tapErr = fmt.Errorf("value %q: %w", name, err)
				return
			}
		}
		g := grams[name]
		if g == nil {
			return
		}
		f, err := t.AsFloat32()
		if err == nil {
			err = g.add(f, t.Shape)
		}
		if err != nil {
			tapErr = fmt.Errorf("value %q: %w", name, err)
		}
	}
	if err := run(taps, tap, func() error { return tapErr }); err != nil {
		return fmt.Errorf("%s: %w", gptqAlgorithmName, err)
	}
	for _, g := range grams {
		g.release()
	}
	for _, ls := range convs {
		for _, l := range ls {
			for _, v := range l.groups {
				v.xtx.release()
			}
		}
	}
	return nil
}

// addPatches adds one batch of the Conv's input x to each group's XᵀX:
// the patch matrix holds, per image, each group's features as contiguous
// rows over the output positions.
func (l *gptqLayer) addPatches(x *tensor.Tensor, threads int) error {
	p, err := runtime.ConvPatches(l.node, x, l.shape, threads)
	if err != nil {
		return err
	}
	ps := p.Float32s()
	positions := tensor.NumElements(p.Shape[2:])
	per := p.Shape[1] * positions
	blocksOf := func(v *gptqLayer, g int) [][]float32 {
		blocks := make([][]float32, p.Shape[0])
		for i := range blocks {
			blocks[i] = ps[i*per+g*v.k*positions : i*per+(g+1)*v.k*positions]
		}
		return blocks
	}
	if l.groups[0].k < smallGramFeatures {
		// A depthwise Conv's groups, or a stem's: products too narrow
		// for the SGEMM kernels' tiles, summed directly, group by group
		// in parallel (each group's sum its own).
		kernels.Parallel(threadCount(threads), len(l.groups), 1, func(lo, hi int) {
			for g := lo; g < hi; g++ {
				l.groups[g].xtx.addColumnsDirect(blocksOf(l.groups[g], g), positions, positions)
			}
		})
		return nil
	}
	for g, v := range l.groups {
		v.xtx.addColumns(blocksOf(v, g), positions, positions)
	}
	return nil
}

// gptqRoundAll rounds the layers, each on its collected XᵀX, and reports them.
func gptqRoundAll(ctx context.Context, u *Unit, cfg *config.GPTQ, layers []*gptqLayer) error {
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		rep, err := l.round(u, cfg.Damp, cfg.ActOrder)
		for _, v := range l.views() {
			v.xtx.done()
		}
		if err != nil {
			return fmt.Errorf("%s: %s: weight %q: %w", gptqAlgorithmName, l.node, l.weight.Name, err)
		}
		u.Layers = append(u.Layers, rep)
	}
	return nil
}

// roundableWeight is n's weight (input 1) when a rounding algorithm
// (GPTQ, AdaRound) may rewrite it: a float32 initializer of n alone,
// quantized on an integer grid, in the main graph, not excluded by the
// algorithm's settings. Otherwise tp is nil and why says why ("" when n
// has no quantized constant weight at all).
func roundableWeight(u *Unit, n *onnxgraph.Node, algorithm string, cfg *config.AlgorithmCommon) (wv *onnxgraph.Value, tp *TensorPlan, why string) {
	wv = n.Inputs[1]
	tp = u.Plan.Tensor(wv.Name)
	if tp == nil || tp.Role != Weight || tp.Params == nil || !wv.IsConst() {
		return nil, nil, ""
	}
	grid, intGrid := tp.Spec.IntGrid()
	switch {
	case n.Graph.Owner != nil:
		why = fmt.Sprintf("inside the subgraph of %s: %s works on the main graph's layers only", n.Graph.Owner, algorithm)
	case cfg.Excludes(n.Name):
		why = fmt.Sprintf("excluded by %s", cfg.Rule.Location())
	case !intGrid:
		why = fmt.Sprintf("weight spec %s is not an integer grid", tp.Spec)
	case n.OpType == "Gemm" && n.Attr("transA") != nil && n.Attr("transA").GetI() != 0:
		why = "Gemm with transA"
	case len(tp.Nodes) != 1 || len(wv.Consumers) != 1:
		why = "the weight is shared by several nodes"
	case initializerIndex(u.Model, wv) < 0:
		why = "the weight is not an initializer"
	case !roundTrips(tensor.DType(wv.Const.GetDataType()), grid):
		why = fmt.Sprintf("the weight is %s, whose rounding of the chosen values of grid %s could move them to other codes", tensor.DType(wv.Const.GetDataType()), tp.Spec.DType)
	default:
		return wv, tp, ""
	}
	return nil, nil, why
}

// roundTrips reports whether a weight of type dt holds the values of grid
// g that a rounding algorithm chooses, code·scale, closely enough for
// finalize to quantize them back to the same codes: the type's rounding
// moves a value by at most 2^−p of it (p its significand's bits), less
// than half a step while the codes' span, QMax − QMin, is below 2^(p−1).
// float16 (p = 11) holds 8-bit grids and narrower, bfloat16 (p = 8) 4-bit
// ones, float32 16-bit ones.
func roundTrips(dt tensor.DType, g spec.IntGrid) bool {
	p := map[tensor.DType]int{tensor.Float: 24, tensor.Double: 53, tensor.Float16: 11, tensor.BFloat16: 8}[dt]
	return p > 0 && float64(g.QMax)-float64(g.QMin) < math.Exp2(float64(p-1))
}

// gptqLayerOf returns n as a GPTQ layer, or why it is not one ("" for
// nodes the algorithm does not apply to at all).
func gptqLayerOf(u *Unit, n *onnxgraph.Node, cfg *config.GPTQ) (*gptqLayer, string, error) {
	if n.Domain != "" || (n.OpType != "MatMul" && n.OpType != "Gemm" && n.OpType != "Conv" && n.OpType != "ConvTranspose") || len(n.Inputs) < 2 || n.Inputs[0] == nil || n.Inputs[1] == nil {
		return nil, "", nil
	}
	wv, tp, why := roundableWeight(u, n, gptqAlgorithmName, &cfg.AlgorithmCommon)
	switch {
	case tp == nil:
		return nil, why, nil
	case n.OpType == "ConvTranspose":
		return nil, "GPTQ rounds the weights of Conv, Gemm and MatMul; adaround rounds a ConvTranspose's", nil
	case u.roundedWeights[wv.Name] != nil:
		return nil, "already rounded by adaround", nil
	}
	dims := wv.Const.GetDims()
	if n.OpType == "Conv" {
		return gptqConvLayer(u, n, wv, tp, dims)
	}
	if len(dims) != 2 {
		return nil, fmt.Sprintf("weight of rank %d, want a matrix", len(dims)), nil
	}
	shape := []int{int(dims[0]), int(dims[1])}
	l := &gptqLayer{node: n, weight: wv, plan: tp, shape: shape, k: shape[0], n: shape[1], threads: u.Data.Runtime.Threads}
	if a := n.Attr("transB"); n.OpType == "Gemm" && a != nil && a.GetI() != 0 {
		l.transposed, l.k, l.n = true, shape[1], shape[0]
	}
	return l, "", nil
}

// gptqConvLayer is Conv node n as a GPTQ layer: its weight W [N, C/g,
// k...] is, for each of its g groups, the N/g rows of an [N, C/g·ks]
// matrix (ks the kernel size), the outputs reading the group's patch rows
// (runtime.ConvPatches) as features.
func gptqConvLayer(u *Unit, n *onnxgraph.Node, wv *onnxgraph.Value, tp *TensorPlan, dims []int64) (*gptqLayer, string, error) {
	if len(dims) < 3 {
		return nil, fmt.Sprintf("weight of rank %d, want at least 3", len(dims)), nil
	}
	shape := intShape(dims)
	groups := 1
	if a := n.Attr("group"); a != nil && a.GetI() > 1 {
		groups = int(a.GetI())
	}
	if shape[0]%groups != 0 {
		return nil, "", fmt.Errorf("%s: %d output channels in %d groups", n, shape[0], groups)
	}
	k, per := tensor.NumElements(shape[1:]), shape[0]/groups
	l := &gptqLayer{node: n, weight: wv, plan: tp, shape: shape, k: k, n: shape[0], transposed: true, threads: u.Data.Runtime.Threads}
	for g := range groups {
		l.groups = append(l.groups, &gptqLayer{node: n, weight: wv, plan: tp, shape: shape, k: k, n: per, transposed: true, offset: g * per * k, threads: l.threads})
	}
	return l, "", nil
}

// round runs GPTQ on the layer, writes the rounded weight when it lowers
// the layer's error, and reports the local SQNR of round-to-nearest and
// of the result.
func (l *gptqLayer) round(u *Unit, damp float64, actOrder bool) (LayerReport, error) {
	rep := LayerReport{Algorithm: gptqAlgorithmName, Node: l.node.Name, OpType: l.node.OpType, Measure: "output"}
	tp := l.plan
	// The weight is decoded now and dropped after: a large model's
	// weights are never all in memory at once.
	w, _, err := constFloats(u.Model, l.weight)
	if err != nil {
		return rep, err
	}
	l.w = w
	views := l.views()
	for _, v := range views {
		v.w = w
	}
	defer func() {
		l.w = nil
		for _, v := range views {
			v.w = nil
		}
	}()
	// Round-to-nearest's error first: its buffer then holds GPTQ's
	// result, one copy fewer at the peak of a vocabulary head, a
	// decoder's largest weight.
	rtn, err := finalize.FakeQuantize(l.w, l.shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
	if err != nil {
		return rep, err
	}
	factors := make([]*hessianFactors, len(views))
	var signal, errRTN float64
	for i, v := range views {
		if factors[i], err = v.xtx.factorize(damp, actOrder); err != nil {
			return rep, err
		}
		v.perm = factors[i].perm
		signal += v.weightedSquare(factors[i].h32, l.w, nil)
		errRTN += v.weightedSquare(factors[i].h32, l.w, rtn)
	}
	// GPTQ's result takes round-to-nearest's buffer: the views cover
	// every element, and a vocabulary head's weight is not allocated a
	// fourth time.
	g := rtn
	var errGPTQ float64
	for i, v := range views {
		if err := gptqRound(v, factors[i].u, g); err != nil {
			return rep, err
		}
		errGPTQ += v.weightedSquare(factors[i].h32, l.w, g)
	}
	rows := views[0].xtx.rows
	rep.Before = sqnrDB(signal, errRTN)
	if errGPTQ >= errRTN {
		rep.After = rep.Before
		rep.Note = fmt.Sprintf("kept round-to-nearest: GPTQ's error is not lower (%d calibration rows)", rows)
		return rep, nil
	}
	rep.After = sqnrDB(signal, errGPTQ)
	rep.Note = fmt.Sprintf("%d calibration rows", rows)
	if err := setConst(u.Model, l.weight, g, l.shape); err != nil {
		return rep, err
	}
	if err := u.Write.Scratch.Move(l.weight.Const); err != nil {
		return rep, err
	}
	if u.Algorithms.BiasCorrection != nil || u.KeepFloatWeights {
		// Bias correction measures the error against the float weight,
		// and a weight written at another precision starts from it.
		if u.roundedWeights == nil {
			u.roundedWeights = map[string][]float32{}
		}
		u.roundedWeights[l.weight.Name] = l.w
	}
	return rep, nil
}

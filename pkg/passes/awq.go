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
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

const awqAlgorithmName = "awq"

// awqSite is an activation X whose readers' weights AWQ scales: the
// foldable site (see smoothSiteOf) with the weights' planned specs and
// X's statistics on calibration data.
type awqSite struct {
	*smoothSite
	// plans are the readers' weight plans from a preliminary prepare.
	plans []*TensorPlan
	// xtx is XᵀX over the calibration rows; absSum sums |X_j|.
	xtx    *gramAccumulator
	absSum []float64
}

// awqPending is a site found before its statistics are collected: its
// value, width and readers. Its weights are loaded again when it is
// searched, so that only the sites being searched hold theirs, and an
// earlier site's fold into a shared constant is seen.
type awqPending struct {
	x      *onnxgraph.Value
	k      int
	layers []*onnxgraph.Node
}

// runAWQ is AWQ (Lin et al., "AWQ: Activation-aware Weight Quantization
// for LLM Compression and Acceleration", 2024): for every activation X
// read only by MatMul and Gemm layers whose constant weights the plan
// quantizes to an integer grid, and produced by a node that can absorb a
// division of X's features exactly (a LayerNorm's scale and bias, the
// Mul → Add ending a written-out LayerNorm, a Mul by a per-feature
// constant, a MatMul or Gemm with a constant weight and its bias), row j
// of every reading weight is multiplied by s_j = mean|X_j|^α and feature j
// of X divided by it. α is searched on the grid 0, 1/grid, …, to minimise
// the readers' summed output error ‖X·W − X·diag(s)⁻¹·Q(diag(s)·W)‖² on
// calibration data, Q the planned weight quantization; α = 0 (s = 1, plain
// round-to-nearest) is on the grid, so a site's error never rises. The
// error is computed from XᵀX, one K×K matrix per site, never the
// activations. It runs before prepare, which then computes the weight
// qparams of the scaled model; the search models the weights'
// quantization only, not that of X.
//
// Where planBlocks finds blocks (the sites' readers marked), the sites go
// block by block through the block runner, each with the block of its
// first reader: the block runs on the held activations, its sites'
// statistics are collected, their scales searched and folded, and the cut
// advances. A fold keeps the float function, so each block sees the
// activations of the float model, as on the whole-model path; a held
// activation the fold divides (X, or a MatMul's output before the Add of
// its bias, computed by a block already run) is divided by s with it.
// Memory holds the activations crossing one cut and one block's weights
// and XᵀX. Elsewhere the model runs once for all sites.
func runAWQ(ctx context.Context, u *Unit, cfg *config.AWQ) error {
	if err := ownModel(u); err != nil {
		return err
	}
	// The scaled weights go to the writer's scratch file as they are
	// made: the model reads them back from there.
	if err := useScratch(u); err != nil {
		return err
	}
	m := u.Model
	res, err := resolveFor(u.Config, m.Graph, u.Prepare)
	if err != nil {
		return err
	}
	plan, err := Prepare(m, res, u.Prepare)
	if err != nil {
		return err
	}
	var sites []*awqPending
	isLayer := map[*onnxgraph.Node]bool{}
	for _, v := range m.Graph.Values() {
		site, why, err := awqSiteOf(m, plan, v, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", awqAlgorithmName, err)
		}
		if why != "" {
			for _, c := range quantizedReaders(plan, v) {
				u.Layers = append(u.Layers, LayerReport{Algorithm: awqAlgorithmName, Node: c.Name, OpType: c.OpType, Measure: "output", Skipped: why})
			}
		}
		if site == nil {
			continue
		}
		sites = append(sites, &awqPending{x: v, k: site.k, layers: site.layers})
		for _, l := range site.layers {
			isLayer[l] = true
		}
	}
	if len(sites) == 0 {
		return nil
	}
	blocks, why := planBlocks(m.Graph, func(n *onnxgraph.Node) bool { return isLayer[n] })
	if blocks == nil || awqWholeModel {
		if blocks == nil {
			u.Plan.Notes = append(u.Plan.Notes, fmt.Sprintf("%s: every site measured at once on the whole model, not block by block: %s", awqAlgorithmName, why))
		}
		return awqSearchSites(ctx, u, cfg, plan, sites, func(taps []string, tap runtime.Tap, after func() error) error {
			return u.Data.forEachBatch(ctx, m, cfg.Samples, taps, tap, after)
		}, nil)
	}
	u.Plan.Notes = append(u.Plan.Notes, fmt.Sprintf("%s: block by block (%d blocks): each block's sites measured on the activations the blocks before it pass on", awqAlgorithmName, len(blocks)))
	blockOf := map[*onnxgraph.Node]int{}
	for _, b := range blocks {
		for _, n := range b.nodes {
			blockOf[n] = b.index
		}
	}
	r, err := newBlockRunner(u, blocks, cfg.Samples)
	if err != nil {
		return fmt.Errorf("%s: %w", awqAlgorithmName, err)
	}
	prog := u.Data.blockProgress(awqAlgorithmName, len(blocks))
	for _, b := range blocks {
		var bs []*awqPending
		for _, s := range sites {
			first := len(blocks)
			for _, l := range s.layers {
				first = min(first, blockOf[l])
			}
			if first == b.index {
				bs = append(bs, s)
			}
		}
		run := func(taps []string, tap runtime.Tap, after func() error) error {
			return r.run(ctx, b, taps, tap, after, false)
		}
		divide := func(values []string, s []float32) error {
			for _, v := range values {
				if err := r.divideHeld(v, s); err != nil {
					return err
				}
			}
			return nil
		}
		if err := awqSearchSites(ctx, u, cfg, plan, bs, run, divide); err != nil {
			return err
		}
		if b.index < len(blocks)-1 {
			if err := r.run(ctx, b, nil, nil, nil, true); err != nil {
				return fmt.Errorf("%s: %w", awqAlgorithmName, err)
			}
		}
		prog(b)
	}
	return nil
}

// awqWholeModel, when set, makes AWQ take the whole-model path even where
// blocks are found: the reference the tests hold the block path to.
var awqWholeModel bool

// awqSearchSites collects the sites' statistics over the batches run
// feeds to the tap, then searches and folds each site's scales in turn,
// its weights loaded as the earlier folds left them; folded, when set, is
// told of the values each fold divided feature by feature (see
// scaledValues) and the scales.
func awqSearchSites(ctx context.Context, u *Unit, cfg *config.AWQ, plan *Plan, sites []*awqPending,
	run func(taps []string, tap runtime.Tap, after func() error) error, folded func(values []string, s []float32) error) error {
	if len(sites) == 0 {
		return nil
	}
	threads := u.Data.Runtime.Threads
	type stats struct {
		xtx    *gramAccumulator
		absSum []float64
	}
	byValue := map[string]*stats{}
	var taps []string
	for _, s := range sites {
		byValue[s.x.Name] = &stats{xtx: &gramAccumulator{value: s.x.Name, k: s.k, sum: make([]float64, s.k*s.k), threads: threads}, absSum: make([]float64, s.k)}
		taps = append(taps, s.x.Name)
	}
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		st := byValue[name]
		if st == nil || tapErr != nil {
			return
		}
		f, err := t.AsFloat32()
		if err == nil {
			err = st.xtx.add(f, t.Shape)
		}
		if err != nil {
			tapErr = fmt.Errorf("value %q: %w", name, err)
			return
		}
		k := st.xtx.k
		for i, x := range f {
			st.absSum[i%k] += math.Abs(float64(x))
		}
	}
	if err := run(taps, tap, func() error { return tapErr }); err != nil {
		return fmt.Errorf("%s: %w", awqAlgorithmName, err)
	}
	for _, p := range sites {
		if err := ctx.Err(); err != nil {
			return err
		}
		site, why, err := awqSiteOf(u.Model, plan, p.x, cfg)
		if err == nil && site == nil {
			err = fmt.Errorf("no longer a site after the folds before it: %s", why)
		}
		if err != nil {
			return fmt.Errorf("%s: value %q: %w", awqAlgorithmName, p.x.Name, err)
		}
		st := byValue[p.x.Name]
		site.xtx, site.absSum = st.xtx, st.absSum
		delete(byValue, p.x.Name)
		reps, err := site.search(u, cfg.Grid, threads)
		if err != nil {
			return fmt.Errorf("%s: value %q: %w", awqAlgorithmName, p.x.Name, err)
		}
		u.Layers = append(u.Layers, reps...)
		if site.s == nil {
			continue
		}
		for _, w := range append(append([]*weightData(nil), site.weights...), site.absorb...) {
			if err := u.Write.Scratch.Move(w.v.Const); err != nil {
				return fmt.Errorf("%s: value %q: %w", awqAlgorithmName, p.x.Name, err)
			}
		}
		if folded != nil {
			if err := folded(site.scaledValues(), site.s); err != nil {
				return fmt.Errorf("%s: value %q: %w", awqAlgorithmName, p.x.Name, err)
			}
		}
	}
	return nil
}

// scaledValues are the activations a fold of 1/s divides feature by
// feature: X, and the output of each node whose constant absorbs 1/s
// besides X's producer (the MatMul before the Add of its bias, the Mul
// before the Add of a written-out LayerNorm).
func (s *smoothSite) scaledValues() []string {
	out := []string{s.x.Name}
	for _, c := range s.absorb {
		for _, n := range c.v.Consumers {
			if n != s.x.Producer && len(n.Outputs) > 0 && n.Outputs[0] != nil && !slices.Contains(out, n.Outputs[0].Name) {
				out = append(out, n.Outputs[0].Name)
			}
		}
	}
	return out
}

// quantizedReaders are the MatMul and Gemm nodes that read v as their
// input and a weight the plan quantizes: the layers a skipped site
// reports.
func quantizedReaders(plan *Plan, v *onnxgraph.Value) []*onnxgraph.Node {
	var out []*onnxgraph.Node
	for _, c := range v.Consumers {
		if (c.OpType != "MatMul" && c.OpType != "Gemm") || c.Domain != "" || len(c.Inputs) < 2 || c.Inputs[0] != v || c.Inputs[1] == nil {
			continue
		}
		if tp := plan.Tensor(c.Inputs[1].Name); tp != nil && tp.Role == Weight && tp.Params != nil {
			out = append(out, c)
		}
	}
	return out
}

// awqSiteOf returns v as an AWQ site, or why not ("" when AWQ does not
// apply to v at all).
func awqSiteOf(m *onnxgraph.Model, plan *Plan, v *onnxgraph.Value, cfg *config.AWQ) (*awqSite, string, error) {
	if len(quantizedReaders(plan, v)) == 0 {
		return nil, "", nil
	}
	s, why, err := smoothSiteOf(m, v, &cfg.AlgorithmCommon, true)
	if s == nil || err != nil {
		return nil, why, err
	}
	site := &awqSite{smoothSite: s}
	for i, layer := range s.layers {
		w := s.weights[i].v
		tp := plan.Tensor(w.Name)
		if tp == nil || tp.Role != Weight || tp.Params == nil {
			return nil, fmt.Sprintf("%s, which reads %q too, has no quantized weight", layer, v.Name), nil
		}
		if _, ok := tp.Spec.IntGrid(); !ok {
			return nil, fmt.Sprintf("weight %q of %s: spec %s is not an integer grid", w.Name, layer, tp.Spec), nil
		}
		if layer.Graph.Owner != nil {
			return nil, fmt.Sprintf("%s is inside the subgraph of %s", layer, layer.Graph.Owner), nil
		}
		site.plans = append(site.plans, tp)
	}
	for i, c := range s.absorb {
		if why := absorbsExactly(plan, c, s.absorbStride[i]); why != "" {
			return nil, fmt.Sprintf("%s: %s", v.Producer, why), nil
		}
	}
	if err := s.load(m); err != nil {
		return nil, "", err
	}
	return site, "", nil
}

// absorbsExactly says why dividing the features of constant c (stride as
// in absorbingConsts) would change its quantization error, "" when the
// plan leaves it in float or quantizes each feature in groups of its own
// (per channel along the features, per block across them): uniform
// scaling of a group scales its qparams and keeps its codes.
func absorbsExactly(plan *Plan, c *weightData, stride int) string {
	tp := plan.Tensor(c.v.Name)
	if tp == nil || tp.Spec == nil {
		return ""
	}
	featureAxis := 0
	if stride == 1 {
		featureAxis = len(c.shape) - 1
	}
	if (tp.BlockSize == 0 && tp.Axis == featureAxis) || (tp.BlockSize > 0 && tp.Axis != featureAxis) {
		return ""
	}
	return fmt.Sprintf("%q, which would absorb 1/s, is quantized %s across features by %s: the scaling would change its quantization error, which the search does not measure", c.v.Name, tp.Spec, tp.Rule.Location())
}

// awqScales is s_j = max(mean|X_j|, 1e-4)^α, divided by √(max s · min s)
// so that the scales straddle 1.
func awqScales(mean []float64, alpha float64) []float32 {
	s := make([]float64, len(mean))
	lo, hi := math.Inf(1), 0.0
	for j, v := range mean {
		s[j] = math.Pow(max(v, 1e-4), alpha)
		lo, hi = min(lo, s[j]), max(hi, s[j])
	}
	norm := math.Sqrt(lo * hi)
	out := make([]float32, len(s))
	for j := range s {
		out[j] = float32(s[j] / norm)
	}
	return out
}

// search tries each exponent of the grid, keeps the one with the lowest
// summed output error (α = 0 on ties), applies its scales to the model
// and reports each reader's local SQNR with round-to-nearest and with
// the chosen scales.
func (s *awqSite) search(u *Unit, grid, threads int) ([]LayerReport, error) {
	rows := s.xtx.rows
	mean := make([]float64, s.k)
	for j, a := range s.absSum {
		mean[j] = a / float64(max(rows, 1))
	}
	xtx := s.xtx.full()
	h := make([]float32, len(xtx))
	for i, v := range xtx {
		h[i] = float32(v)
	}
	layers := make([]*gptqLayer, len(s.layers))
	signal := make([]float64, len(s.layers))
	for i, w := range s.weights {
		l := &gptqLayer{k: s.k, n: len(w.data) / s.k, transposed: s.transposed[i], threads: threads}
		layers[i] = l
		signal[i] = outputSquare(l, h, w.data, nil)
	}
	var rtn, best []float64
	bestAlpha, bestTotal := 0.0, math.Inf(1)
	var bestScales []float32
	for g := range grid {
		alpha := float64(g) / float64(grid)
		scales := awqScales(mean, alpha)
		errs := make([]float64, len(layers))
		var total float64
		for i, l := range layers {
			e, err := s.scaledError(i, l, h, scales, u.Prepare)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.layers[i], err)
			}
			errs[i] = e
			total += e
		}
		if g == 0 {
			rtn = errs
		}
		if total < bestTotal {
			best, bestAlpha, bestTotal, bestScales = errs, alpha, total, scales
		}
	}
	reps := make([]LayerReport, len(s.layers))
	for i, layer := range s.layers {
		reps[i] = LayerReport{Algorithm: awqAlgorithmName, Node: layer.Name, OpType: layer.OpType, Measure: "output",
			Before: sqnrDB(signal[i], rtn[i]), After: sqnrDB(signal[i], best[i])}
	}
	note := fmt.Sprintf("%d calibration rows of %q, %d reader(s)", rows, s.x.Name, len(s.layers))
	if bestAlpha == 0 {
		for i := range reps {
			reps[i].Note = "kept unscaled: no exponent lowers the error; " + note
		}
		return reps, nil
	}
	s.s = bestScales
	if err := s.apply(u.Model); err != nil {
		return nil, err
	}
	u.noteRescale(s.x.Name, -1, s.s, nil)
	note = fmt.Sprintf("alpha %.2f, s in [%.3g, %.3g], 1/s folded into %s; %s", bestAlpha, minOf(s.s), maxOf(s.s), s.x.Producer, note)
	for i := range reps {
		reps[i].Note = note
	}
	return reps, nil
}

// scaledError is ‖X·W − X·diag(s)⁻¹·Q(diag(s)·W)‖² for reader i, Q the
// weight's planned quantization with qparams computed from the scaled
// weight as prepare computes them.
func (s *awqSite) scaledError(i int, l *gptqLayer, h []float32, scales []float32, opts PrepareOptions) (float64, error) {
	w, tp := s.weights[i], s.plans[i]
	scaled := make([]float32, len(w.data))
	for kk := range l.k {
		for n := range l.n {
			idx := l.at(kk, n)
			scaled[idx] = w.data[idx] * scales[kk]
		}
	}
	params, err := weightParams(scaled, w.shape, tp.Axis, tp.BlockSize, tp.Spec, weightClipping(tp.Spec, opts))
	if err != nil {
		return 0, err
	}
	q, err := finalize.FakeQuantize(scaled, w.shape, tp.Axis, tp.BlockSize, tp.Spec, params)
	if err != nil {
		return 0, err
	}
	for kk := range l.k {
		for n := range l.n {
			idx := l.at(kk, n)
			q[idx] /= scales[kk]
		}
	}
	return outputSquare(l, h, w.data, q), nil
}

// outputSquare is ‖X(W − Ŵ)‖² = Σ δ ∘ (XᵀX·δ) with δ = w − q as a K×N
// matrix (q nil: ‖XW‖²), the product by the float32 GEMM kernel: the grid
// search evaluates it grid × readers times per site.
func outputSquare(l *gptqLayer, h []float32, w, q []float32) float64 {
	d := make([]float32, l.k*l.n)
	for kk := range l.k {
		for n := range l.n {
			idx := l.at(kk, n)
			d[kk*l.n+n] = w[idx]
			if q != nil {
				d[kk*l.n+n] -= q[idx]
			}
		}
	}
	hd := make([]float32, len(d))
	kernels.Sgemm(false, false, l.k, l.n, l.k, 1, h, l.k, d, l.n, 0, hd, l.n)
	var sum float64
	for i, v := range d {
		sum += float64(v) * float64(hd[i])
	}
	return sum
}

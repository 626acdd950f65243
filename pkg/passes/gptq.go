package passes

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"sync"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/quant"
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
	// xtx is XᵀX of the layer's input over the calibration rows, shared by
	// the layers that read the same input.
	xtx *gramAccumulator
}

// at is the flat index of element (input feature k, output n).
func (l *gptqLayer) at(k, n int) int {
	if l.transposed {
		return n*l.k + k
	}
	return k*l.n + n
}

// gramAccumulator sums XᵀX (K×K, float64) over the rows of one value,
// batch by batch: memory holds K² numbers, never the activations.
type gramAccumulator struct {
	value   string
	k       int
	sum     []float64
	rows    int
	threads int
}

// add accumulates the rows of x (its last axis of size k). Row i of the
// sum is computed by one goroutine over the rows in order, so the result
// does not depend on the number of threads.
func (g *gramAccumulator) add(x []float32, shape []int) error {
	if len(shape) == 0 || shape[len(shape)-1] != g.k {
		return fmt.Errorf("value %q of shape %v: want %d features on the last axis", g.value, shape, g.k)
	}
	rows := len(x) / g.k
	k := g.k
	parallelRows(g.threads, k, func(i int) {
		out := g.sum[i*k : (i+1)*k]
		for r := range rows {
			row := x[r*k : (r+1)*k]
			xi := float64(row[i])
			if xi == 0 {
				continue
			}
			for j := i; j < k; j++ {
				out[j] += xi * float64(row[j])
			}
		}
	})
	g.rows += rows
	return nil
}

// full returns the symmetric matrix (the accumulation fills j ≥ i).
func (g *gramAccumulator) full() []float64 {
	k := g.k
	h := append([]float64(nil), g.sum...)
	for i := range k {
		for j := range i {
			h[i*k+j] = h[j*k+i]
		}
	}
	return h
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
// layer's float input on calibration data, dampens it by damp·mean(diag H),
// and rounds the weight one input feature at a time, each rounding error
// spread over the features not yet rounded through the Cholesky factor of
// H⁻¹. The rounded values are written back into the float weight, which
// finalize then quantizes to the same codes. A layer keeps round-to-nearest
// when GPTQ does not lower its error ‖X(W − Ŵ)‖² (the report says so).
// Memory holds one K×K matrix per distinct layer input, and one batch.
func runGPTQ(ctx context.Context, u *Unit, cfg *config.GPTQ) error {
	if err := ownModel(u); err != nil {
		return err
	}
	m := u.Model
	var layers []*gptqLayer
	grams := map[string]*gramAccumulator{}
	var taps []string
	for _, n := range m.Graph.AllNodes() {
		l, why, err := gptqLayerOf(u, n, cfg)
		if err != nil {
			return err
		}
		if why != "" {
			u.Layers = append(u.Layers, LayerReport{Algorithm: gptqAlgorithmName, Node: n.Name, OpType: n.OpType, Measure: "output", Skipped: why})
		}
		if l == nil {
			continue
		}
		in := n.Inputs[0].Name
		g := grams[in]
		if g == nil {
			g = &gramAccumulator{value: in, k: l.k, sum: make([]float64, l.k*l.k), threads: u.Data.Runtime.Threads}
			grams[in] = g
			taps = append(taps, in)
		} else if g.k != l.k {
			return fmt.Errorf("%s: %s: input %q has %d features for one layer and %d for another", gptqAlgorithmName, n, in, g.k, l.k)
		}
		l.xtx = g
		layers = append(layers, l)
	}
	if len(layers) == 0 {
		return nil
	}
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		g := grams[name]
		if tapErr != nil || g == nil {
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
	after := func() error { return tapErr }
	if err := u.Data.forEachBatch(ctx, m, cfg.Samples, taps, tap, after); err != nil {
		return fmt.Errorf("%s: %w", gptqAlgorithmName, err)
	}
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		rep, err := l.round(u, cfg.Damp)
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
	_, intGrid := tp.Spec.IntGrid()
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
	case initializerIndex(u.Model, wv) < 0 || tensor.DType(wv.Const.GetDataType()) != tensor.Float:
		why = "the weight is not a float32 initializer"
	default:
		return wv, tp, ""
	}
	return nil, nil, why
}

// gptqLayerOf returns n as a GPTQ layer, or why it is not one ("" for
// nodes the algorithm does not apply to at all).
func gptqLayerOf(u *Unit, n *onnxgraph.Node, cfg *config.GPTQ) (*gptqLayer, string, error) {
	if n.Domain != "" || (n.OpType != "MatMul" && n.OpType != "Gemm") || len(n.Inputs) < 2 || n.Inputs[0] == nil || n.Inputs[1] == nil {
		return nil, "", nil
	}
	wv, tp, why := roundableWeight(u, n, gptqAlgorithmName, &cfg.AlgorithmCommon)
	switch {
	case tp == nil:
		return nil, why, nil
	case u.roundedWeights[wv.Name] != nil:
		return nil, "already rounded by adaround", nil
	}
	w, shape, err := constFloats(u.Model, wv)
	if err != nil {
		return nil, "", fmt.Errorf("%s: weight %q: %w", n, wv.Name, err)
	}
	if len(shape) != 2 {
		return nil, fmt.Sprintf("weight of rank %d, want a matrix", len(shape)), nil
	}
	l := &gptqLayer{node: n, weight: wv, plan: tp, w: w, shape: shape, k: shape[0], n: shape[1], threads: u.Data.Runtime.Threads}
	if a := n.Attr("transB"); n.OpType == "Gemm" && a != nil && a.GetI() != 0 {
		l.transposed, l.k, l.n = true, shape[1], shape[0]
	}
	return l, "", nil
}

// round runs GPTQ on the layer, writes the rounded weight when it lowers
// the layer's error, and reports the local SQNR of round-to-nearest and
// of the result.
func (l *gptqLayer) round(u *Unit, damp float64) (LayerReport, error) {
	rep := LayerReport{Algorithm: gptqAlgorithmName, Node: l.node.Name, OpType: l.node.OpType, Measure: "output"}
	tp := l.plan
	rtn, err := finalize.FakeQuantize(l.w, l.shape, tp.Axis, tp.BlockSize, tp.Spec, tp.Params)
	if err != nil {
		return rep, err
	}
	xtx := l.xtx.full()
	g, err := gptqRound(l, xtx, damp)
	if err != nil {
		return rep, err
	}
	signal := l.weightedSquare(xtx, l.w, nil)
	errRTN := l.weightedSquare(xtx, l.w, rtn)
	errGPTQ := l.weightedSquare(xtx, l.w, g)
	rep.Before = sqnrDB(signal, errRTN)
	if errGPTQ >= errRTN {
		rep.After = rep.Before
		rep.Note = fmt.Sprintf("kept round-to-nearest: GPTQ's error is not lower (%d calibration rows)", l.xtx.rows)
		return rep, nil
	}
	rep.After = sqnrDB(signal, errGPTQ)
	rep.Note = fmt.Sprintf("%d calibration rows", l.xtx.rows)
	if err := setConst(u.Model, l.weight, g, l.shape); err != nil {
		return rep, err
	}
	if u.roundedWeights == nil {
		u.roundedWeights = map[string][]float32{}
	}
	u.roundedWeights[l.weight.Name] = l.w
	return rep, nil
}

// weightedSquare is ‖X(W − Ŵ)‖² = Σₙ δₙᵀ (XᵀX) δₙ over the outputs n, with
// δ = w − q (q nil: ‖XW‖²).
func (l *gptqLayer) weightedSquare(xtx []float64, w, q []float32) float64 {
	k := l.k
	parts := make([]float64, l.n)
	parallelRows(l.threads, l.n, func(n int) {
		d := make([]float64, k)
		for i := range k {
			d[i] = float64(w[l.at(i, n)])
			if q != nil {
				d[i] -= float64(q[l.at(i, n)])
			}
		}
		var s float64
		for i := range k {
			var r float64
			row := xtx[i*k : (i+1)*k]
			for j := range k {
				r += row[j] * d[j]
			}
			s += d[i] * r
		}
		parts[n] = s
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}

// gptqRound returns the layer's weight rounded by GPTQ onto the plan's
// grid, as dequantized values (each one a code of the plan's qparams).
func gptqRound(l *gptqLayer, xtx []float64, damp float64) ([]float32, error) {
	k := l.k
	h := append([]float64(nil), xtx...)
	var mean float64
	for i := range k {
		if h[i*k+i] == 0 {
			// A feature the data never activates: its error costs nothing
			// and spreads nowhere (its row and column are zero).
			h[i*k+i] = 1
		}
		mean += h[i*k+i]
	}
	mean /= float64(k)
	for i := range k {
		h[i*k+i] += damp * mean
	}
	u, err := inverseCholeskyUpper(h, k, l.threads)
	if err != nil {
		return nil, err
	}
	tp := l.plan
	grid, _ := tp.Spec.IntGrid()
	layout, err := quant.NewLayout(l.shape, tp.Axis, tp.BlockSize)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(l.w))
	// The outputs are independent: each is rounded feature by feature.
	parallelRows(l.threads, l.n, func(n int) {
		w := make([]float64, k)
		for i := range k {
			w[i] = float64(l.w[l.at(i, n)])
		}
		for i := range k {
			idx := l.at(i, n)
			g := layout.Of(idx)
			scale, zp := tp.Params.Scales[g], int64(tp.Params.ZeroPoints[g])
			q := quant.Dequantize(quant.Int(float32(w[i]), scale, zp, grid.QMin, grid.QMax), zp, scale)
			out[idx] = q
			e := (w[i] - float64(q)) / u[i*k+i]
			row := u[i*k : (i+1)*k]
			for j := i + 1; j < k; j++ {
				w[j] -= e * row[j]
			}
		}
	})
	return out, nil
}

// inverseCholeskyUpper returns the upper triangular U with H⁻¹ = UᵀU, for
// a symmetric positive definite H (k×k, row-major; overwritten).
func inverseCholeskyUpper(h []float64, k, threads int) ([]float64, error) {
	if err := choleskyLower(h, k, threads); err != nil {
		return nil, fmt.Errorf("the dampened Hessian: %w", err)
	}
	// L⁻¹, lower triangular, by forward substitution.
	inv := make([]float64, k*k)
	for j := range k {
		inv[j*k+j] = 1 / h[j*k+j]
		for i := j + 1; i < k; i++ {
			var s float64
			for p := j; p < i; p++ {
				s += h[i*k+p] * inv[p*k+j]
			}
			inv[i*k+j] = -s / h[i*k+i]
		}
	}
	// H⁻¹ = L⁻ᵀ L⁻¹.
	hinv := make([]float64, k*k)
	parallelRows(threads, k, func(i int) {
		for j := i; j < k; j++ {
			var s float64
			for p := j; p < k; p++ {
				s += inv[p*k+i] * inv[p*k+j]
			}
			hinv[i*k+j] = s
			hinv[j*k+i] = s
		}
	})
	if err := choleskyLower(hinv, k, threads); err != nil {
		return nil, fmt.Errorf("the inverse Hessian: %w", err)
	}
	u := make([]float64, k*k)
	for i := range k {
		for j := i; j < k; j++ {
			u[i*k+j] = hinv[j*k+i]
		}
	}
	return u, nil
}

// choleskyLower factors a symmetric positive definite a = LLᵀ in place
// (L in the lower triangle; the upper is left as is).
func choleskyLower(a []float64, k, threads int) error {
	for j := range k {
		s := a[j*k+j]
		for p := range j {
			s -= a[j*k+p] * a[j*k+p]
		}
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("not positive definite at row %d of %d", j, k)
		}
		d := math.Sqrt(s)
		a[j*k+j] = d
		rj := a[j*k : j*k+j]
		parallelRowsFrom(threads, j+1, k, func(i int) {
			ri := a[i*k : i*k+j]
			v := a[i*k+j]
			for p := range ri {
				v -= ri[p] * rj[p]
			}
			a[i*k+j] = v / d
		})
	}
	return nil
}

// parallelRowsFrom is parallelRows over [from, to), serial when short.
func parallelRowsFrom(threads, from, to int, fn func(i int)) {
	if to-from < 64 {
		for i := from; i < to; i++ {
			fn(i)
		}
		return
	}
	parallelRows(threads, to-from, func(i int) { fn(from + i) })
}

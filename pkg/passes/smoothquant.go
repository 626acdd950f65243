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
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

const smoothQuantName = "smoothquant"

// smoothReportRows caps the activation rows kept for the report.
const smoothReportRows = 1024

// smoothSite is an activation X read only by MatMul and Gemm layers with
// constant weights, produced by a node whose per-feature constants can
// absorb a division of X's features: LayerNormalization (scale and bias),
// RMSNormalization (scale), the Mul → Add that ends a written-out
// LayerNorm, or the Mul by a per-feature weight that ends a written-out
// RMSNorm.
type smoothSite struct {
	x       *onnxgraph.Value
	layers  []*onnxgraph.Node
	weights []*weightData
	// transposed marks a Gemm with transB: its weight is [N, K].
	transposed []bool
	// absorb are the producer's constants divided by s; element i of
	// absorb[c] belongs to feature (i / absorbStride[c]) % k (a vector, or
	// a matrix whose output columns are X's features).
	absorb       []*weightData
	absorbStride []int
	k            int
	absMax       []float64
	// rows are the first activation rows, kept for the report (at most
	// reportRows of them).
	rows       []float32
	reportRows int
	s          []float32
}

// runActivationAlgorithms runs the data-aware algorithms that change the
// float model before prepare and calibration see it.
// SmoothQuant runs first; AWQ then searches its scales on the smoothed
// model.
func runActivationAlgorithms(ctx context.Context, u *Unit) error {
	if u.Algorithms == nil {
		return nil
	}
	noData := u.Data == nil || u.Data.Source == nil
	if sq := u.Algorithms.SmoothQuant; sq != nil {
		if noData {
			return &MissingDataError{Algorithm: smoothQuantName, Rule: sq.Rule}
		}
		if err := runSmoothQuant(ctx, u, sq); err != nil {
			return err
		}
	}
	if a := u.Algorithms.AWQ; a != nil {
		if noData {
			return &MissingDataError{Algorithm: awqAlgorithmName, Rule: a.Rule}
		}
		return runAWQ(ctx, u, a)
	}
	return nil
}

// runSmoothQuant is SmoothQuant (Xiao et al., "SmoothQuant: Accurate and
// Efficient Post-Training Quantization for Large Language Models", 2023):
// for every activation X read only by MatMul and Gemm layers with
// constant weights and produced by a LayerNorm or an RMSNorm (or their
// written-out Mul → Add and Mul), feature j of X is divided by
// s_j = max|X_j|^α / max|W_j|^(1−α) and row j of every reading weight
// multiplied by it, the division folded into the norm's scale and
// bias: the float function is unchanged, and the few features with large
// activations, which set a per-tensor activation range, move part of
// their range into the per-channel weights. max|X_j| is measured on
// calibration data; it runs before prepare, so the activation ranges and
// the weight qparams are those of the smoothed model.
func runSmoothQuant(ctx context.Context, u *Unit, cfg *config.SmoothQuant) error {
	if err := ownModel(u); err != nil {
		return err
	}
	m := u.Model
	var sites []*smoothSite
	bySite := map[string]*smoothSite{}
	var taps []string
	for _, v := range m.Graph.Values() {
		site, why, err := smoothSiteOf(m, v, &cfg.AlgorithmCommon, false)
		if err != nil {
			return fmt.Errorf("%s: %w", smoothQuantName, err)
		}
		if why != "" {
			for _, c := range v.Consumers {
				if c.OpType == "MatMul" || c.OpType == "Gemm" {
					u.Layers = append(u.Layers, LayerReport{Algorithm: smoothQuantName, Node: c.Name, OpType: c.OpType, Measure: "output", Skipped: why})
				}
			}
		}
		if site == nil {
			continue
		}
		if !u.SkipFigures {
			site.reportRows = smoothReportRows
		}
		sites = append(sites, site)
		bySite[v.Name] = site
		taps = append(taps, v.Name)
	}
	if len(sites) == 0 {
		return nil
	}
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		site := bySite[name]
		if site == nil || tapErr != nil {
			return
		}
		f, err := t.AsFloat32()
		if err == nil {
			err = site.observe(f, t.Shape)
		}
		if err != nil {
			tapErr = fmt.Errorf("value %q: %w", name, err)
		}
	}
	if err := u.Data.forEachBatch(ctx, m, cfg.Samples, taps, tap, func() error { return tapErr }); err != nil {
		return fmt.Errorf("%s: %w", smoothQuantName, err)
	}
	for _, site := range sites {
		if err := site.load(m); err != nil {
			return fmt.Errorf("%s: value %q: %w", smoothQuantName, site.x.Name, err)
		}
		site.smoothScales(cfg.Alpha)
		if err := site.apply(m); err != nil {
			return fmt.Errorf("%s: value %q: %w", smoothQuantName, site.x.Name, err)
		}
		site.release()
		u.noteRescale(site.x.Name, -1, site.s, nil)
	}
	u.smoothed = append(u.smoothed, sites...)
	return nil
}

// smoothSiteOf returns v as a site whose features can be scaled (for
// SmoothQuant and AWQ), or why not ("" when it does not apply to v at
// all). wide also lets a MatMul or Gemm with a constant weight (and the
// Add of its bias) or a Mul by a per-feature constant absorb the
// division, besides a LayerNorm, and lets Shape and Size, which read only
// X's shape, read X too.
func smoothSiteOf(m *onnxgraph.Model, v *onnxgraph.Value, cfg *config.AlgorithmCommon, wide bool) (*smoothSite, string, error) {
	if v.IsConst() || v.Producer == nil || len(v.Consumers) == 0 {
		return nil, "", nil
	}
	readers := 0
	for _, c := range v.Consumers {
		if (c.OpType == "MatMul" || c.OpType == "Gemm") && c.Domain == "" && len(c.Inputs) >= 2 && c.Inputs[0] == v {
			readers++
		}
	}
	if readers == 0 {
		return nil, "", nil
	}
	site := &smoothSite{x: v}
	// The constants are only described here; their data is read when the
	// site is scaled (load), one site at a time.
	load := func(c *onnxgraph.Value) (*weightData, string, error) {
		if c == nil || !c.IsConst() || initializerIndex(m, c) < 0 || !rewritable(tensor.DType(c.Const.GetDataType())) {
			return nil, fmt.Sprintf("%q is not a floating-point initializer", valueName(c)), nil
		}
		if len(c.Consumers) != 1 {
			return nil, fmt.Sprintf("%q is shared by several nodes", c.Name), nil
		}
		return &weightData{v: c, shape: intShape(c.Const.GetDims())}, "", nil
	}
	for _, c := range v.Consumers {
		switch {
		case wide && (c.OpType == "Shape" || c.OpType == "Size") && c.Domain == "":
			continue
		case (c.OpType != "MatMul" && c.OpType != "Gemm") || c.Domain != "" || c.Inputs[0] != v || len(c.Inputs) < 2:
			return nil, fmt.Sprintf("%q is also read by %s, which would need X unscaled", v.Name, c), nil
		case cfg.Excludes(c.Name):
			return nil, fmt.Sprintf("%s, which reads %q too, is excluded by %s", c, v.Name, cfg.Rule.Location()), nil
		case c.OpType == "Gemm" && c.Attr("transA") != nil && c.Attr("transA").GetI() != 0:
			return nil, "Gemm with transA", nil
		}
		w, why, err := load(c.Inputs[1])
		if why != "" || err != nil {
			return nil, "weight " + why, err
		}
		if len(w.shape) != 2 {
			return nil, fmt.Sprintf("weight %q of rank %d, want a matrix", w.v.Name, len(w.shape)), nil
		}
		tr := c.OpType == "Gemm" && c.Attr("transB") != nil && c.Attr("transB").GetI() != 0
		k := w.shape[0]
		if tr {
			k = w.shape[1]
		}
		if site.k != 0 && site.k != k {
			return nil, fmt.Sprintf("its readers have %d and %d input features", site.k, k), nil
		}
		site.k = k
		site.layers = append(site.layers, c)
		site.weights = append(site.weights, w)
		site.transposed = append(site.transposed, tr)
	}
	p := v.Producer
	consts, strides := absorbingConsts(p, site.k, wide)
	if len(consts) == 0 {
		return nil, fmt.Sprintf("%q is produced by %s, which has no per-feature constants to absorb the scale", v.Name, p), nil
	}
	for i, c := range consts {
		if c == nil {
			continue
		}
		w, why, err := load(c)
		if why != "" || err != nil {
			return nil, fmt.Sprintf("%s: %s", p, why), err
		}
		if strides[i] == 0 {
			strides[i] = 1
			if n := tensor.NumElements(w.shape); n != site.k {
				return nil, fmt.Sprintf("%s: %q has %d values for %d features", p, c.Name, n, site.k), nil
			}
		} else if len(w.shape) != 2 || (strides[i] == 1 && w.shape[1] != site.k) || (strides[i] > 1 && w.shape[0] != site.k) {
			return nil, fmt.Sprintf("%s: weight %q of shape %v does not have %d output columns", p, c.Name, w.shape, site.k), nil
		}
		site.absorb = append(site.absorb, w)
		site.absorbStride = append(site.absorbStride, strides[i])
	}
	site.absMax = make([]float64, site.k)
	return site, "", nil
}

// absorbingConsts are the constants of p that X = p(...) scales with
// feature by feature, each with its stride: 0 for a vector of one value
// per feature, 1 for a [K', k] matrix whose columns are the features (a
// MatMul weight), K' for a [k, K'] one (a Gemm weight with transB). The
// list is empty when p has none that absorb a division of every feature.
func absorbingConsts(p *onnxgraph.Node, k int, wide bool) ([]*onnxgraph.Value, []int) {
	if p.Domain != "" {
		return nil, nil
	}
	switch {
	case p.OpType == "LayerNormalization":
		if a := p.Attr("axis"); a != nil && a.GetI() != -1 {
			return nil, nil
		}
		return p.Inputs[1:], make([]int, len(p.Inputs)-1)
	case p.OpType == "Add" && len(p.Inputs) == 2:
		for i, in := range p.Inputs {
			q := p.Inputs[1-i].Producer
			if !in.IsConst() || q == nil || q.Domain != "" || len(q.Outputs[0].Consumers) != 1 {
				continue
			}
			if q.OpType == "Mul" && len(q.Inputs) == 2 {
				// Written-out LayerNorm: (normalized · γ) + β.
				for _, mi := range q.Inputs {
					if mi.IsConst() {
						return []*onnxgraph.Value{mi, in}, []int{0, 0}
					}
				}
			}
			if wide && q.OpType == "MatMul" {
				// A linear layer with its bias added: X = A·W + b.
				if w, stride := linearColumns(q, k); w != nil {
					return []*onnxgraph.Value{w, in}, []int{stride, 0}
				}
			}
		}
	case p.OpType == "RMSNormalization":
		if a := p.Attr("axis"); a != nil && a.GetI() != -1 {
			return nil, nil
		}
		return p.Inputs[1:2], []int{0}
	case p.OpType == "Mul" && len(p.Inputs) == 2:
		// A per-feature gain: the weight that ends a written-out RMSNorm
		// (decoders' exports), or under wide any constant factor.
		for i, in := range p.Inputs {
			if in.IsConst() && !p.Inputs[1-i].IsConst() && (wide || perFeature(in, k)) {
				return []*onnxgraph.Value{in}, []int{0}
			}
		}
	case wide && (p.OpType == "MatMul" || p.OpType == "Gemm"):
		w, stride := linearColumns(p, k)
		if w == nil {
			return nil, nil
		}
		if p.OpType == "Gemm" && len(p.Inputs) > 2 && p.Inputs[2] != nil {
			if !p.Inputs[2].IsConst() {
				return nil, nil
			}
			return []*onnxgraph.Value{w, p.Inputs[2]}, []int{stride, 0}
		}
		return []*onnxgraph.Value{w}, []int{stride}
	}
	return nil, nil
}

// perFeature reports whether the constant v holds one value per feature
// of the last axis: shaped [k] or [1, ..., 1, k].
func perFeature(v *onnxgraph.Value, k int) bool {
	dims := v.Const.GetDims()
	if len(dims) == 0 || dims[len(dims)-1] != int64(k) {
		return false
	}
	for _, d := range dims[:len(dims)-1] {
		if d != 1 {
			return false
		}
	}
	return true
}

// linearColumns is the constant weight of the MatMul or Gemm q whose
// output columns are its k output features, with its stride (see
// absorbingConsts); nil when q reads no constant weight or transposes A.
func linearColumns(q *onnxgraph.Node, k int) (*onnxgraph.Value, int) {
	if len(q.Inputs) < 2 || q.Inputs[1] == nil || !q.Inputs[1].IsConst() || q.Inputs[0] == nil || q.Inputs[0].IsConst() {
		return nil, 0
	}
	if q.OpType == "Gemm" {
		if a := q.Attr("transA"); a != nil && a.GetI() != 0 {
			return nil, 0
		}
		if a := q.Attr("transB"); a != nil && a.GetI() != 0 {
			dims := q.Inputs[1].Const.GetDims()
			if len(dims) != 2 || int(dims[0]) != k {
				return nil, 0
			}
			return q.Inputs[1], int(dims[1])
		}
	}
	return q.Inputs[1], 1
}

func valueName(v *onnxgraph.Value) string {
	if v == nil {
		return ""
	}
	return v.Name
}

// load reads the data of the site's weights and absorbing constants.
func (s *smoothSite) load(m *onnxgraph.Model) error {
	for _, w := range append(slices.Clip(s.weights), s.absorb...) {
		d, shape, err := constFloats(m, w.v)
		if err != nil {
			return err
		}
		if !slices.Equal(shape, w.shape) {
			return fmt.Errorf("constant %q of shape %v, want %v", w.v.Name, shape, w.shape)
		}
		w.data = d
	}
	return nil
}

// release drops the data load read: a scaled site's constants live in
// the model, and a decoder's sites together hold most of its weights.
func (s *smoothSite) release() {
	for _, w := range append(slices.Clip(s.weights), s.absorb...) {
		w.data = nil
	}
}

// featureOf is the input feature that element idx of the i-th reading
// weight multiplies.
func (s *smoothSite) featureOf(i, idx int) int {
	w := s.weights[i]
	if s.transposed[i] {
		return idx % w.shape[1]
	}
	return idx / w.shape[1]
}

// observe folds one batch of X into the per-feature maxima and keeps its
// rows for the report, up to reportRows.
func (s *smoothSite) observe(x []float32, shape []int) error {
	if len(shape) == 0 || shape[len(shape)-1] != s.k {
		return fmt.Errorf("shape %v: want %d features on the last axis", shape, s.k)
	}
	for r := range len(x) / s.k {
		row := x[r*s.k : (r+1)*s.k]
		for j, v := range row {
			s.absMax[j] = max(s.absMax[j], math.Abs(float64(v)))
		}
		if len(s.rows) < s.reportRows*s.k {
			s.rows = append(s.rows, row...)
		}
	}
	return nil
}

// smoothScales computes SmoothQuant's s.
func (s *smoothSite) smoothScales(alpha float64) {
	wMax := make([]float64, s.k)
	for i, w := range s.weights {
		for idx, v := range w.data {
			j := s.featureOf(i, idx)
			wMax[j] = max(wMax[j], math.Abs(float64(v)))
		}
	}
	s.s = make([]float32, s.k)
	for j := range s.k {
		f := 1.0
		if s.absMax[j] > 0 && wMax[j] > 0 {
			f = math.Pow(s.absMax[j], alpha) / math.Pow(wMax[j], 1-alpha)
			f = min(max(f, 1e-5), 1e5)
		}
		s.s[j] = float32(f)
	}
}

// apply multiplies row j of every reading weight by s_j and divides the
// producer's constants for feature j by it: the float function is kept.
func (s *smoothSite) apply(m *onnxgraph.Model) error {
	for i, w := range s.weights {
		for idx := range w.data {
			w.data[idx] *= s.s[s.featureOf(i, idx)]
		}
		if err := setConst(m, w.v, w.data, w.shape); err != nil {
			return err
		}
	}
	for i, c := range s.absorb {
		stride := s.absorbStride[i]
		for j := range c.data {
			c.data[j] /= s.s[(j/stride)%s.k]
		}
		if err := setConst(m, c.v, c.data, c.shape); err != nil {
			return err
		}
	}
	return nil
}

// reportSmoothed reports each smoothed layer once prepare has planned its
// specs: the SQNR of the layer's product X·W on the kept calibration rows
// with X and W quantized as planned (X's range its min/max over the rows,
// W's qparams prepare's), for the original and the smoothed model.
func reportSmoothed(u *Unit) error {
	for _, s := range u.smoothed {
		xp := u.Plan.Tensor(s.x.Name)
		for i, layer := range s.layers {
			rep := LayerReport{Algorithm: smoothQuantName, Node: layer.Name, OpType: layer.OpType, Measure: "output"}
			w := s.weights[i]
			wp := u.Plan.Tensor(w.v.Name)
			if wp == nil || wp.Role != Weight || wp.Params == nil {
				rep.Skipped = fmt.Sprintf("smoothed, but weight %q is not quantized: no figures", w.v.Name)
				u.Layers = append(u.Layers, rep)
				continue
			}
			rows := len(s.rows) / s.k
			scaled := make([]float32, len(s.rows))
			for r := range rows {
				for j := range s.k {
					scaled[r*s.k+j] = s.rows[r*s.k+j] / s.s[j]
				}
			}
			smoothed, _, err := constFloats(u.Model, w.v)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", smoothQuantName, layer, err)
			}
			// The original weight is not kept (a decoder's smoothed weights
			// are most of it): it is the smoothed one divided back, within
			// a rounding of each element.
			original := make([]float32, len(smoothed))
			for idx, v := range smoothed {
				original[idx] = v / s.s[s.featureOf(i, idx)]
			}
			before, err := s.productSQNR(s.rows, original, w.shape, s.transposed[i], xp, wp, u.Prepare, nil)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", smoothQuantName, layer, err)
			}
			after, err := s.productSQNR(scaled, smoothed, w.shape, s.transposed[i], xp, wp, u.Prepare, wp.Params)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", smoothQuantName, layer, err)
			}
			rep.Before, rep.After = before, after
			rep.Note = fmt.Sprintf("%d calibration rows; s in [%.3g, %.3g]", rows, minOf(s.s), maxOf(s.s))
			u.Layers = append(u.Layers, rep)
		}
	}
	u.smoothed = nil
	return nil
}

// productSQNR is the SQNR of X̂·Ŵ against X·W for the rows x.
func (s *smoothSite) productSQNR(x, w []float32, shape []int, transposed bool, xp, wp *TensorPlan, opts PrepareOptions, params *Params) (DB, error) {
	rows := len(x) / s.k
	xq := x
	if xp != nil && xp.Spec != nil {
		lo, hi := float32(0), float32(0)
		for _, v := range x {
			lo, hi = min(lo, v), max(hi, v)
		}
		sc, zp := xp.Spec.QParam(lo, hi)
		var err error
		xq, err = finalize.FakeQuantize(x, []int{len(x)}, -1, 0, xp.Spec, &Params{Scales: []float32{sc}, ZeroPoints: []int32{zp}})
		if err != nil {
			return 0, err
		}
	}
	if params == nil {
		var err error
		if params, err = weightParams(w, shape, wp.Axis, wp.BlockSize, wp.Spec, weightClipping(wp.Spec, opts)); err != nil {
			return 0, err
		}
	}
	wq, err := finalize.FakeQuantize(w, shape, wp.Axis, wp.BlockSize, wp.Spec, params)
	if err != nil {
		return 0, err
	}
	n := shape[1]
	if transposed {
		n = shape[0]
	}
	y := make([]float32, rows*n)
	yq := make([]float32, rows*n)
	kernels.Sgemm(false, transposed, rows, n, s.k, 1, x, s.k, w, shape[1], 0, y, n)
	kernels.Sgemm(false, transposed, rows, n, s.k, 1, xq, s.k, wq, shape[1], 0, yq, n)
	var sig, noise float64
	for i := range y {
		d := float64(y[i]) - float64(yq[i])
		sig += float64(y[i]) * float64(y[i])
		noise += d * d
	}
	return sqnrDB(sig, noise), nil
}

func minOf(v []float32) float32 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float32) float32 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

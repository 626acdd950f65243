package passes

import (
	"context"

	"fmt"
	"math"

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
// absorb a division of X's features: LayerNormalization (scale and bias)
// or the Mul → Add that ends a written-out LayerNorm.
type smoothSite struct {
	x       *onnxgraph.Value
	layers  []*onnxgraph.Node
	weights []*weightData
	// transposed marks a Gemm with transB: its weight is [N, K].
	transposed []bool
	// absorb are the producer's constants divided by s.
	absorb []*weightData
	k      int
	absMax []float64
	// rows are the first activation rows, kept for the report.
	rows        []float32
	s           []float32
	originalsOf map[string][]float32
}

// runActivationAlgorithms runs the data-aware algorithms that change the
// float model before prepare and calibration see it.
func runActivationAlgorithms(ctx context.Context, u *Unit) error {
	if u.Algorithms == nil || u.Algorithms.SmoothQuant == nil {
		return nil
	}
	sq := u.Algorithms.SmoothQuant
	if u.Data == nil || u.Data.Source == nil {
		return &MissingDataError{Algorithm: smoothQuantName, Rule: sq.Rule}
	}
	return runSmoothQuant(ctx, u, sq)
}

// runSmoothQuant is SmoothQuant (Xiao et al., "SmoothQuant: Accurate and
// Efficient Post-Training Quantization for Large Language Models", 2023):
// for every activation X read only by MatMul and Gemm layers with
// constant weights and produced by a LayerNorm (or its written-out
// Mul → Add), feature j of X is divided by
// s_j = max|X_j|^α / max|W_j|^(1−α) and row j of every reading weight
// multiplied by it, the division folded into the LayerNorm's scale and
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
		site, why, err := smoothSiteOf(m, v, cfg)
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
		if err := site.smooth(m, cfg.Alpha); err != nil {
			return fmt.Errorf("%s: value %q: %w", smoothQuantName, site.x.Name, err)
		}
	}
	u.smoothed = append(u.smoothed, sites...)
	return nil
}

// smoothSiteOf returns v as a SmoothQuant site, or why not ("" when
// SmoothQuant does not apply to it at all).
func smoothSiteOf(m *onnxgraph.Model, v *onnxgraph.Value, cfg *config.SmoothQuant) (*smoothSite, string, error) {
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
	site := &smoothSite{x: v, originalsOf: map[string][]float32{}}
	load := func(c *onnxgraph.Value) (*weightData, string, error) {
		if c == nil || !c.IsConst() || initializerIndex(m, c) < 0 || tensor.DType(c.Const.GetDataType()) != tensor.Float {
			return nil, fmt.Sprintf("%q is not a float32 initializer", valueName(c)), nil
		}
		if len(c.Consumers) != 1 {
			return nil, fmt.Sprintf("%q is shared by several nodes", c.Name), nil
		}
		d, shape, err := constFloats(m, c)
		if err != nil {
			return nil, "", err
		}
		return &weightData{v: c, data: d, shape: shape, original: append([]float32(nil), d...)}, "", nil
	}
	for _, c := range v.Consumers {
		switch {
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
	var consts []*onnxgraph.Value
	switch {
	case p.OpType == "LayerNormalization" && p.Domain == "":
		if a := p.Attr("axis"); a != nil && a.GetI() != -1 {
			return nil, fmt.Sprintf("%s normalizes over axis %d, not the last", p, a.GetI()), nil
		}
		consts = p.Inputs[1:]
	case p.OpType == "Add" && p.Domain == "" && len(p.Inputs) == 2:
		// Written-out LayerNorm: (normalized · γ) + β.
		for i, in := range p.Inputs {
			mul := p.Inputs[1-i].Producer
			if in.IsConst() && mul != nil && mul.OpType == "Mul" && mul.Domain == "" && len(mul.Inputs) == 2 && len(mul.Outputs[0].Consumers) == 1 {
				for _, mi := range mul.Inputs {
					if mi.IsConst() {
						consts = []*onnxgraph.Value{mi, in}
					}
				}
			}
		}
	}
	if len(consts) == 0 {
		return nil, fmt.Sprintf("%q is produced by %s, which has no per-feature constants to absorb the scale", v.Name, p), nil
	}
	for _, c := range consts {
		if c == nil {
			continue
		}
		w, why, err := load(c)
		if why != "" || err != nil {
			return nil, fmt.Sprintf("%s: %s", p, why), err
		}
		if len(w.data) != site.k {
			return nil, fmt.Sprintf("%s: %q has %d values for %d features", p, c.Name, len(w.data), site.k), nil
		}
		site.absorb = append(site.absorb, w)
	}
	site.absMax = make([]float64, site.k)
	return site, "", nil
}

func valueName(v *onnxgraph.Value) string {
	if v == nil {
		return ""
	}
	return v.Name
}

// observe folds one batch of X into the per-feature maxima and keeps its
// rows for the report, up to smoothReportRows.
func (s *smoothSite) observe(x []float32, shape []int) error {
	if len(shape) == 0 || shape[len(shape)-1] != s.k {
		return fmt.Errorf("shape %v: want %d features on the last axis", shape, s.k)
	}
	for r := range len(x) / s.k {
		row := x[r*s.k : (r+1)*s.k]
		for j, v := range row {
			s.absMax[j] = max(s.absMax[j], math.Abs(float64(v)))
		}
		if len(s.rows) < smoothReportRows*s.k {
			s.rows = append(s.rows, row...)
		}
	}
	return nil
}

// smooth computes s and rescales the weights and the absorbing constants.
func (s *smoothSite) smooth(m *onnxgraph.Model, alpha float64) error {
	wMax := make([]float64, s.k)
	for i, w := range s.weights {
		for idx, v := range w.data {
			j := idx / w.shape[1]
			if s.transposed[i] {
				j = idx % w.shape[1]
			}
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
	for i, w := range s.weights {
		for idx := range w.data {
			j := idx / w.shape[1]
			if s.transposed[i] {
				j = idx % w.shape[1]
			}
			w.data[idx] *= s.s[j]
		}
		if err := setConst(m, w.v, w.data, w.shape); err != nil {
			return err
		}
	}
	for _, c := range s.absorb {
		for j := range c.data {
			c.data[j] /= s.s[j]
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
			before, err := s.productSQNR(s.rows, w.original, w.shape, s.transposed[i], xp, wp, u.Prepare, nil)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", smoothQuantName, layer, err)
			}
			after, err := s.productSQNR(scaled, w.data, w.shape, s.transposed[i], xp, wp, u.Prepare, wp.Params)
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

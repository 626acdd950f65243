package compare

import (
	"context"
	"fmt"
	"iter"
	"math"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// GroupBy is how quantization points are gathered into the groups a
// sensitivity analysis toggles together.
type GroupBy string

// The groupings: the points of one node, of one module scope, or one
// point with those that cannot be written without it (tensor).
const (
	GroupByNode   GroupBy = "node"
	GroupByModule GroupBy = "module"
	GroupByTensor GroupBy = "tensor"
)

// ParseGroupBy reads a --group value.
func ParseGroupBy(s string) (GroupBy, error) {
	switch g := GroupBy(s); g {
	case GroupByNode, GroupByModule, GroupByTensor:
		return g, nil
	}
	return "", fmt.Errorf("unknown grouping %q: want node, module or tensor", s)
}

// Group is a set of quantization points switched on or off together.
type Group struct {
	Name   string   `json:"name"`
	Values []string `json:"values"`
}

// Groups gathers the plan's points (palettized weights among them) by node,
// module scope or tensor. A point belongs
// to the first node it is quantized for; a point that shares qparams goes
// with the root of its sharing group, and a bias with its weight, so that
// each group can be dropped from the plan on its own. Groups and their
// values are sorted by name.
func Groups(m *onnxgraph.Model, pl *plan.Plan, by GroupBy) []Group {
	var owner func(t *plan.TensorPlan, depth int) string
	owner = func(t *plan.TensorPlan, depth int) string {
		if t.Role == plan.Bias && depth < 2 {
			if w := pl.Tensor(t.Weight); w != nil {
				return owner(w, depth+1)
			}
		}
		if r := pl.Root(t); r != nil && r != t && depth < 2 {
			return owner(r, depth+1)
		}
		if len(t.Nodes) == 0 || by == GroupByTensor {
			return t.Value
		}
		node := t.Nodes[0]
		if by == GroupByModule {
			if n := m.Graph.Node(node); n != nil && n.Module != "" {
				return n.Module
			}
		}
		return node
	}
	byName := map[string][]string{}
	for _, t := range pl.Tensors {
		g := owner(t, 0)
		byName[g] = append(byName[g], t.Value)
	}
	for _, p := range pl.Palettes {
		g := owner(&plan.TensorPlan{Value: p.Value, Nodes: p.Nodes}, 0)
		byName[g] = append(byName[g], p.Value)
	}
	out := make([]Group, 0, len(byName))
	for name, vals := range byName {
		sort.Strings(vals)
		out = append(out, Group{Name: name, Values: vals})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SubPlan is a copy of plan holding only the points keep accepts, less
// those that cannot be written without a dropped one: a bias whose input or
// weight is gone, a point sharing the qparams of a dropped root.
func SubPlan(pl *plan.Plan, keep func(value string) bool) *plan.Plan {
	sub := &plan.Plan{Stage: pl.Stage, Skipped: pl.Skipped, Notes: pl.Notes}
	for _, t := range pl.Tensors {
		if keep(t.Value) {
			sub.Tensors = append(sub.Tensors, t)
		}
	}
	for _, p := range pl.Palettes {
		if keep(p.Value) {
			c := *p
			c.Report = nil // Write fills it in
			sub.Palettes = append(sub.Palettes, &c)
		}
	}
	for {
		drop := map[string]bool{}
		for _, t := range sub.Tensors {
			switch {
			case t.Role == plan.Bias && (sub.Tensor(t.Input) == nil || sub.Tensor(t.Weight) == nil):
				drop[t.Value] = true
			case t.SharedWith != "" && sub.Tensor(t.SharedWith) == nil:
				drop[t.Value] = true
			}
		}
		if len(drop) == 0 {
			return sub
		}
		sub.Remove(drop)
	}
}

// Sensitivity is the result of a sensitivity analysis.
type Sensitivity struct {
	// Grouping is node or module.
	Grouping GroupBy `json:"grouping"`
	// Samples is the number of held-out samples measured.
	Samples int `json:"samples"`
	// AllQuantized is the output SQNR with every point quantized.
	AllQuantized DB `json:"all_quantized_sqnr_db"`
	// Key identifies what was measured (model, plan, data, flags): only
	// shards with one key merge.
	Key string `json:"key,omitempty"`
	// Shard is "i/n" for the i-th of n shards of the groups, "" for all.
	Shard string `json:"shard,omitempty"`
	// Groups are ranked worst first: by OnlySQNR ascending, then name.
	Groups []GroupSensitivity `json:"groups"`
}

// Shard selects the groups of shard Index of Count: the groups in name
// order, dealt round-robin, so that shards have about as many groups
// whatever the group sizes. Count 0 is the whole analysis.
type Shard struct {
	Index, Count int
}

func (s Shard) String() string {
	if s.Count == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

func (s Shard) has(i int) bool { return s.Count == 0 || i%s.Count == s.Index }

// MergeShards joins the results of the shards 0/n to n-1/n of one
// analysis into the result of the whole analysis: each shard once, all with
// the same key, grouping, samples and all-quantized SQNR.
func MergeShards(parts []*Sensitivity) (*Sensitivity, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("no shard to merge")
	}
	first := parts[0]
	var n int
	if _, err := fmt.Sscanf(first.Shard, "%d/%d", new(int), &n); err != nil || n < 1 {
		return nil, fmt.Errorf("shard %q of the first result: not a shard i/n", first.Shard)
	}
	seen := make([]bool, n)
	out := &Sensitivity{Grouping: first.Grouping, Samples: first.Samples, AllQuantized: first.AllQuantized, Key: first.Key}
	for k, p := range parts {
		var i, m int
		if _, err := fmt.Sscanf(p.Shard, "%d/%d", &i, &m); err != nil || m != n || i < 0 || i >= n {
			return nil, fmt.Errorf("result %d: shard %q, want i/%d", k+1, p.Shard, n)
		}
		switch {
		case seen[i]:
			return nil, fmt.Errorf("result %d: shard %s given twice", k+1, p.Shard)
		case p.Key != first.Key:
			return nil, fmt.Errorf("result %d (shard %s): measured another model, config, data or flags than shard %s (key %.12s, want %.12s)", k+1, p.Shard, first.Shard, p.Key, first.Key)
		case p.Grouping != first.Grouping || p.Samples != first.Samples || p.AllQuantized != first.AllQuantized:
			return nil, fmt.Errorf("result %d (shard %s): grouping %s, %d samples, %s dB all quantized, want %s, %d, %s dB as shard %s",
				k+1, p.Shard, p.Grouping, p.Samples, p.AllQuantized, first.Grouping, first.Samples, first.AllQuantized, first.Shard)
		}
		seen[i] = true
		out.Groups = append(out.Groups, p.Groups...)
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("shard %d/%d is missing", i, n)
		}
	}
	out.rank()
	return out, nil
}

// rank sorts the groups worst first: by OnlySQNR ascending, then name.
func (r *Sensitivity) rank() {
	sort.SliceStable(r.Groups, func(i, j int) bool {
		a, b := r.Groups[i], r.Groups[j]
		if a.OnlySQNR != b.OnlySQNR {
			return a.OnlySQNR < b.OnlySQNR
		}
		return a.Group < b.Group
	})
}

// GroupSensitivity is the output error caused by one group.
type GroupSensitivity struct {
	Group  string `json:"group"`
	Points int    `json:"points"`
	// Values are the group's points, by value name.
	Values []string `json:"values"`
	// OnlySQNR is the output SQNR with only this group quantized.
	OnlySQNR DB `json:"only_this_quantized_sqnr_db"`
	// ExceptSQNR is the output SQNR with everything quantized but this
	// group, and Gain is ExceptSQNR − the all-quantized SQNR: what leaving
	// the group in float buys.
	ExceptSQNR DB `json:"all_but_this_quantized_sqnr_db"`
	Gain       DB `json:"gain_db"`
}

// SensitivityInput is what Analyze measures: the float reference model, the
// prepared model the plan was made for (BatchNormalization folded), the
// calibrated plan and its statistics, and the held-out data.
type SensitivityInput struct {
	Float    *onnxgraph.Model
	Prepared *onnxgraph.Model
	Plan     *plan.Plan
	Write    finalize.Options
	// ModelFor, when set, is the model a candidate plan is written from
	// (Prepared otherwise): bias correction's biases fit the planned
	// weights, and a weight the candidate leaves in float wants its
	// layer's bias as it was.
	ModelFor func(pl *plan.Plan) (*onnxgraph.Model, error)
	// Data yields the held-out batches; it is called once.
	Data     iter.Seq2[Batch, error]
	Engine   string
	Threads  int
	Grouping GroupBy
	// Shard limits the analysis to one shard of the groups.
	Shard Shard
	// Progress, when set, is called after each group is measured.
	Progress func(done, total int, g GroupSensitivity)
}

// Measurer measures candidate models against the float model on fixed
// held-out batches: the float outputs are computed once.
type Measurer struct {
	engine  string
	threads int
	batches []Batch
	wants   []map[string]*tensor.Tensor
	outputs []runtime.IOInfo
	// buffers passes each candidate's run buffers to the next one.
	buffers *runtime.BufferPool
	// Samples is the number of held-out samples measured on.
	Samples int
}

// NewMeasurer runs the float model once on data (called once).
func NewMeasurer(ctx context.Context, engine string, threads int, float *onnxgraph.Model, data iter.Seq2[Batch, error]) (*Measurer, error) {
	buffers := runtime.NewBufferPool()
	ref, err := runtime.Open(engine, float, runtime.Options{Threads: threads, Buffers: buffers})
	if err != nil {
		return nil, fmt.Errorf("float model: %w", err)
	}
	defer ref.Close()
	m := &Measurer{engine: engine, threads: threads, outputs: ref.Outputs(), buffers: buffers}
	for b, err := range data {
		if err != nil {
			return nil, err
		}
		want, err := ref.Run(ctx, b, runtime.RunOptions{})
		if err != nil {
			return nil, fmt.Errorf("float model: %w", err)
		}
		m.batches, m.wants = append(m.batches, b), append(m.wants, want)
		m.Samples += batchRows(b)
	}
	if len(m.batches) == 0 {
		return nil, fmt.Errorf("no held-out samples to measure on")
	}
	return m, nil
}

// Measure is the SQNR of the candidate's worst float output on the
// held-out batches (+Inf when no output is a float).
func (m *Measurer) Measure(ctx context.Context, model *onnxgraph.Model) (DB, error) {
	r, err := m.MeasureAll(ctx, model)
	return r.SQNR, err
}

// Measurement is a candidate's agreement with the float model.
type Measurement struct {
	// SQNR is the worst float output's (+Inf when no output is a float).
	SQNR DB
	// Top1 is the lowest top-1 agreement (percent of rows whose largest
	// class is the float model's) among the float outputs shaped [batch,
	// classes] or [batch, classes, 1, ...] (as compare reads them); nil
	// when there is none.
	Top1 *float64
}

// MeasureAll measures the candidate's outputs on the held-out batches.
func (m *Measurer) MeasureAll(ctx context.Context, model *onnxgraph.Model) (Measurement, error) {
	cand, err := runtime.Open(m.engine, model, runtime.Options{Threads: m.threads, Buffers: m.buffers})
	if err != nil {
		return Measurement{}, err
	}
	defer cand.Close()
	stats := make([]Stats, len(m.outputs))
	tops := make([]TopK, len(m.outputs))
	for i, b := range m.batches {
		got, err := cand.Run(ctx, b, runtime.RunOptions{})
		if err != nil {
			return Measurement{}, err
		}
		for j, o := range m.outputs {
			w, g := m.wants[i][o.Name], got[o.Name]
			if w == nil || g == nil {
				return Measurement{}, fmt.Errorf("output %q missing", o.Name)
			}
			if !w.DType.IsFloat() {
				continue // integer outputs (indices, counts) have no SQNR
			}
			x, err := w.AsFloat32()
			if err != nil {
				return Measurement{}, fmt.Errorf("output %q: %w", o.Name, err)
			}
			y, err := g.AsFloat32()
			if err != nil {
				return Measurement{}, fmt.Errorf("output %q: %w", o.Name, err)
			}
			if err := stats[j].Add(x, y); err != nil {
				return Measurement{}, fmt.Errorf("output %q: %w", o.Name, err)
			}
			if rows, classes, ok := logitsShape(w.Shape); ok {
				if err := tops[j].Add(x, y, rows, classes, nil); err != nil {
					return Measurement{}, fmt.Errorf("output %q: %w", o.Name, err)
				}
			}
		}
	}
	r := Measurement{SQNR: DB(math.Inf(1))}
	for i := range stats {
		if stats[i].N > 0 || stats[i].NonFinite > 0 {
			r.SQNR = min(r.SQNR, stats[i].SQNR())
		}
		if tops[i].Samples > 0 {
			p := 100 * float64(tops[i].Top1) / float64(tops[i].Samples)
			if r.Top1 == nil || p < *r.Top1 {
				r.Top1 = &p
			}
		}
	}
	return r, nil
}

// LocalNoise runs the candidate on the held-out batches and returns, for
// each pair's Tensor, its own quantization noise: the power of the
// dequantized value's difference from the value entering its
// QuantizeLinear (times the pair's Factor) relative to that value's, both
// in the candidate's run. Unlike the per-layer SQNR it leaves out what the
// values before it brought, so it says what the point costs where it is.
func (m *Measurer) LocalNoise(ctx context.Context, model *onnxgraph.Model, pairs []Pair) (map[string]float64, error) {
	cand, err := runtime.Open(m.engine, model, runtime.Options{Threads: m.threads, Buffers: m.buffers})
	if err != nil {
		return nil, err
	}
	defer cand.Close()
	byQuantized, byDequantized := map[string]*Pair{}, map[string]*Pair{}
	var taps []string
	for i := range pairs {
		p := &pairs[i]
		byQuantized[p.Quantized], byDequantized[p.Dequantized] = p, p
		taps = append(taps, p.Quantized, p.Dequantized)
	}
	signal, noise := map[string]float64{}, map[string]float64{}
	held := map[string][]float32{} // a QuantizeLinear's input until its DequantizeLinear's output comes
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		if tapErr != nil {
			return
		}
		f, err := t.AsFloat32()
		if err != nil {
			tapErr = fmt.Errorf("value %q: %w", name, err)
			return
		}
		if p := byQuantized[name]; p != nil {
			held[p.Tensor] = append([]float32(nil), f...)
		}
		p := byDequantized[name]
		if p == nil {
			return
		}
		x := held[p.Tensor]
		delete(held, p.Tensor)
		if len(x) != len(f) {
			tapErr = fmt.Errorf("value %q: %d values dequantized from %d", name, len(f), len(x))
			return
		}
		factor := 1.0
		if p.Factor != 0 {
			factor = p.Factor
		}
		var sig, nse float64
		for i, v := range x {
			want := factor * float64(v)
			d := float64(f[i]) - want
			if math.IsInf(want, 0) || math.IsNaN(want) || math.IsInf(d, 0) || math.IsNaN(d) {
				continue
			}
			sig += want * want
			nse += d * d
		}
		signal[p.Tensor] += sig
		noise[p.Tensor] += nse
	}
	for _, b := range m.batches {
		if _, err := cand.Run(ctx, b, runtime.RunOptions{Tap: tap, TapValues: taps, TapsOnly: true}); err != nil {
			return nil, err
		}
		if tapErr != nil {
			return nil, tapErr
		}
	}
	out := map[string]float64{}
	for v, sig := range signal {
		switch {
		case sig > 0:
			out[v] = noise[v] / sig
		case noise[v] > 0:
			out[v] = math.Inf(1)
		default:
			out[v] = 0
		}
	}
	return out, nil
}

// Analyze measures each group's effect on the model's outputs: the SQNR
// of the worst output when only the group is quantized, and when all but
// the group is. The float outputs are computed once and the calibration
// statistics are reused for every candidate.
func Analyze(ctx context.Context, in SensitivityInput) (*Sensitivity, error) {
	m, err := NewMeasurer(ctx, in.Engine, in.Threads, in.Float, in.Data)
	if err != nil {
		return nil, err
	}
	measure := func(pl *plan.Plan) (DB, error) {
		model := in.Prepared
		if in.ModelFor != nil {
			var err error
			if model, err = in.ModelFor(pl); err != nil {
				return 0, err
			}
		}
		res, err := finalize.Write(model, pl, in.Write)
		if err != nil {
			return 0, err
		}
		return m.Measure(ctx, res.Model)
	}
	all, err := measure(in.Plan)
	if err != nil {
		return nil, fmt.Errorf("all points quantized: %w", err)
	}
	r := &Sensitivity{Grouping: in.Grouping, Samples: m.Samples, AllQuantized: all, Shard: in.Shard.String()}
	var groups []Group
	for i, g := range Groups(in.Prepared, in.Plan, in.Grouping) {
		if in.Shard.has(i) {
			groups = append(groups, g)
		}
	}
	for i, g := range groups {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		members := map[string]bool{}
		for _, v := range g.Values {
			members[v] = true
		}
		only, err := measure(SubPlan(in.Plan, func(v string) bool { return members[v] }))
		if err != nil {
			return nil, fmt.Errorf("group %q quantized alone: %w", g.Name, err)
		}
		except, err := measure(SubPlan(in.Plan, func(v string) bool { return !members[v] }))
		if err != nil {
			return nil, fmt.Errorf("group %q left in float: %w", g.Name, err)
		}
		gs := GroupSensitivity{Group: g.Name, Points: len(g.Values), Values: g.Values, OnlySQNR: only, ExceptSQNR: except, Gain: except - all}
		r.Groups = append(r.Groups, gs)
		if in.Progress != nil {
			in.Progress(i+1, len(groups), gs)
		}
	}
	r.rank()
	return r, nil
}

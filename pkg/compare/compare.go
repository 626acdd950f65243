package compare

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"sync"

	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Batch is one batch of model inputs keyed by input name, batch on axis 0.
type Batch = map[string]*tensor.Tensor

// Options controls Run.
type Options struct {
	// Layers, when not nil, turns on the per-layer report for these pairs
	// (see PairActivations).
	Layers *Pairing
	// Labels holds one class index per sample, in data order; when set, the
	// accuracy of both models is reported for logits-like outputs.
	Labels []int64
	// Progress, when set, is called after each batch with the number of
	// samples done so far.
	Progress func(samples int)
	// Slices are ranges of outputs compared on their own (OutputReport.Slices).
	Slices []Slice
}

// Report is the result of a comparison.
type Report struct {
	Reference string `json:"reference,omitempty"`
	Candidate string `json:"candidate,omitempty"`
	Engine    string `json:"engine"`
	Samples   int    `json:"samples"`
	Batches   int    `json:"batches"`
	// Outputs in the reference model's output order.
	Outputs []OutputReport `json:"outputs"`
	// Layers, worst SQNR first; nil without --per-layer.
	Layers []LayerReport `json:"layers,omitempty"`
	// Unpaired lists quantized values of the candidate that have no per-layer
	// entry, with the reason.
	Unpaired []Unpaired `json:"unpaired,omitempty"`
	// WeightDequantizers counts the DequantizeLinear nodes on constants,
	// which the per-layer report does not cover (they are not activations).
	WeightDequantizers int `json:"weight_dequantizers,omitempty"`
	// Palettized lists the candidate's palettized weights (with
	// --per-layer), from the candidate's metadata.
	Palettized []PaletteWeight `json:"palettized,omitempty"`
	// Gates holds the thresholds checked and Violations the ones that failed.
	Gates      *Gates      `json:"gates,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
}

// OutputReport compares one model output.
type OutputReport struct {
	Name string `json:"name"`
	// CandidateName is the candidate's output paired with it when the
	// names differ (outputs are then paired by position).
	CandidateName string `json:"candidate_name,omitempty"`
	// Shape is the output's shape in the first batch.
	Shape        []int   `json:"shape"`
	SQNR         DB      `json:"sqnr_db"`
	Cosine       float64 `json:"cosine"`
	MaxAbsError  float64 `json:"max_abs_error"`
	MeanAbsError float64 `json:"mean_abs_error"`
	// NonFinite counts element pairs where one side is NaN or infinite and
	// the other is not (they make SQNR −inf).
	NonFinite int64 `json:"non_finite,omitempty"`
	// Top1Agreement and Top5Agreement are percentages, set for logits-like
	// outputs ([batch, classes], or [batch, classes, 1, ...]).
	Top1Agreement *float64 `json:"top1_agreement,omitempty"`
	Top5Agreement *float64 `json:"top5_agreement,omitempty"`
	// ReferenceAccuracy and CandidateAccuracy are top-1 accuracies in
	// percent against the labels, when labels were given.
	ReferenceAccuracy *float64 `json:"reference_accuracy,omitempty"`
	CandidateAccuracy *float64 `json:"candidate_accuracy,omitempty"`
	// Slices are the ranges of the output asked for, each compared on its
	// own.
	Slices []SliceReport `json:"slices,omitempty"`

	stats Stats
	topk  *TopK
}

// LogitsLike reports whether the output was treated as [batch, classes].
func (o *OutputReport) LogitsLike() bool { return o.Top1Agreement != nil }

// LayerReport is the per-layer comparison of one quantized activation.
type LayerReport struct {
	Pair
	// SQNR compares the candidate's dequantized value with the reference's
	// float value: the error accumulated up to and including this tensor.
	SQNR   DB      `json:"sqnr_db"`
	Cosine float64 `json:"cosine"`
	// LocalSQNR compares the candidate's dequantized value with the
	// candidate's own value before QuantizeLinear: the error this
	// quantizer alone adds.
	LocalSQNR   DB      `json:"local_sqnr_db"`
	MaxAbsError float64 `json:"max_abs_error"`
	// NonFinite and LocalNonFinite count the element pairs of the two
	// comparisons that are NaN or infinite on one side only, typically a
	// −Inf attention mask that QuantizeLinear saturates. Unlike an
	// output's, a layer's SQNR leaves them out (FiniteSQNR), so that such a
	// layer still shows the error of its other values.
	NonFinite      int64 `json:"non_finite,omitempty"`
	LocalNonFinite int64 `json:"local_non_finite,omitempty"`
	// Histogram is the distribution of the reference's float values.
	Histogram *Histogram `json:"-"`
}

// Run feeds every batch of data to ref and cand and compares their outputs
// and, with opts.Layers, each quantized activation with its float
// counterpart. Memory holds one batch's paired activations at a time; sums
// and histograms are the only state kept across batches.
func Run(ctx context.Context, ref, cand runtime.Session, data iter.Seq2[Batch, error], opts Options) (*Report, error) {
	r := &Report{Engine: ref.Engine()}
	outs, err := pairOutputs(ref, cand)
	if err != nil {
		return nil, err
	}
	r.Outputs = outs
	for _, sl := range opts.Slices {
		i := slices.IndexFunc(r.Outputs, func(o OutputReport) bool { return o.Name == sl.Output })
		if i < 0 {
			return nil, fmt.Errorf("slice %q: the reference model has no output %q", sl.Name, sl.Output)
		}
		r.Outputs[i].Slices = append(r.Outputs[i].Slices, SliceReport{Slice: sl})
	}
	var ls *layerState
	if opts.Layers != nil {
		ls = newLayerState(opts.Layers)
		r.Unpaired = slices.Clone(opts.Layers.Unpaired)
		r.WeightDequantizers = opts.Layers.Weights
	}
	labelOff := 0
	for batch, err := range data {
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rows := batchRows(batch)
		var refOpts, candOpts runtime.RunOptions
		if ls != nil {
			ls.startBatch()
			refOpts = runtime.RunOptions{Tap: ls.refTap, TapValues: ls.refNames}
			candOpts = runtime.RunOptions{Tap: ls.candTap, TapValues: ls.candNames}
		}
		want, err := ref.Run(ctx, batch, refOpts)
		if err != nil {
			return nil, fmt.Errorf("reference model, batch %d: %w", r.Batches+1, err)
		}
		if ls != nil && ls.err != nil {
			return nil, fmt.Errorf("reference model, batch %d: %w", r.Batches+1, ls.err)
		}
		got, err := cand.Run(ctx, batch, candOpts)
		if err != nil {
			return nil, fmt.Errorf("candidate model, batch %d: %w", r.Batches+1, err)
		}
		if ls != nil {
			if ls.err != nil {
				return nil, fmt.Errorf("candidate model, batch %d: %w", r.Batches+1, ls.err)
			}
			ls.endBatch(cand.Engine())
		}
		var labels []int64
		if opts.Labels != nil {
			if labelOff+rows > len(opts.Labels) {
				return nil, fmt.Errorf("%d labels for more than %d samples: the labels file needs one label per sample", len(opts.Labels), labelOff)
			}
			labels = opts.Labels[labelOff : labelOff+rows]
			labelOff += rows
		}
		for i := range r.Outputs {
			if err := r.Outputs[i].add(want, got, rows, labels); err != nil {
				return nil, fmt.Errorf("batch %d: %w", r.Batches+1, err)
			}
		}
		r.Samples += rows
		r.Batches++
		if opts.Progress != nil {
			opts.Progress(r.Samples)
		}
	}
	if r.Batches == 0 {
		return nil, errors.New("no data: the data source yielded no batch")
	}
	if opts.Labels != nil && labelOff != len(opts.Labels) {
		return nil, fmt.Errorf("%d labels for %d samples: the labels file needs one label per sample", len(opts.Labels), labelOff)
	}
	for i := range r.Outputs {
		r.Outputs[i].finish()
	}
	if ls != nil {
		r.Layers = ls.reports()
		r.Unpaired = append(r.Unpaired, ls.missing...)
	}
	return r, nil
}

// batchRows is the batch size: axis 0 of the first input by name (1 for
// scalars).
func batchRows(b Batch) int {
	names := make([]string, 0, len(b))
	for n := range b {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if t := b[n]; t != nil && len(t.Shape) > 0 {
			return t.Shape[0]
		}
	}
	return 1
}

// pairOutputs matches outputs by name, or by position when the candidate
// renamed them and has as many.
func pairOutputs(ref, cand runtime.Session) ([]OutputReport, error) {
	ro, co := ref.Outputs(), cand.Outputs()
	byName := map[string]bool{}
	for _, o := range co {
		byName[o.Name] = true
	}
	var out []OutputReport
	for i, o := range ro {
		rep := OutputReport{Name: o.Name}
		if !byName[o.Name] {
			if len(ro) != len(co) {
				return nil, fmt.Errorf("output %q of the reference is not an output of the candidate, and the models have %d and %d outputs, so they cannot be paired by position", o.Name, len(ro), len(co))
			}
			rep.CandidateName = co[i].Name
		}
		out = append(out, rep)
	}
	if len(out) == 0 {
		return nil, errors.New("the reference model has no outputs")
	}
	return out, nil
}

func (o *OutputReport) add(want, got map[string]*tensor.Tensor, rows int, labels []int64) error {
	cn := o.Name
	if o.CandidateName != "" {
		cn = o.CandidateName
	}
	rt, ct := want[o.Name], got[cn]
	if rt == nil || ct == nil {
		return fmt.Errorf("output %q missing from a model's results", o.Name)
	}
	if !slices.Equal(rt.Shape, ct.Shape) {
		return fmt.Errorf("output %q: reference shape %v, candidate shape %v", o.Name, rt.Shape, ct.Shape)
	}
	x, err := rt.AsFloat32()
	if err != nil {
		return fmt.Errorf("output %q of the reference: %w", o.Name, err)
	}
	y, err := ct.AsFloat32()
	if err != nil {
		return fmt.Errorf("output %q of the candidate: %w", cn, err)
	}
	if o.Shape == nil {
		o.Shape = slices.Clone(rt.Shape)
		if _, _, ok := logitsShape(rt.Shape); ok {
			o.topk = &TopK{}
		}
	}
	if err := o.stats.Add(x, y); err != nil {
		return fmt.Errorf("output %q: %w", o.Name, err)
	}
	if err := o.addSlices(x, y, rt.Shape); err != nil {
		return fmt.Errorf("output %q: %w", o.Name, err)
	}
	if o.topk != nil {
		n, classes, ok := logitsShape(rt.Shape)
		if !ok {
			return fmt.Errorf("output %q changed from [batch, classes] in the first batch to %v", o.Name, rt.Shape)
		}
		if labels != nil && n != rows {
			return fmt.Errorf("output %q has %d rows for a batch of %d samples, so labels cannot be matched to rows", o.Name, n, rows)
		}
		if err := o.topk.Add(x, y, n, classes, labels); err != nil {
			return fmt.Errorf("output %q: %w", o.Name, err)
		}
	}
	return nil
}

// logitsShape reads shape as [batch, classes]: rank 2 with at least two
// classes, or [batch, classes, 1, ...], which holds the same numbers in the
// same order (convolutional classifiers such as SqueezeNet end in a
// [batch, classes, 1, 1] Softmax).
func logitsShape(shape []int) (rows, classes int, ok bool) {
	if len(shape) < 2 || shape[1] < 2 {
		return 0, 0, false
	}
	for _, d := range shape[2:] {
		if d != 1 {
			return 0, 0, false
		}
	}
	return shape[0], shape[1], true
}

func (o *OutputReport) finish() {
	s := &o.stats
	o.SQNR, o.Cosine, o.MaxAbsError, o.MeanAbsError, o.NonFinite = s.SQNR(), s.Cosine(), s.MaxAbs, s.MeanAbs(), s.NonFinite
	for i := range o.Slices {
		o.Slices[i].finish()
	}
	if k := o.topk; k != nil {
		o.Top1Agreement = percent(k.Top1, k.Samples)
		o.Top5Agreement = percent(k.Top5, k.Samples)
		o.ReferenceAccuracy = percent(k.RefCorrect, k.Labeled)
		o.CandidateAccuracy = percent(k.CandCorrect, k.Labeled)
	}
}

// layerState streams the per-layer comparison. The reference run stores a
// float32 copy of every paired value; the candidate run compares each pair
// as soon as its two values exist and frees what no other pair still needs,
// so the order in which an engine reports values does not matter.
type layerState struct {
	mu    sync.Mutex
	pairs []Pair
	acc   []layerAcc
	hist  map[string]*Histogram // by reference tensor

	refNames, candNames []string
	// refUses and candUses count, per value, the pairs that read it.
	refUses, candUses map[string]int
	// byCand lists the pairs that read a candidate value.
	byCand map[string][]int

	refStore, candStore map[string][]float32
	candShape           map[string][]int
	left                map[string]int // uses left this batch
	done                []bool
	err                 error
	missing             []Unpaired
	reported            map[int]bool // pairs already listed as missing
}

type layerAcc struct {
	global, local Stats
	batches       int
}

func newLayerState(p *Pairing) *layerState {
	ls := &layerState{pairs: p.Pairs, acc: make([]layerAcc, len(p.Pairs)), hist: map[string]*Histogram{},
		refUses: map[string]int{}, candUses: map[string]int{}, byCand: map[string][]int{}, reported: map[int]bool{}}
	// TapValues must be non-nil even when empty: nil means "every value".
	ls.refNames, ls.candNames = []string{}, []string{}
	for i, pr := range p.Pairs {
		if ls.refUses[pr.Tensor] == 0 {
			ls.refNames = append(ls.refNames, pr.Tensor)
			ls.hist[pr.Tensor] = &Histogram{}
		}
		ls.refUses[pr.Tensor]++
		for _, v := range []string{pr.Quantized, pr.Dequantized} {
			if ls.candUses[v] == 0 {
				ls.candNames = append(ls.candNames, v)
			}
			ls.candUses[v]++
			ls.byCand[v] = append(ls.byCand[v], i)
		}
	}
	return ls
}

func (ls *layerState) startBatch() {
	ls.refStore, ls.candStore, ls.candShape = map[string][]float32{}, map[string][]float32{}, map[string][]int{}
	ls.left = map[string]int{}
	for k, n := range ls.refUses {
		ls.left["r\x00"+k] = n
	}
	for k, n := range ls.candUses {
		ls.left["c\x00"+k] = n
	}
	ls.done = make([]bool, len(ls.pairs))
}

func copyFloats(name string, t *tensor.Tensor) ([]float32, error) {
	x, err := t.AsFloat32()
	if err != nil {
		return nil, fmt.Errorf("value %q: %w", name, err)
	}
	if t.DType == tensor.Float {
		x = slices.Clone(x)
	}
	return x, nil
}

func (ls *layerState) refTap(name string, t *tensor.Tensor) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.err != nil || ls.refUses[name] == 0 {
		return
	}
	x, err := copyFloats(name, t)
	if err != nil {
		ls.err = err
		return
	}
	ls.hist[name].Add(x)
	ls.refStore[name] = x
}

func (ls *layerState) candTap(name string, t *tensor.Tensor) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.err != nil || ls.candUses[name] == 0 {
		return
	}
	x, err := copyFloats(name, t)
	if err != nil {
		ls.err = err
		return
	}
	ls.candStore[name] = x
	ls.candShape[name] = slices.Clone(t.Shape)
	for _, i := range ls.byCand[name] {
		pr := ls.pairs[i]
		q, okQ := ls.candStore[pr.Quantized]
		dq, okDQ := ls.candStore[pr.Dequantized]
		rv, okR := ls.refStore[pr.Tensor]
		if ls.done[i] || !okQ || !okDQ || !okR {
			continue
		}
		global := dq
		if pr.Rescaled != nil {
			if global, ls.err = undoRescale(dq, ls.candShape[pr.Dequantized], pr.Rescaled); ls.err != nil {
				ls.err = fmt.Errorf("candidate value %q: %w", pr.Dequantized, ls.err)
				return
			}
		}
		if pr.Floored {
			if rv, ls.err = clampBelow(rv, *pr.ClipMin, ls.candShape[pr.Dequantized], pr.Rescaled); ls.err != nil {
				ls.err = fmt.Errorf("candidate value %q: %w", pr.Dequantized, ls.err)
				return
			}
		}
		if err := ls.acc[i].global.Add(rv, global); err != nil {
			ls.err = fmt.Errorf("reference value %q and candidate value %q: %w", pr.Tensor, pr.Dequantized, err)
			return
		}
		if pr.Factor != 0 {
			scaled := make([]float32, len(q))
			for j, v := range q {
				scaled[j] = float32(float64(v) * pr.Factor)
			}
			q = scaled
		}
		if pr.Floored {
			q, _ = clampBelow(q, *pr.ClipMin, nil, nil)
		}
		if err := ls.acc[i].local.Add(q, dq); err != nil {
			ls.err = fmt.Errorf("candidate values %q and %q: %w", pr.Quantized, pr.Dequantized, err)
			return
		}
		ls.acc[i].batches++
		ls.done[i] = true
		ls.release("r", pr.Tensor, ls.refStore)
		ls.release("c", pr.Quantized, ls.candStore)
		ls.release("c", pr.Dequantized, ls.candStore)
	}
}

// release frees a stored value once every pair reading it is done.
func (ls *layerState) release(side, name string, store map[string][]float32) {
	k := side + "\x00" + name
	ls.left[k]--
	if ls.left[k] == 0 {
		delete(store, name)
	}
}

// endBatch records pairs the engines did not report: they stay out of the
// per-layer table and are listed in Unpaired once.
func (ls *layerState) endBatch(engine string) {
	for i, d := range ls.done {
		if d || ls.reported[i] {
			continue
		}
		pr := ls.pairs[i]
		var absent []string
		if _, ok := ls.refStore[pr.Tensor]; !ok {
			absent = append(absent, fmt.Sprintf("reference value %q", pr.Tensor))
		}
		for _, v := range []string{pr.Quantized, pr.Dequantized} {
			if _, ok := ls.candStore[v]; !ok {
				absent = append(absent, fmt.Sprintf("candidate value %q", v))
			}
		}
		ls.reported[i] = true
		ls.missing = append(ls.missing, Unpaired{Value: pr.Dequantized,
			Reason: fmt.Sprintf("the %s engine did not report %s (computed at load as a constant?)", engine, joinAnd(absent))})
	}
	ls.refStore, ls.candStore, ls.candShape = nil, nil, nil
}

func (ls *layerState) reports() []LayerReport {
	out := []LayerReport{} // not nil: the per-layer report was asked for
	for i, pr := range ls.pairs {
		if ls.reported[i] {
			continue
		}
		a := &ls.acc[i]
		out = append(out, LayerReport{Pair: pr, SQNR: a.global.FiniteSQNR(), Cosine: a.global.Cosine(),
			LocalSQNR: a.local.FiniteSQNR(), MaxAbsError: a.global.MaxAbs, Histogram: ls.hist[pr.Tensor],
			NonFinite: a.global.NonFinite, LocalNonFinite: a.local.NonFinite})
	}
	sortLayers(out)
	return out
}

func joinAnd(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	s := items[0]
	for _, it := range items[1 : len(items)-1] {
		s += ", " + it
	}
	return s + " and " + items[len(items)-1]
}

// clampBelow returns a copy of x with every value below floor raised to
// it: floor is on the candidate's grid, so with a rescale r (x in the
// float model's frame, shaped as the candidate's value) each element's
// floor is floor with r undone, channel by channel.
func clampBelow(x []float32, floor float64, shape []int, r *plan.Rescale) ([]float32, error) {
	floors := []float32{float32(floor)}
	if r != nil {
		same := make([]float32, len(x))
		for i := range same {
			same[i] = float32(floor)
		}
		var err error
		if floors, err = undoRescale(same, shape, r); err != nil {
			return nil, err
		}
	}
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = max(v, floors[min(i, len(floors)-1)])
	}
	return out, nil
}

// undoRescale returns x (of the given shape) with r undone: channel c of
// axis r.Axis (the last for −1) becomes (x + Shift[c])·Scale[c], the value
// the reference computes.
func undoRescale(x []float32, shape []int, r *plan.Rescale) ([]float32, error) {
	axis := r.Axis
	if axis < 0 {
		axis += len(shape)
	}
	if axis < 0 || axis >= len(shape) || shape[axis] != len(r.Scale) {
		return nil, fmt.Errorf("recorded rescale of %d channels on axis %d does not fit shape %v", len(r.Scale), r.Axis, shape)
	}
	inner := tensor.NumElements(shape[axis+1:])
	out := make([]float32, len(x))
	for i, v := range x {
		c := (i / inner) % len(r.Scale)
		if r.Shift != nil {
			v += r.Shift[c]
		}
		out[i] = v * r.Scale[c]
	}
	return out, nil
}

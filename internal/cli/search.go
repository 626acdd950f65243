package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// searchOptions are quantize's accuracy target: --target-sqnr,
// --target-top1 or --eval-cmd with --target-metric, --search-budget and
// --emit-config.
type searchOptions struct {
	// TargetSQNR is the worst output's SQNR to reach on the held-out
	// samples, nil for none.
	TargetSQNR *float64
	// TargetTop1 is the top-1 agreement with the float model to reach on
	// the held-out samples, in percent, nil for none.
	TargetTop1 *float64
	// EvalCmd is the user's evaluation command ({model} stands for the
	// candidate's path) and TargetMetric the number its last line must
	// reach.
	EvalCmd      string
	TargetMetric *float64
	// Budget is the number of candidate models the search may write and
	// measure after the sensitivity analysis (nil: the default).
	Budget *int
	// EmitConfig is where the config that reproduces the written model
	// goes ("" for none).
	EmitConfig string
	// Sensitivity is the file the search reads its sensitivity analysis
	// from ("" to read the cache or measure it).
	Sensitivity string
}

// defaultSearchPlainRuns is --search-budget's default in plain quantizes:
// an evaluation writes a candidate from the calibrated statistics and runs
// it on the held-out samples, where a plain quantize runs the calibration
// samples, so the default is this many times as many evaluations as there
// are calibration samples per held-out one (at least minSearchBudget).
const (
	defaultSearchPlainRuns = 10
	minSearchBudget        = 30
)

func addSearchFlags(f *pflag.FlagSet, o *searchOptions) {
	optFloat64(f, &o.TargetSQNR, "target-sqnr", 0, "after quantizing, raise to 16 bits, then to float, the quantization points (activations and weights) whose measured gain per added cost is highest, several at once while 3 dB or more short, until every output's SQNR on the held-out samples (--eval-samples, default 4) reaches this many dB; exit 3 with the best model found when the budget runs out first")
	optFloat64(f, &o.TargetTop1, "target-top1", 0, "as --target-sqnr, with the target the top-1 agreement with the float model on the held-out samples, in percent (classifiers: outputs [batch, classes] or [batch, classes, 1, ...])")
	f.StringVar(&o.EvalCmd, "eval-cmd", "", "as --target-sqnr, with the target the number printed on the last line of this shell command (higher is better), run on each promotion's model written to a temporary directory in place of {model}; needs --target-metric")
	optFloat64(f, &o.TargetMetric, "target-metric", 0, "the number --eval-cmd must reach")
	optInt(f, &o.Budget, "search-budget", 0, "candidate models the accuracy search may write and measure after its sensitivity analysis (default: as many as take about 10 plain quantizes: 10 × calibration samples / held-out samples, at least 30)")
	f.StringVar(&o.Sensitivity, "sensitivity", "", "read the search's sensitivity analysis from this file, written by coreaiq sensitivity --group tensor -o (or merged from its --shard runs by coreaiq sensitivity merge) for the same model, config, data, --eval-samples and flags, instead of measuring it")
	f.StringVar(&o.EmitConfig, "emit-config", "", "write the config (the given one, or the preset written out, plus an op_name_config entry per node whose points the search raised) with which quantize --config FILE writes the same model")
}

// active reports whether a target is set.
func (o *searchOptions) active() bool {
	return o.TargetSQNR != nil || o.TargetTop1 != nil || o.TargetMetric != nil
}

// check refuses contradictory target flags.
func (o *searchOptions) check() error {
	n := 0
	for _, set := range []bool{o.TargetSQNR != nil, o.TargetTop1 != nil, o.TargetMetric != nil} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return Usagef("--target-sqnr, --target-top1 and --target-metric are alternatives: give one")
	case o.EvalCmd != "" && o.TargetMetric == nil:
		return Usagef("--eval-cmd needs --target-metric, the number its last line must reach")
	case o.TargetMetric != nil && o.EvalCmd == "":
		return Usagef("--target-metric needs --eval-cmd, the command that prints the metric")
	case o.EvalCmd != "" && !strings.Contains(o.EvalCmd, "{model}"):
		return Usagef("--eval-cmd %q: no {model} in it to put the candidate's path in", o.EvalCmd)
	case o.Budget != nil && *o.Budget < 1:
		return Usagef("--search-budget %d: want 1 or more", *o.Budget)
	case o.Sensitivity != "" && n == 0:
		return Usagef("--sensitivity %s: the analysis is the accuracy search's; give a target (--target-sqnr, --target-top1 or --eval-cmd with --target-metric)", o.Sensitivity)
	}
	return nil
}

// budget is --search-budget, or its default for the given numbers of
// calibration and held-out samples.
func (o *searchOptions) budget(calibSamples, heldOut int) int {
	if o.Budget != nil {
		return *o.Budget
	}
	return max(minSearchBudget, (defaultSearchPlainRuns*calibSamples+heldOut-1)/max(heldOut, 1))
}

// targetFlag is the target as given: "--target-sqnr 30".
func (o *searchOptions) targetFlag() string {
	switch {
	case o.TargetTop1 != nil:
		return "--target-top1 " + strconv.FormatFloat(*o.TargetTop1, 'g', -1, 64)
	case o.TargetMetric != nil:
		return "--target-metric " + strconv.FormatFloat(*o.TargetMetric, 'g', -1, 64)
	case o.TargetSQNR != nil:
		return "--target-sqnr " + strconv.FormatFloat(*o.TargetSQNR, 'g', -1, 64)
	}
	return ""
}

// The precisions a promotion unit goes through: as configured, int16
// activations (weights as configured), float.
const (
	levelConfigured = iota
	levelInt16
	levelFloat
)

var levelNames = [...]string{"as configured", "int16", "float"}

// searchUnit is what the search promotes: a quantization point with the
// points that cannot be written without it (those sharing its qparams, its
// weight's bias), compare.GroupByTensor's group. Raising it changes the
// spec of exactly these values, which op_name_config entries for every
// node that quantizes them express.
type searchUnit struct {
	Name   string
	Values []string
	// Points are the activations and weights among Values: the
	// quantization points the search counts (a bias follows its weight).
	Points []string
	// Wide are the 8-bit integer points among Points, which the int16
	// step widens (an activation to A16, a weight to W16); none means the
	// unit goes straight to float.
	Wide  []string
	level int
	// est is, by level, the estimated gain of raising the unit there
	// from its level (the sensitivity analysis's, or a measurement),
	// measured on the model of state stamp (-1: the analysis's model).
	est   [levelFloat + 1]float64
	stamp [levelFloat + 1]int
	// noise is the output's noise power relative to its signal's,
	// 10^(−SQNR/10), with only this unit quantized as configured (the
	// sensitivity analysis's "only this" figure); -1 when not measured.
	noise float64
	// inexpressible says, by level, why no config writes the unit there
	// ("" when one does).
	inexpressible [levelFloat + 1]string
}

// steps are the levels the unit can be raised to: int16 for its 8-bit
// points, float.
func (un *searchUnit) steps() []int {
	var out []int
	if un.level < levelInt16 && len(un.Wide) > 0 {
		out = append(out, levelInt16)
	}
	if un.level < levelFloat {
		out = append(out, levelFloat)
	}
	return out
}

// levelWeight is a level's cost per point, in bytes per element over
// int8's: an int16 point (activation or weight) costs one, a point in
// float two (its four bytes, and the integer kernel it loses, count more
// than int16's two; the scale is the width, not one target's latency).
func levelWeight(level int, wide bool) int {
	switch {
	case level == levelInt16 && wide:
		return 1
	case level == levelFloat:
		return 2
	}
	return 0
}

// cost is what raising the unit to level adds.
func (un *searchUnit) cost(level int) int {
	c := 0
	for _, v := range un.Points {
		wide := slices.Contains(un.Wide, v)
		c += levelWeight(level, wide) - levelWeight(un.level, wide)
	}
	return c
}

// raisedPoints are the unit's points above their configured precision.
func (un *searchUnit) raisedPoints() []string {
	switch un.level {
	case levelInt16:
		return un.Wide
	case levelFloat:
		return un.Points
	}
	return nil
}

// promotion is a unit the search raised, with the figures of its step.
type promotion struct {
	Unit   string   `json:"unit"`
	Values []string `json:"values"`
	// To is int16 or float.
	To string `json:"to"`
	// Gain is the measured gain of the step in the guide metric (dB of
	// the worst output), Cost its added cost. A unit raised in a batch
	// has the batch's gain, measured with all its units raised together.
	Gain compare.DB `json:"gain_db"`
	Cost int        `json:"cost"`
	// Batch is the batch the unit was raised in (1, 2, …), 0 for a
	// promotion of its own.
	Batch int `json:"batch,omitempty"`
}

// searchStep is one candidate the search measured.
type searchStep struct {
	// Unit and To are the unit and its level; for a batch, Unit is
	// "batch N" and Moves its units and levels.
	Unit  string   `json:"unit"`
	To    string   `json:"to,omitempty"`
	Moves []string `json:"moves,omitempty"`
	// SQNR is the candidate's worst output, Gain its gain over the model
	// it was built on, Cost the step's added cost.
	SQNR compare.DB `json:"sqnr_db"`
	Gain compare.DB `json:"gain_db"`
	Cost int        `json:"cost"`
	// Verdict: "measured" (re-ranked), "kept" (the promotion was made),
	// "not expressible: ..." (no config writes it), "backed off" (a
	// batch's unit lowered again, the target still met without it).
	Verdict string `json:"verdict"`
	// Metric is the target metric after a kept step when it is not the
	// SQNR (top-1 agreement, the --eval-cmd number).
	Metric *float64 `json:"metric,omitempty"`
}

// searchReport is the search in the --report JSON.
type searchReport struct {
	Target string `json:"target"`
	// Start and Reached are the target metric before and after, Met
	// whether Reached meets it; StartSQNR and ReachedSQNR the worst output.
	Start       float64    `json:"start"`
	Reached     float64    `json:"reached"`
	StartSQNR   compare.DB `json:"start_sqnr_db"`
	ReachedSQNR compare.DB `json:"reached_sqnr_db"`
	Met         bool       `json:"met"`
	Evaluations int        `json:"evaluations"`
	// Points are the activation and weight quantization points (a bias
	// follows its weight), Raised those above their configured precision.
	Points     int          `json:"points"`
	Raised     int          `json:"points_raised"`
	Counts     pointCounts  `json:"point_counts"`
	Promotions []promotion  `json:"promotions"`
	Trace      []searchStep `json:"trace"`
}

func (r *searchResult) report(so *searchOptions) *searchReport {
	rep := &searchReport{Target: so.targetFlag(), Start: r.Start, Reached: r.Reached, StartSQNR: r.StartSQNR, ReachedSQNR: r.ReachedSQNR,
		Met: r.Met, Evaluations: r.Evaluations, Points: r.Counts.points(), Raised: r.Counts.raised(), Counts: r.Counts, Promotions: r.Promoted, Trace: r.Trace}
	if rep.Promotions == nil {
		rep.Promotions = []promotion{}
	}
	if rep.Trace == nil {
		rep.Trace = []searchStep{}
	}
	return rep
}

// searchResult is the outcome of the accuracy search.
type searchResult struct {
	// Unit is the pipeline of the model to write.
	Unit *passes.Unit
	// Config is the emitted config's text.
	Config   []byte
	Promoted []promotion
	// Start and Reached are the target metric before and after (for
	// --target-sqnr, the worst output's SQNR); StartSQNR and ReachedSQNR
	// the worst output's.
	Start, Reached         float64
	StartSQNR, ReachedSQNR compare.DB
	Evaluations            int
	Met                    bool
	// Counts are the quantization points and those raised.
	Counts pointCounts
	// Trace is every candidate measured, in order.
	Trace []searchStep
}

// pointCounts are the quantization points the search counts, activations
// and weights (a bias follows its weight and is not counted), and those
// raised above their configured precision.
type pointCounts struct {
	Activations       int `json:"activations"`
	Weights           int `json:"weights"`
	RaisedActivations int `json:"raised_activations"`
	RaisedWeights     int `json:"raised_weights"`
}

func (c pointCounts) points() int { return c.Activations + c.Weights }
func (c pointCounts) raised() int { return c.RaisedActivations + c.RaisedWeights }

// String is "5 of 93 points (5.4%) above their configured precision: 3 of
// 41 activations, 2 of 52 weights".
func (c pointCounts) String() string {
	return fmt.Sprintf("%d of %d points (%.1f%%) above their configured precision: %d of %d activations, %d of %d weights",
		c.raised(), c.points(), 100*float64(c.raised())/float64(max(c.points(), 1)),
		c.RaisedActivations, c.Activations, c.RaisedWeights, c.Weights)
}

// counts are the state's quantization points and those raised.
func (st *searchState) counts() pointCounts {
	var c pointCounts
	for _, un := range st.units {
		raised := un.raisedPoints()
		for _, v := range un.Points {
			weight := st.u.Plan.Tensor(v).Role == plan.Weight
			up := slices.Contains(raised, v)
			switch {
			case weight:
				c.Weights++
				if up {
					c.RaisedWeights++
				}
			default:
				c.Activations++
				if up {
					c.RaisedActivations++
				}
			}
		}
	}
	return c
}

// searchMetric is the search's target: the metric of a candidate model
// and the threshold it must reach (higher is better).
type searchMetric struct {
	name, unit string
	target     float64
	// isSQNR is set when the metric is the worst output's SQNR, which
	// every evaluation measures; other metrics are measured once per
	// promotion.
	isSQNR bool
	// of measures a candidate; m is its guide measurement, made already.
	of func(ctx context.Context, model *onnxgraph.Model, m compare.Measurement) (float64, error)
}

func newSearchMetric(so *searchOptions) searchMetric {
	switch {
	case so.TargetTop1 != nil:
		return searchMetric{name: "top-1 agreement", unit: "%", target: *so.TargetTop1,
			of: func(_ context.Context, _ *onnxgraph.Model, m compare.Measurement) (float64, error) {
				if m.Top1 == nil {
					return 0, Usagef("--target-top1: no float output of the model is shaped [batch, classes] or [batch, classes, 1, ...] to take the top-1 class of")
				}
				return *m.Top1, nil
			}}
	case so.TargetMetric != nil:
		return searchMetric{name: "--eval-cmd metric", target: *so.TargetMetric,
			of: func(ctx context.Context, model *onnxgraph.Model, _ compare.Measurement) (float64, error) {
				return runEvalCmd(ctx, so.EvalCmd, model)
			}}
	}
	return searchMetric{name: "worst output SQNR", unit: " dB", target: *so.TargetSQNR, isSQNR: true,
		of: func(_ context.Context, _ *onnxgraph.Model, m compare.Measurement) (float64, error) {
			return float64(m.SQNR), nil
		}}
}

func (sm searchMetric) format(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + sm.unit
}

// runEvalCmd writes model to a temporary directory and runs the user's
// command there through sh, {model} replaced by the model's path; the
// number is the command's last non-empty line of output. A failing command
// or a last line that is no number is an error that shows the command's
// standard error.
func runEvalCmd(ctx context.Context, tmpl string, model *onnxgraph.Model) (float64, error) {
	dir, err := os.MkdirTemp("", "coreaiq-eval-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.onnx")
	if err := model.Save(path, onnxgraph.SaveOptions{}); err != nil {
		return 0, err
	}
	line := strings.ReplaceAll(tmpl, "{model}", "'"+strings.ReplaceAll(path, "'", `'\''`)+"'")
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("--eval-cmd %q: %v; its standard error:\n%s", line, err, strings.TrimRight(stderr.String(), "\n"))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	v, err := strconv.ParseFloat(last, 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("--eval-cmd %q: its last line %q is not a number; its standard error:\n%s", line, last, strings.TrimRight(stderr.String(), "\n"))
	}
	return v, nil
}

// searchState is the search's current model: the calibrated plan with the
// units raised so far, written from the pipeline's statistics.
type searchState struct {
	u     *passes.Unit
	units []*searchUnit
	byVal map[string]*searchUnit
	// int16Biases are, by weight, the biases bias correction fits to the
	// weights raised to int16 so far (one measurement per weight: a
	// layer's correction depends on its own weight's error alone).
	int16Biases map[string]passes.BiasValue
	// noiseScale turns the sum of units' noise (searchUnit.noise) into
	// the output's predicted noise, as the noise batch last corrected it;
	// 0 when the units' noise is not known.
	noiseScale float64
	// noiseMiss is the noise batch's try that measured best when none met
	// the target (nil when none gained), and noiseMissSQNR its figure.
	noiseMiss     []searchMove
	noiseMissSQNR float64
}

func newSearchState(u *passes.Unit) *searchState {
	st := &searchState{u: u, byVal: map[string]*searchUnit{}, int16Biases: map[string]passes.BiasValue{}}
	for _, g := range compare.Groups(u.Model, u.Plan, compare.GroupByTensor) {
		un := &searchUnit{Name: g.Name, stamp: [levelFloat + 1]int{-1, -1, -1}, noise: -1}
		for _, v := range g.Values {
			t := u.Plan.Tensor(v)
			if t == nil {
				continue // a palettized weight: kmeans_palettization_config's
			}
			un.Values = append(un.Values, v)
			st.byVal[v] = un
			if t.Role == plan.Bias {
				continue
			}
			un.Points = append(un.Points, v)
			if t.Spec != nil && widened(t.Spec, t.Role == plan.Weight) != nil {
				un.Wide = append(un.Wide, v)
			}
		}
		if len(un.Values) > 0 {
			st.units = append(st.units, un)
		}
	}
	return st
}

// widened is an 8-bit integer spec with the 16-bit type of its signedness
// and an unclipped range, nil for other types. A clipping calculator
// (moving average, percentile, entropy, mse) gives up the rare extremes
// for a finer step, which pays with 256 levels and costs with 65536: at
// 16 bits the clipped extremes, not the step, make the error. So a raised
// activation takes its observed min/max (global_minmax: every observer
// holds it, so the run's statistics give the range that a quantize from
// the emitted config observes), a raised weight its min/max (static).
func widened(s *spec.QuantizationSpec, weight bool) *spec.QuantizationSpec {
	c := s.Clone()
	c.Calculator = spec.Calculator{Type: spec.GlobalMinMax}
	if weight {
		c.Calculator = spec.Calculator{Type: spec.Static}
	}
	switch s.DType {
	case spec.Int8:
		c.DType = spec.Int16
	case spec.UInt8:
		c.DType = spec.UInt16
	default:
		return nil
	}
	return c
}

// levels is each value's level with un raised to level (un nil: none).
func (st *searchState) levels(un *searchUnit, level int) map[string]int {
	return st.levelsWith([]searchMove{{un, level}})
}

// searchMove is a unit and the level it moves to.
type searchMove struct {
	un *searchUnit
	to int
}

// levelsWith is each value's level with the moves made (a nil unit
// moves nothing).
func (st *searchState) levelsWith(moves []searchMove) map[string]int {
	out := map[string]int{}
	for _, x := range st.units {
		l := x.level
		for _, mv := range moves {
			if mv.un == x {
				l = mv.to
			}
		}
		switch l {
		case levelInt16:
			for _, v := range x.Wide {
				out[v] = levelInt16
			}
		case levelFloat:
			for _, v := range x.Values {
				out[v] = levelFloat
			}
		}
	}
	return out
}

// write writes the model of the given levels from the calibrated plan and
// statistics.
func (st *searchState) write(ctx context.Context, levels map[string]int) (*onnxgraph.Model, error) {
	// A raised weight is written from its float values, not from the
	// values GPTQ or AdaRound fitted to its planned grid.
	var raised []string
	for _, t := range st.u.Plan.Tensors {
		if _, ok := levels[t.Value]; ok && t.Role == plan.Weight {
			raised = append(raised, t.Value)
		}
	}
	base, err := passes.WithUnroundedWeights(st.u, st.u.Model, raised)
	if err != nil {
		return nil, err
	}
	sub, err := st.plan(levels, base)
	if err != nil {
		return nil, err
	}
	biases, err := st.biases(ctx, levels, sub)
	if err != nil {
		return nil, err
	}
	model, err := passes.WithBiases(base, biases)
	if err != nil {
		return nil, err
	}
	decided, err := passes.DecidedCopy(model, sub, st.u.Stats)
	if err != nil {
		return nil, err
	}
	res, err := finalize.Write(model, decided, st.u.Write)
	if err != nil {
		return nil, err
	}
	return res.Model, nil
}

// biases are the biases that differ from the calibrated model's for the
// given levels. Bias correction fitted the biases to the planned weights'
// error; a quantize from the emitted config fits a weight raised to int16
// its bias for the int16 error, measured the same way (BiasesCorrectedAs),
// and leaves a float weight's bias as it was (a float weight has no
// error).
func (st *searchState) biases(ctx context.Context, levels map[string]int, sub *plan.Plan) ([]passes.BiasValue, error) {
	if len(st.u.UncorrectedBiases) == 0 {
		return nil, nil
	}
	var out []passes.BiasValue
	var measure []*plan.TensorPlan
	for _, t := range st.u.Plan.Tensors {
		b, corrected := st.u.UncorrectedBiases[t.Value]
		if t.Role != plan.Weight || !corrected {
			continue
		}
		switch levels[t.Value] {
		case levelFloat:
			out = append(out, b)
		case levelInt16:
			if _, ok := st.int16Biases[t.Value]; !ok && sub.Tensor(t.Value) != nil {
				measure = append(measure, sub.Tensor(t.Value))
			}
		}
	}
	if len(measure) > 0 {
		fitted, err := passes.BiasesCorrectedAs(ctx, st.u, measure)
		if err != nil {
			return nil, err
		}
		for _, t := range measure {
			b, ok := fitted[t.Value]
			if !ok {
				b = st.u.UncorrectedBiases[t.Value]
			}
			st.int16Biases[t.Value] = b
		}
	}
	for _, t := range st.u.Plan.Tensors {
		if b, ok := st.int16Biases[t.Value]; ok && levels[t.Value] == levelInt16 {
			out = append(out, b)
		}
	}
	return out, nil
}

// plan is the calibrated plan with the given levels: the values in float
// left out (with the points that cannot be written without them), the
// int16 ones widened, their qparams to be computed from the statistics
// (a weight's from its values in model).
func (st *searchState) plan(levels map[string]int, model *onnxgraph.Model) (*plan.Plan, error) {
	sub := compare.SubPlan(st.u.Plan, func(v string) bool { return levels[v] != levelFloat })
	for i, t := range sub.Tensors {
		if levels[t.Value] != levelInt16 {
			if t.Role == plan.Activation && t.SharedWith == "" && t.Fixed == nil && t.Params != nil {
				// From the statistics too: an activation's range may
				// depend on its readers' grids (a SiLU's input starts where
				// the SiLU's quantized output leaves 0), which a raised
				// reader changes, as a quantize from the emitted config
				// computes it.
				c := *t
				c.Params = nil
				sub.Tensors[i] = &c
			}
			continue
		}
		c := *t
		c.Spec = widened(t.Spec, t.Role == plan.Weight)
		c.Params = nil // from the statistics, for the new type
		passes.MarkWideHeadroom([]*plan.TensorPlan{&c}, st.u.Prepare)
		if t.Role == plan.Weight && t.SharedWith == "" {
			q, err := passes.WeightParamsAs(model, t, c.Spec, st.u.Prepare)
			if err != nil {
				return nil, fmt.Errorf("%s in int16: %w", t.Value, err)
			}
			c.Params = q
		}
		if t.Fixed != nil {
			sc, zp, err := c.Spec.QParams([]float32{t.Fixed.Min}, []float32{t.Fixed.Max})
			if err != nil {
				return nil, fmt.Errorf("%s in int16: %w", t.Value, err)
			}
			c.Params = &plan.Params{Scales: sc, ZeroPoints: zp, Observed: &plan.Range{Min: t.Fixed.Min, Max: t.Fixed.Max}}
		}
		sub.Tensors[i] = &c
	}
	return compare.SubPlan(sub, func(string) bool { return true }), nil // reindexed
}

// comments are the emitted config's comments by value: the promotion that
// raised it, with its measured gain and cost.
func (st *searchState) comments(promoted []promotion) map[string]string {
	out := map[string]string{}
	for _, p := range promoted {
		c := fmt.Sprintf("%s to %s: %+.2f dB for cost %d", p.Unit, p.To, float64(p.Gain), p.Cost)
		if p.Batch > 0 {
			c = fmt.Sprintf("%s to %s (cost %d) in batch %d: %+.2f dB together", p.Unit, p.To, p.Cost, p.Batch, float64(p.Gain))
		}
		for _, v := range p.Values {
			if out[v] != "" && p.To == levelNames[levelFloat] {
				c = out[v] + "; then " + c
			}
			out[v] = c
		}
	}
	return out
}

// checkExpressible renders the config of the current levels with the
// moves made, prepares the model from it and compares the plan with the
// one the search measures: why is "" when they agree, else what differs.
func (st *searchState) checkExpressible(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit,
	base *yaml.Node, sp sensitivitySplit, moves []searchMove) (why string, err error) {
	levels := st.levelsWith(moves)
	text, err := renderSearchConfig(base, st.u.Resolution, levels, nil, sp, &opts.Search, "")
	if err != nil {
		var ne *notExpressible
		if errors.As(err, &ne) {
			return ne.why, nil
		}
		return "", err
	}
	want, err := st.plan(levels, st.u.Model) // specs and sharing only
	if err != nil {
		return "", err
	}
	// The plan is all that is compared, and the algorithms change weights,
	// never which values are quantized or how: the check runs none of them
	// (on a model with SmoothQuant, each would run the model over the
	// data again).
	got, err := quantizeFromConfig(ctx, opts, s, newUnit, text, "prepare", false)
	if err != nil {
		return "", fmt.Errorf("the config with %s: %w", describeMoves(moves), err)
	}
	// Calibration leaves in float the values that held ±Inf (an attention
	// mask): the config's plan, prepared only, is compared as calibration
	// would leave it, with the statistics the search measured with.
	passes.KeepInfinitiesFloat(got.Plan, st.u.Stats)
	for _, t := range want.Tensors {
		g := got.Plan.Tensor(t.Value)
		switch {
		case g == nil:
			return fmt.Sprintf("the config leaves %q in float", t.Value), nil
		case !g.Spec.Equal(t.Spec) || g.SharedWith != t.SharedWith:
			return fmt.Sprintf("the config gives %q %s, not %s", t.Value, g.SpecString(), t.SpecString()), nil
		}
	}
	for _, g := range got.Plan.Tensors {
		if want.Tensor(g.Value) == nil {
			return fmt.Sprintf("the config quantizes %q", g.Value), nil
		}
	}
	return "", nil
}

// searchAccuracy runs the accuracy search on the quantized pipeline u:
// newUnit gives a fresh pipeline to quantize from a config with. Candidates
// are written from u's calibrated statistics; each promotion made is
// checked to be what the emitted config gives, and the final model is
// quantized from the emitted config, so that the config writes the model
// the search measured.
func searchAccuracy(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, u *passes.Unit,
	newUnit func() *passes.Unit, sp sensitivitySplit) (*searchResult, error) {
	so := &opts.Search
	base, err := baseConfigDoc(opts, s)
	if err != nil {
		return nil, err
	}
	res := &searchResult{Unit: u}
	if !so.active() {
		res.Config, err = renderSearchConfig(base, u.Resolution, nil, nil, sp, so, "")
		return res, err
	}
	errOut := opts.IO.ErrOut
	metric := newSearchMetric(so)
	data, err := sp.heldOut(s)
	if err != nil {
		return nil, err
	}
	m, err := compare.NewMeasurer(ctx, s.settings.Engine, s.settings.Threads, s.model, data)
	if err != nil {
		return nil, err
	}
	first, err := m.MeasureAll(ctx, u.Result.Model)
	if err != nil {
		return nil, fmt.Errorf("quantized model: %w", err)
	}
	if res.Start, err = metric.of(ctx, u.Result.Model, first); err != nil {
		return nil, fmt.Errorf("quantized model: %w", err)
	}
	res.StartSQNR, res.ReachedSQNR, res.Reached = first.SQNR, first.SQNR, res.Start
	budget := so.budget(sp.calibSamples, m.Samples)
	st := newSearchState(u)
	res.Counts = st.counts()
	fmt.Fprintf(errOut, "search: %s %s on %d held-out samples, target %s; %d units of %d points (%d activations, %d weights), budget %d evaluations\n",
		metric.name, metric.format(res.Start), m.Samples, metric.format(metric.target), len(st.units), res.Counts.points(),
		res.Counts.Activations, res.Counts.Weights, budget)
	if res.Reached >= metric.target {
		res.Met = true
		res.Config, err = renderSearchConfig(base, u.Resolution, nil, nil, sp, so, res.Counts.String())
		return res, err
	}
	sens, err := searchSensitivity(ctx, opts, s, u, sp)
	if err != nil {
		return nil, err
	}
	for _, g := range sens.Groups {
		for _, v := range g.Values {
			if un := st.byVal[v]; un != nil && un.Name == g.Group {
				// Int16's first estimate is float's: int16 comes first
				// because it costs less.
				un.est = [levelFloat + 1]float64{0, float64(g.Gain), float64(g.Gain)}
				un.noise = g.OnlySQNR.NoiseRatio()
			}
		}
	}
	stamp := 0
	current := float64(res.ReachedSQNR)
	type candidate struct {
		un    *searchUnit
		level int
	}
	var lastModel *onnxgraph.Model
	var last candidate
	batchLimit := 0
	if metric.isSQNR {
		batchLimit = max(2, (len(st.units)+batchShare-1)/batchShare)
	}
	var batched []batchMember
	batches := 0
	judge := candidateJudge{st: st, m: m, metric: metric, res: res}
	// climb is the budget of the single steps. Under a metric other than
	// the SQNR they climb first (a few classes or a task score often hang
	// on a few units), but leave half the budget to the batch of every
	// 8-bit point in 16 bits and its back-off (metricBatch).
	climb := budget
	if !metric.isSQNR {
		climb = budget - budget/2
	}
	if metric.isSQNR {
		n, got, err := st.noiseBatch(ctx, opts, s, newUnit, base, sp, m, current, metric.target, budget, res)
		if err != nil {
			return nil, err
		}
		if len(n) > 0 {
			batched, batches, current = n, 1, got
			stamp++
			res.ReachedSQNR, res.Reached = compare.DB(current), current
		}
	}
	// promised and kept are what the re-measured stale estimates
	// promised in all and what the measurements kept of it.
	var promised, kept float64
	for res.Reached < metric.target {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if gap := metric.target - current; batchLimit >= 2 && gap >= batchGap && res.Evaluations < budget {
			batch, whole := pickBatch(st.units, gap, batchLimit), false
			if batches == 0 && len(batch) >= 2 {
				// The first batch is every 8-bit point in 16 bits: when
				// that meets the target, the search backs off from it.
				if all := allWide(st.units); len(all) > len(batch) {
					batch, whole = all, true
				}
			}
			if len(batch) >= 2 {
				batches++
				n := batches
				got, err := st.measure(ctx, m, res, batch)
				if err != nil {
					return nil, err
				}
				gain, cost := float64(got)-current, movesCost(batch)
				trace := searchStep{Unit: fmt.Sprintf("batch %d", n), Moves: moveNames(batch), SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured"}
				fmt.Fprintf(errOut, "search %d/%d: batch %d, %s (cost %d): worst output %s dB (%+.2f dB)\n",
					res.Evaluations, budget, n, describeMoves(batch), cost, got, gain)
				why := ""
				if gain > 0 && (!whole || float64(got) >= metric.target) {
					if why, err = st.checkExpressible(ctx, opts, s, newUnit, base, sp, batch); err != nil {
						return nil, err
					}
				}
				switch {
				case whole && float64(got) < metric.target:
					// 16 bits everywhere falls short. The search goes on
					// from the best model it measured that is worth its
					// cost: the noise batch's best try, or 16 bits
					// everywhere when that gains minGainPerCost per cost
					// over it; the configured model when neither gained.
					moves, sqnr := st.noiseMiss, st.noiseMissSQNR
					if moves == nil {
						sqnr = current
					}
					if float64(got)-sqnr >= minGainPerCost*float64(cost-movesCost(moves)) {
						moves, sqnr = batch, float64(got)
					}
					if moves != nil {
						why, err := st.checkExpressible(ctx, opts, s, newUnit, base, sp, moves)
						if err != nil {
							return nil, err
						}
						if why == "" {
							if len(moves) != len(batch) {
								batches++
							}
							gain := sqnr - current
							weight := func(mv searchMove) float64 { return mv.un.noise }
							if len(moves) == len(batch) {
								trace.Verdict = "kept"
								weight = func(mv searchMove) float64 { return mv.un.est[mv.to] }
							} else {
								res.Trace = append(res.Trace, searchStep{Unit: fmt.Sprintf("batch %d", batches), Moves: moveNames(moves), SQNR: compare.DB(sqnr), Gain: compare.DB(gain), Cost: movesCost(moves), Verdict: "kept"})
							}
							batched = append(batched, st.keepBatch(res, moves, batches, gain, weight)...)
							stamp++
							current += gain
							res.ReachedSQNR, res.Reached = compare.DB(current), current
							fmt.Fprintf(errOut, "search: batch %d kept, short of the target: %s %s\n", batches, metric.name, metric.format(res.Reached))
							if metric.isSQNR {
								res.Trace = append(res.Trace, trace)
								kept, got, err := st.floatBatch(ctx, opts, s, newUnit, base, sp, m, current, metric.target, budget, batches+1, res)
								if err != nil {
									return nil, err
								}
								if len(kept) > 0 {
									batches++
									batched = append(batched, kept...)
									stamp++
									current = got
									res.ReachedSQNR, res.Reached = compare.DB(current), current
								}
								lastModel, last = nil, candidate{}
								continue
							}
						}
					}
				case gain < minGainPerCost*float64(cost):
					// Fewer at once (none after a batch of two): the
					// batch's gains cancelled. Its steps' estimates become
					// their shares of what it measured, so that the next
					// batch tries others (the same units in float among
					// them).
					batchLimit = max(2, batchLimit/2)
					if len(batch) == 2 {
						batchLimit = 0
					}
					estimated := 0.0
					for _, mv := range batch {
						estimated += mv.un.est[mv.to]
					}
					for _, mv := range batch {
						mv.un.est[mv.to], mv.un.stamp[mv.to] = gain*mv.un.est[mv.to]/estimated, stamp
					}
				case why != "":
					// The single steps find which unit no config writes.
					batchLimit = 0
					trace.Verdict = "not expressible: " + why
					fmt.Fprintf(errOut, "search: batch %d not promoted: %s\n", n, why)
				default:
					trace.Verdict = "kept"
					batched = append(batched, st.keepBatch(res, batch, n, gain, func(mv searchMove) float64 { return mv.un.est[mv.to] })...)
					stamp++
					current += gain
					res.ReachedSQNR, res.Reached = compare.DB(current), current
					fmt.Fprintf(errOut, "search: batch %d kept: %s %s\n", n, metric.name, metric.format(res.Reached))
				}
				res.Trace = append(res.Trace, trace)
				lastModel, last = nil, candidate{}
				continue
			}
		}
		// Stale estimates promise more than they keep on the current
		// model as much as the ones re-measured so far did: a
		// measurement that beats the discounted rest is made without
		// measuring them all.
		discount := 1.0
		if promised > 0 {
			discount = kept / promised
		}
		best, to := pickStep(st.units, stamp, discount)
		fresh := best != nil && best.stamp[to] == stamp
		if fresh && best.est[to] < minGainPerCost*float64(max(best.cost(to), 1)) {
			// Before giving up, the best stale estimate at its full
			// value is measured, whatever it promises (an int16 step
			// that gained nothing says little of the same unit in
			// float; an estimate from another model little of this one).
			if alt, altTo := pickStale(st.units, stamp); alt != nil {
				best, to, fresh = alt, altTo, false
			}
		}
		if best == nil || fresh && best.est[to] < minGainPerCost*float64(max(best.cost(to), 1)) {
			fmt.Fprintf(errOut, "search: no promotion left that gains\n")
			break
		}
		cost := best.cost(to)
		if !fresh {
			// An estimate from an earlier model, re-measured on this one,
			// even when it promised no gain there.
			if res.Evaluations >= climb {
				break
			}
			model, err := st.write(ctx, st.levels(best, to))
			if err != nil {
				return nil, fmt.Errorf("candidate with %s %s: %w", best.Name, levelNames[to], err)
			}
			got, err := m.Measure(ctx, model)
			if err != nil {
				return nil, fmt.Errorf("candidate with %s %s: %w", best.Name, levelNames[to], err)
			}
			res.Evaluations++
			gain := float64(got) - current
			if best.est[to] > 0 {
				promised += best.est[to]
				kept += min(max(gain, 0), best.est[to])
			}
			best.est[to], best.stamp[to] = gain, stamp
			lastModel, last = model, candidate{best, to}
			res.Trace = append(res.Trace, searchStep{Unit: best.Name, To: levelNames[to], SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured"})
			fmt.Fprintf(errOut, "search %d/%d: %s to %s (cost %d): worst output %s dB (%+.2f dB)\n",
				res.Evaluations, budget, best.Name, levelNames[to], cost, got, gain)
			continue
		}
		// The step's estimate is a measurement on the current model, and
		// no other step's estimate is better per cost: it is made, if a
		// config expresses it.
		if why, err := st.checkExpressible(ctx, opts, s, newUnit, base, sp, []searchMove{{best, to}}); err != nil {
			return nil, err
		} else if why != "" {
			best.inexpressible[to] = why
			res.Trace = append(res.Trace, searchStep{Unit: best.Name, To: levelNames[to], Cost: cost, Verdict: "not expressible: " + why})
			fmt.Fprintf(errOut, "search: %s to %s not promoted: %s\n", best.Name, levelNames[to], why)
			continue
		}
		if last != (candidate{best, to}) {
			if lastModel, err = st.write(ctx, st.levels(best, to)); err != nil {
				return nil, err
			}
		}
		gain := best.est[to]
		best.level = to
		stamp++
		current += gain
		res.ReachedSQNR = compare.DB(current)
		step := searchStep{Unit: best.Name, To: levelNames[to], SQNR: res.ReachedSQNR, Gain: compare.DB(gain), Cost: cost, Verdict: "kept"}
		res.Promoted = append(res.Promoted, promotion{Unit: best.Name, Values: best.Values, To: levelNames[to], Gain: compare.DB(gain), Cost: cost})
		if metric.isSQNR {
			res.Reached = current
		} else {
			_, v, err := judge.value(ctx, lastModel)
			if err != nil {
				return nil, err
			}
			res.Reached = v
			step.Metric = &v
		}
		res.Trace = append(res.Trace, step)
		fmt.Fprintf(errOut, "search: %s to %s kept: %s %s\n", best.Name, levelNames[to], metric.name, metric.format(res.Reached))
		// Float after int16 starts from its estimate less what int16 gained.
		best.est[levelFloat] -= gain
		lastModel, last = nil, candidate{}
	}
	if !metric.isSQNR && res.Reached < metric.target && res.Evaluations+2 <= budget {
		kept, sqnr, value, err := st.metricBatch(ctx, opts, s, newUnit, base, sp, current, batches+1, budget, res, judge)
		if err != nil {
			return nil, err
		}
		if len(kept) > 0 {
			batched = append(batched, kept...)
			current = sqnr
			res.ReachedSQNR, res.Reached = compare.DB(sqnr), value
		}
	}
	if res.Reached >= metric.target && len(batched) > 0 {
		if current, res.Reached, err = st.backOff(ctx, opts, s, newUnit, base, sp, m, batched, current, res.Reached, metric.target, budget, res, judge); err != nil {
			return nil, err
		}
		res.ReachedSQNR = compare.DB(current)
	}
	res.Counts = st.counts()
	res.Config, err = renderSearchConfig(base, u.Resolution, st.levels(nil, 0), st.comments(res.Promoted), sp, so, res.Counts.String())
	if err != nil {
		return nil, err
	}
	if len(res.Promoted) > 0 {
		// The final check: the emitted config quantized from scratch.
		final, err := quantizeFromConfig(ctx, opts, s, newUnit, res.Config, "", true)
		if err != nil {
			return nil, fmt.Errorf("the emitted config: %w", err)
		}
		got, err := m.MeasureAll(ctx, final.Result.Model)
		if err != nil {
			return nil, fmt.Errorf("the emitted config's model: %w", err)
		}
		searched := res.ReachedSQNR
		if res.Reached, err = metric.of(ctx, final.Result.Model, got); err != nil {
			return nil, err
		}
		res.ReachedSQNR, res.Unit = got.SQNR, final
		figure := fmt.Sprintf("%s %s, worst output %s dB", metric.name, metric.format(res.Reached), got.SQNR)
		if metric.isSQNR {
			figure = fmt.Sprintf("worst output %s dB", got.SQNR)
		}
		fmt.Fprintf(errOut, "search: the emitted config quantized again: %s (the search measured %s dB); %s\n",
			figure, searched, res.Counts)
	}
	res.Met = res.Reached >= metric.target
	return res, nil
}

// searchSensitivity is the analysis the search estimates its units by:
// the --sensitivity file when one is given (a run of coreaiq sensitivity
// --group tensor, or the merge of its shards, made elsewhere), which must
// have been measured for this run's model, plan, data split and flags;
// else the cached one, or one measured now.
func searchSensitivity(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, u *passes.Unit, sp sensitivitySplit) (*compare.Sensitivity, error) {
	path := opts.Search.Sensitivity
	if path == "" {
		return cachedSensitivity(ctx, opts.IO, s, u, sp, false, nil)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, Usagef("--sensitivity: %v", err)
	}
	var r compare.Sensitivity
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, Usagef("--sensitivity %s: not a sensitivity result: %v", path, err)
	}
	key, err := sensitivityKey(s, u, sp)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Shard != "":
		return nil, Usagef("--sensitivity %s: shard %s of an analysis; join the shards with coreaiq sensitivity merge", path, r.Shard)
	case r.Grouping != compare.GroupByTensor:
		return nil, Usagef("--sensitivity %s: grouped by %s; the search's units are coreaiq sensitivity --group tensor's", path, r.Grouping)
	case r.Key != key:
		return nil, Usagef("--sensitivity %s: measured for another model, plan, data split or flags than this run (key %.12s, this run's %.12s): run coreaiq sensitivity --group tensor with this run's model, config, data, --eval-samples and flags", path, r.Key, key)
	}
	fmt.Fprintf(opts.IO.ErrOut, "sensitivity: read %s\n", path)
	return &r, nil
}

// keepBatch raises the batch's units (the n-th batch, whose measured gain
// was gain) and returns them as back-off candidates, ranked by weight per
// cost (backOff lowers the least first).
func (st *searchState) keepBatch(res *searchResult, batch []searchMove, n int, gain float64, weight func(searchMove) float64) []batchMember {
	estimated := 0.0
	for _, mv := range batch {
		estimated += mv.un.est[mv.to]
	}
	var out []batchMember
	for _, mv := range batch {
		out = append(out, batchMember{back: searchMove{mv.un, mv.un.level}, to: mv.to, ratio: weight(mv) / float64(max(mv.un.cost(mv.to), 1)), batch: n})
		res.Promoted = append(res.Promoted, promotion{Unit: mv.un.Name, Values: mv.un.Values, To: levelNames[mv.to], Gain: compare.DB(gain), Cost: mv.un.cost(mv.to), Batch: n})
		if mv.to == levelInt16 && estimated != 0 {
			// Float after int16 starts from its estimate less int16's
			// share of the batch's gain.
			mv.un.est[levelFloat] -= gain * mv.un.est[mv.to] / estimated
		}
		mv.un.level = mv.to
	}
	return out
}

// noiseTries bounds the first batches the noise estimates pick: each miss
// corrects the estimates by what it measured.
const noiseTries = 3

// noiseBatch is the first batch when the sensitivity analysis measured
// each unit quantized alone. The output's noise is close to the sum of
// what each unit quantized alone gives (its noise power relative to the
// signal's, searchUnit.noise), so the units whose noise per cost is
// largest go to int16 until the others' sum is within the target's
// noise, the sum scaled to what the configured model measures (current;
// the units' errors partly cancel or compound). A batch that falls short
// scales the estimates by what it measured against what they predicted,
// and the next takes more. The batch that meets the target (checked to be
// what its config writes) is kept and returned with its number of the
// batches and the worst output's SQNR; none is kept when the estimates
// would raise every unit (the all-int16 batch is the search's next try),
// the tries or the budget run out.
func (st *searchState) noiseBatch(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit,
	base *yaml.Node, sp sensitivitySplit, m *compare.Measurer, current, target float64, budget int, res *searchResult) ([]batchMember, float64, error) {
	var wide []*searchUnit
	total := 0.0
	for _, un := range st.units {
		if !(un.noise >= 0) { // not measured (or NaN)
			return nil, current, nil
		}
		total += un.noise
		if un.level == levelConfigured && len(un.Wide) > 0 && un.inexpressible[levelInt16] == "" {
			wide = append(wide, un)
		}
	}
	if total <= 0 {
		return nil, current, nil
	}
	slices.SortStableFunc(wide, func(a, b *searchUnit) int {
		if c := cmp.Compare(b.noise/float64(max(b.cost(levelInt16), 1)), a.noise/float64(max(a.cost(levelInt16), 1))); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	scale, want := compare.DB(current).NoiseRatio()/total, compare.DB(target).NoiseRatio()
	st.noiseScale = scale
	errOut := opts.IO.ErrOut
	for try := 0; try < noiseTries && res.Evaluations < budget; try++ {
		batch, left := raiseUntil(wide, levelInt16, func(un *searchUnit) float64 { return un.noise }, total, scale, want)
		if len(batch) < 2 || len(batch) == len(wide) {
			// One unit is a single step's to make, from its estimate.
			return nil, current, nil
		}
		got, err := st.measure(ctx, m, res, batch)
		if err != nil {
			return nil, current, err
		}
		gain, cost := float64(got)-current, movesCost(batch)
		trace := searchStep{Unit: "batch 1", Moves: moveNames(batch), SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured"}
		fmt.Fprintf(errOut, "search %d/%d: batch 1 by the noise estimates (%.2f dB predicted), %s (cost %d): worst output %s dB (%+.2f dB)\n",
			res.Evaluations, budget, compare.DBOfNoiseRatio(scale*left), describeMoves(batch), cost, got, gain)
		if float64(got) >= target {
			why, err := st.checkExpressible(ctx, opts, s, newUnit, base, sp, batch)
			if err != nil {
				return nil, current, err
			}
			if why != "" {
				trace.Verdict = "not expressible: " + why
				res.Trace = append(res.Trace, trace)
				fmt.Fprintf(errOut, "search: batch 1 not promoted: %s\n", why)
				return nil, current, nil
			}
			trace.Verdict = "kept"
			res.Trace = append(res.Trace, trace)
			kept := st.keepBatch(res, batch, 1, gain, func(mv searchMove) float64 { return mv.un.noise })
			fmt.Fprintf(errOut, "search: batch 1 kept: worst output %s dB\n", got)
			return kept, float64(got), nil
		}
		res.Trace = append(res.Trace, trace)
		if float64(got) > max(current, st.noiseMissSQNR) {
			st.noiseMiss, st.noiseMissSQNR = batch, float64(got)
		}
		if left <= 0 {
			break // the noise left is not the raised units'
		}
		scale *= got.NoiseRatio() / (scale * left)
		st.noiseScale = scale
	}
	return nil, current, nil
}

// floatBatch follows a kept batch that fell short of an SQNR target with
// every 8-bit point in 16 bits: what is left of the error is then in few
// places (a point whose held-out values go beyond its widened range, a
// channel a per-tensor grid still crushes), which the analysis at 8 bits
// does not rank. Each point's own quantization noise (compare's
// LocalNoise: its dequantized value against the value it quantizes, in
// the candidate's own run) is measured on the configured model and on the
// current one; a unit's output noise now is its "only this" noise at 8
// bits (searchUnit.noise) times the ratio of its activations' own noise
// now to theirs then (a weight unit's, by the ratio of the grids' steps).
// The units with the most noise per cost go to float until the rest,
// scaled to the measured noise, is within the target's, as the noise
// batch does (noiseTries tries, each rescaled by what it measured). A try
// that meets the target is kept; else the best try is kept when it gains
// minGainPerCost per cost, and the search goes on from it. n is the
// number the kept batch takes.
func (st *searchState) floatBatch(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit,
	base *yaml.Node, sp sensitivitySplit, m *compare.Measurer, current, target float64, budget, n int, res *searchResult) ([]batchMember, float64, error) {
	errOut := opts.IO.ErrOut
	if res.Evaluations+2 >= budget {
		return nil, current, nil
	}
	for _, un := range st.units {
		if !(un.noise >= 0) {
			return nil, current, nil // the analysis did not measure the units alone
		}
	}
	local := func(levels map[string]int, what string) (map[string]float64, error) {
		model, err := st.write(ctx, levels)
		if err != nil {
			return nil, fmt.Errorf("the %s model: %w", what, err)
		}
		noise, err := m.LocalNoise(ctx, model, compare.PairActivations(st.u.Model, model).Pairs)
		if err != nil {
			return nil, fmt.Errorf("the %s model's local noise: %w", what, err)
		}
		res.Evaluations++
		fmt.Fprintf(errOut, "search %d/%d: the own quantization noise of every point of the %s model\n", res.Evaluations, budget, what)
		return noise, nil
	}
	then, err := local(map[string]int{}, "configured") // a value not in the map is as configured
	if err != nil {
		return nil, current, err
	}
	now, err := local(st.levels(nil, 0), "current")
	if err != nil {
		return nil, current, err
	}
	predicted := map[*searchUnit]float64{}
	var units []*searchUnit
	total := 0.0
	for _, un := range st.units {
		if un.level == levelFloat {
			continue
		}
		var before, after float64
		activations := 0
		for _, v := range un.Points {
			if t := st.u.Plan.Tensor(v); t != nil && t.Role == plan.Activation {
				before, after = before+then[v], after+now[v]
				activations++
			}
		}
		p := un.noise
		switch {
		case un.level == levelConfigured:
		case activations > 0 && before > 0:
			p *= after / before
		case activations > 0:
			p = 0 // no noise of its own at 8 bits: none to scale
		default:
			p *= math.Pow(2, -16) // a weight: the step of 16 bits over 8's, squared
		}
		if !(p >= 0) || math.IsInf(p, 0) {
			continue
		}
		predicted[un] = p
		total += p
		if un.inexpressible[levelFloat] == "" {
			units = append(units, un)
		}
	}
	if total <= 0 {
		return nil, current, nil
	}
	slices.SortStableFunc(units, func(a, b *searchUnit) int {
		if c := cmp.Compare(predicted[b]/float64(max(b.cost(levelFloat), 1)), predicted[a]/float64(max(a.cost(levelFloat), 1))); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	scale, want := compare.DB(current).NoiseRatio()/total, compare.DB(target).NoiseRatio()
	var best []searchMove
	bestSQNR, bestTrace := current, -1
	for try := 0; try < noiseTries && res.Evaluations < budget; try++ {
		batch, left := raiseUntil(units, levelFloat, func(un *searchUnit) float64 { return predicted[un] }, total, scale, want)
		if len(batch) == 0 || len(batch) == len(units) && try > 0 {
			break
		}
		got, err := st.measure(ctx, m, res, batch)
		if err != nil {
			return nil, current, err
		}
		gain, cost := float64(got)-current, movesCost(batch)
		trace := searchStep{Unit: fmt.Sprintf("batch %d", n), Moves: moveNames(batch), SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured"}
		fmt.Fprintf(errOut, "search %d/%d: batch %d by the points' own noise (%.2f dB predicted), %s (cost %d): worst output %s dB (%+.2f dB)\n",
			res.Evaluations, budget, n, compare.DBOfNoiseRatio(scale*left), describeMoves(batch), cost, got, gain)
		res.Trace = append(res.Trace, trace)
		if float64(got) > bestSQNR {
			best, bestSQNR, bestTrace = batch, float64(got), len(res.Trace)-1
		}
		if float64(got) >= target || left <= 0 {
			break
		}
		scale *= got.NoiseRatio() / (scale * left)
	}
	if best == nil || bestSQNR-current < minGainPerCost*float64(movesCost(best)) && bestSQNR < target {
		return nil, current, nil
	}
	why, err := st.checkExpressible(ctx, opts, s, newUnit, base, sp, best)
	if err != nil {
		return nil, current, err
	}
	if why != "" {
		fmt.Fprintf(errOut, "search: batch %d not promoted: %s\n", n, why)
		return nil, current, nil
	}
	res.Trace[bestTrace].Verdict = "kept"
	kept := st.keepBatch(res, best, n, bestSQNR-current, func(mv searchMove) float64 { return predicted[mv.un] })
	verdict := "kept"
	if bestSQNR < target {
		verdict = "kept, short of the target"
	}
	fmt.Fprintf(errOut, "search: batch %d %s: worst output %.2f dB\n", n, verdict, bestSQNR)
	return kept, bestSQNR, nil
}

// raiseUntil raises the units, in order, to level until the noise left
// (total less the raised units' noise), times scale, is within want; it
// returns the moves and the noise left.
func raiseUntil(units []*searchUnit, level int, noise func(*searchUnit) float64, total, scale, want float64) ([]searchMove, float64) {
	left := total
	var moves []searchMove
	for _, un := range units {
		if scale*left <= want {
			break
		}
		moves, left = append(moves, searchMove{un, level}), left-noise(un)
	}
	return moves, left
}

// pickStep is the unit and level with the highest estimated gain per
// added cost, a positive estimate from an earlier model (which may be
// stale) taken at discount times its value (ties: a stale estimate before
// a measurement on this one; then the cheaper step, then the lower name),
// nil when no unit can be raised.
func pickStep(units []*searchUnit, stamp int, discount float64) (*searchUnit, int) {
	var best *searchUnit
	var bestLevel int
	var bestRatio float64
	for _, un := range units {
		for _, to := range un.steps() {
			if un.inexpressible[to] != "" {
				continue
			}
			r := un.est[to] / float64(max(un.cost(to), 1))
			if un.stamp[to] != stamp && r > 0 {
				r *= discount
			}
			if best == nil || r > bestRatio || r == bestRatio && best.stamp[bestLevel] == stamp && un.stamp[to] != stamp {
				best, bestLevel, bestRatio = un, to, r
			}
		}
	}
	return best, bestLevel
}

// quantizeFromConfig runs the pipeline (until the named pass, "" for all)
// with the quantization config and palettization of the config text, and
// its algorithms when asked (the other settings stay those of s).
func quantizeFromConfig(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit, text []byte, until string, algorithms bool) (*passes.Unit, error) {
	cfg, err := config.Parse(text, searchConfigName(opts))
	if err != nil {
		return nil, fmt.Errorf("emitted config: %w", err)
	}
	cs := *s
	cs.quant, cs.palette, cs.algorithms, cs.notices = cfg.Quant, cfg.Palette, nil, nil
	if algorithms {
		cs.algorithms = cfg.Algorithms
		if err := cs.algorithms.EnableAlgorithms(opts.Algorithms); err != nil {
			return nil, Usagef("--algorithms: %v", err)
		}
	}
	// The run's notices and warnings were printed for the first model;
	// a candidate's differ only by the entries the search added.
	quiet := *opts
	quiet.IO = &IO{In: opts.IO.In, Out: opts.IO.Out, ErrOut: io.Discard}
	u := newUnit()
	if _, err := runPipeline(ctx, &quiet, &cs, u, until); err != nil {
		return nil, err
	}
	return u, nil
}

// searchConfigName is the file name candidate configs are read as, which
// places their relative paths where the emitted config's will be.
func searchConfigName(opts *quantizeOptions) string {
	if opts.Search.EmitConfig != "" {
		return opts.Search.EmitConfig
	}
	return "search.yaml"
}

// baseConfigDoc is the config the emitted one starts from: the --config
// file as written, with the --preset's quantization_spec,
// quantization_config and algorithms in place of its own when one is
// given, or the target's defaults (the default preset's for the generic
// target) when neither the file nor a preset gives a
// quantization_config. The entries go in
// quantization_config.global_config: a quantization_config without one
// (a preset reference) is refused.
func baseConfigDoc(opts *quantizeOptions, s *pipelineSetup) (*yaml.Node, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	if opts.Config != "" {
		b, err := os.ReadFile(opts.Config)
		if err != nil {
			return nil, err
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, &UsageError{Err: fmt.Errorf("%s: %w", opts.Config, err)}
		}
		if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
			root = doc.Content[0]
		}
	}
	if s.settings.Preset != "" {
		b, err := config.PresetYAML(s.settings.Preset)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		var preset yaml.Node
		if err := yaml.Unmarshal(b, &preset); err != nil {
			return nil, err
		}
		for _, k := range []string{"quantization_spec", "quantization_config", "algorithms"} {
			deleteKey(root, k)
		}
		root.Content = append(root.Content, preset.Content[0].Content...)
		return root, nil
	}
	if mappingValue(root, "quantization_config") == nil {
		// No quantization config given: the target's, as quantize uses
		// (the generic target's is the default preset).
		var defaults yaml.Node
		if err := yaml.Unmarshal(s.target.ConfigYAML(), &defaults); err != nil {
			return nil, err
		}
		deleteKey(root, "quantization_spec")
		root.Content = append(root.Content, defaults.Content[0].Content...)
	}
	if globalConfig(root) == nil {
		return nil, Usagef("--target-sqnr and --emit-config add op_name_config entries to quantization_config.global_config, which %s does not have as a mapping: give --preset, or write the global_config out (coreaiq presets NAME prints one)", opts.Config)
	}
	return root, nil
}

// notExpressible is a promotion no op_name_config entry in global_config
// writes.
type notExpressible struct{ why string }

func (e *notExpressible) Error() string { return e.why }

// renderSearchConfig writes base with calibration.samples set to the
// samples calibrated on (the held-out ones excluded, so that quantize
// without --eval-samples calibrates on the same ones) and, for every node
// that quantizes a raised value, an op_name_config entry: the node's
// resolved specs written out, the raised values in int16 or null.
// comments, by value, go beside the entries.
func renderSearchConfig(base *yaml.Node, res *config.Resolution, levels map[string]int, comments map[string]string, sp sensitivitySplit, so *searchOptions, counts string) ([]byte, error) {
	root := cloneNode(base)
	if sp.source != nil {
		cal := ensureMapping(root, "calibration")
		setKey(cal, "samples", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(sp.calibSamples)},
			"calibrated on the samples before the held-out ones")
	}
	if len(levels) > 0 {
		names := ensureMapping(globalConfig(root), "op_name_config")
		globalPath := ""
		anchors := specAnchors{}
		for _, nr := range res.Nodes {
			entry, touched, err := promotionEntry(nr, levels, anchors)
			if err != nil {
				return nil, err
			}
			if len(touched) == 0 {
				continue
			}
			if globalPath == "" {
				globalPath = "quantization_config.global_config"
			}
			if !strings.HasSuffix(nr.ModuleRule.Path, globalPath) {
				return nil, &notExpressible{fmt.Sprintf("node %s takes its config from %s, not global_config", nr.Node.Name, nr.ModuleRule)}
			}
			var notes []string
			for _, v := range touched {
				if c := comments[v]; c != "" && !slices.Contains(notes, c) {
					notes = append(notes, c)
				}
			}
			comment := "raised by the accuracy search"
			if len(notes) > 0 {
				comment = strings.Join(notes, "; ")
			}
			setKey(names, config.OpNameKey(nr.Node.Name), entry, comment)
		}
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	head := "written by coreaiq quantize --emit-config"
	if t := so.targetFlag(); t != "" {
		head += " (" + t + ")"
	}
	if counts != "" {
		head += "\n" + counts
	}
	doc.HeadComment = head
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// promotionEntry is the op_name_config entry of a node that quantizes a
// raised value: its resolved op_input_spec, op_output_spec and
// op_state_spec written out by index or state name, the raised values
// widened to int16 or null. touched lists the raised values it quantizes
// (none: the node needs no entry).
func promotionEntry(nr *config.NodeResolution, levels map[string]int, anchors specAnchors) (entry *yaml.Node, touched []string, err error) {
	for _, t := range nr.Tensors {
		if t.Spec != nil && levels[t.Value] != levelConfigured && !slices.Contains(touched, t.Value) {
			touched = append(touched, t.Value)
			if t.Boundary {
				return nil, nil, &notExpressible{fmt.Sprintf("the spec of %q at node %s is a module boundary's (%s), which op_name_config does not override", t.Value, nr.Node.Name, t.Rule)}
			}
		}
	}
	if len(touched) == 0 {
		return nil, nil, nil
	}
	fields := map[config.Role]*yaml.Node{}
	for _, r := range []config.Role{config.RoleInput, config.RoleOutput, config.RoleState} {
		fields[r] = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	for _, t := range nr.Tensors {
		s := t.Spec
		switch {
		case s == nil && !t.Explicit:
			continue // no key: not quantized, as the resolution has it
		case s != nil && levels[t.Value] == levelFloat:
			s = nil
		case s != nil && levels[t.Value] == levelInt16:
			if s = widened(s, t.Role == config.RoleState); s == nil {
				return nil, nil, &notExpressible{fmt.Sprintf("the spec of %q at node %s is %s, not an 8-bit integer", t.Value, nr.Node.Name, t.Spec)}
			}
		}
		key := fmt.Sprint(t.Index)
		if t.Role == config.RoleState {
			if t.Key == "" {
				return nil, nil, &notExpressible{fmt.Sprintf("state input %d of node %s has no op_state_spec name", t.Index, nr.Node.Name)}
			}
			key = t.Key
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: key}
		if t.Role != config.RoleState {
			k.Tag = "!!int"
		}
		fields[t.Role].Content = append(fields[t.Role].Content, k, anchors.node(s))
	}
	entry = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, f := range []struct {
		key  string
		role config.Role
	}{{"op_input_spec", config.RoleInput}, {"op_output_spec", config.RoleOutput}, {"op_state_spec", config.RoleState}} {
		v := fields[f.role]
		if len(v.Content) == 0 {
			v = specNode(nil) // null: nothing quantized
		}
		entry.Content = append(entry.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.key}, v)
	}
	return entry, touched, nil
}

// specAnchors writes each distinct spec of the entries once, with an
// anchor named after it, and aliases it after that.
type specAnchors map[string]*yaml.Node

func (a specAnchors) node(s *spec.QuantizationSpec) *yaml.Node {
	n := specNode(s)
	if s == nil {
		return n
	}
	key := s.String()
	if first, ok := a[key]; ok {
		return &yaml.Node{Kind: yaml.AliasNode, Value: first.Anchor, Alias: first}
	}
	name := strings.NewReplacer("per_", "").Replace(fmt.Sprintf("%s_%s_%s", s.DType, s.Granularity.Type, s.Calculator.Type))
	taken := map[string]bool{}
	for _, x := range a {
		taken[x.Anchor] = true
	}
	anchor := name
	for i := 2; taken[anchor]; i++ {
		anchor = fmt.Sprintf("%s_%d", name, i)
	}
	n.Anchor = anchor
	a[key] = n
	return n
}

// specNode writes a resolved spec in the config's spelling, on one line;
// nil is null.
func specNode(s *spec.QuantizationSpec) *yaml.Node {
	if s == nil {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
	add := func(m *yaml.Node, k string, v *yaml.Node) {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
	}
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	num := func(v string, tag string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }
	add(m, "dtype", str(s.DType.String()))
	add(m, "qscheme", str(s.QScheme.String()))
	g := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
	add(g, "type", str(s.Granularity.Type.String()))
	if s.Granularity.Axis != nil {
		add(g, "axis", num(fmt.Sprint(*s.Granularity.Axis), "!!int"))
	}
	if s.Granularity.BlockSize != 0 {
		add(g, "block_size", num(fmt.Sprint(s.Granularity.BlockSize), "!!int"))
	}
	add(m, "granularity", g)
	c := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
	add(c, "type", str(s.Calculator.Type.String()))
	flt := func(f float64) *yaml.Node { return num(strconv.FormatFloat(f, 'g', -1, 64), "!!float") }
	switch s.Calculator.Type {
	case spec.MovingAverage:
		add(c, "averaging_constant", flt(s.Calculator.AveragingConstant))
	case spec.Percentile:
		add(c, "percentile", flt(s.Calculator.Percentile))
		add(c, "num_bins", num(fmt.Sprint(s.Calculator.NumBins), "!!int"))
	case spec.Entropy, spec.MSE:
		add(c, "num_bins", num(fmt.Sprint(s.Calculator.NumBins), "!!int"))
	}
	add(m, "qparam_calculator", c)
	if s.ScaleDType != spec.DTypeAuto && s.ScaleDType != spec.Float32 { // float32: the default
		add(m, "scale_dtype", str(s.ScaleDType.String()))
	}
	return m
}

// globalConfig is the mapping of quantization_config.global_config in
// the config root, nil when there is none.
func globalConfig(root *yaml.Node) *yaml.Node {
	v := root
	for _, k := range []string{"quantization_config", "global_config"} {
		if v = mappingValue(v, k); v == nil {
			return nil
		}
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if v.Kind != yaml.MappingNode {
			return nil
		}
	}
	return v
}

// mappingValue is the value of key in the mapping m, nil when absent.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// setKey sets key in the mapping m to v, with comment beside the key.
func setKey(m *yaml.Node, key string, v *yaml.Node, comment string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			m.Content[i].LineComment = "# " + comment
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key, LineComment: "# " + comment}
	m.Content = append(m.Content, k, v)
}

// ensureMapping is the mapping under key in m, made when absent or null.
func ensureMapping(m *yaml.Node, key string) *yaml.Node {
	v := mappingValue(m, key)
	if v != nil && v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v != nil && v.Kind == yaml.MappingNode {
		v.Style = 0 // block style, where entries have room for comments
		return v
	}
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = n
			return n
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, n)
	return n
}

// cloneNode copies a YAML tree, keeping aliases pointing at the copies of
// their anchors.
func cloneNode(n *yaml.Node) *yaml.Node {
	copies := map[*yaml.Node]*yaml.Node{}
	var clone func(n *yaml.Node) *yaml.Node
	clone = func(n *yaml.Node) *yaml.Node {
		if n == nil {
			return nil
		}
		if c, ok := copies[n]; ok {
			return c
		}
		c := *n
		copies[n] = &c
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, k := range n.Content {
			c.Content[i] = clone(k)
		}
		c.Alias = clone(n.Alias)
		return &c
	}
	return clone(n)
}

// searchGateError is the exit-3 error of a search that fell short.
func searchGateError(so *searchOptions, r *searchResult) error {
	return &GateError{Err: fmt.Errorf("%s not met within --search-budget: the model reaches %s (from %s; worst output %s dB) with %d of %d points raised after %d evaluation(s); the best model found was written",
		so.targetFlag(), strconv.FormatFloat(r.Reached, 'f', 2, 64), strconv.FormatFloat(r.Start, 'f', 2, 64), r.ReachedSQNR, r.Counts.raised(), r.Counts.points(), r.Evaluations)}
}

// measure writes the candidate with the moves made and measures it on the
// held-out samples: one evaluation.
func (st *searchState) measure(ctx context.Context, m *compare.Measurer, res *searchResult, moves []searchMove) (compare.DB, error) {
	model, err := st.write(ctx, st.levelsWith(moves))
	if err != nil {
		return 0, fmt.Errorf("candidate with %s: %w", describeMoves(moves), err)
	}
	got, err := m.Measure(ctx, model)
	if err != nil {
		return 0, fmt.Errorf("candidate with %s: %w", describeMoves(moves), err)
	}
	res.Evaluations++
	return got, nil
}

// describeMoves is "a to int16, b to float".
func describeMoves(moves []searchMove) string {
	var parts []string
	for _, mv := range moves[:min(len(moves), movesNamed)] {
		parts = append(parts, mv.un.Name+" to "+levelNames[mv.to])
	}
	if len(moves) > movesNamed {
		return fmt.Sprintf("%d units: %s and %d more (the report's trace lists them)", len(moves), strings.Join(parts, ", "), len(moves)-movesNamed)
	}
	return strings.Join(parts, ", ")
}

// movesNamed is how many moves of a batch a progress line names: a batch
// on a detector raises hundreds of units, which the report's trace
// lists.
const movesNamed = 8

// minGainPerCost is the least measured gain per added cost, in dB, for
// which the search makes a step or keeps a batch: a step that changes
// the output by less than that is not worth its bytes.
const minGainPerCost = 0.05

// Batches: while the worst output is batchGap dB or more below an SQNR
// target, the search raises several units in one evaluation, each unit's
// best step by estimate per cost, best first, until their estimates add
// up to the gap or there are one per batchShare units (at least two). A
// batch whose gain is no gain halves that number; one kept is backed off
// once the target is met (backOff).
const (
	batchGap   = 3.0
	batchShare = 16
)

// batchMember is a unit a batch raised: back is the move that lowers it
// again, to the level the batch raised it to, ratio its estimated gain
// per cost when it was picked.
type batchMember struct {
	back  searchMove
	to    int
	ratio float64
	batch int
}

// pickBatch is the moves of the next batch: each unit's step with the
// best estimated gain per cost (positive estimates, steps no config is
// known to refuse), best first (ties: the lower name), until the
// estimates add up to gap or there are limit of them.
func pickBatch(units []*searchUnit, gap float64, limit int) []searchMove {
	type candidate struct {
		mv    searchMove
		ratio float64
	}
	var cands []candidate
	for _, un := range units {
		var best *candidate
		for _, to := range un.steps() {
			if un.inexpressible[to] != "" || un.est[to] <= 0 {
				continue
			}
			r := un.est[to] / float64(max(un.cost(to), 1))
			if best == nil || r > best.ratio {
				best = &candidate{searchMove{un, to}, r}
			}
		}
		if best != nil {
			cands = append(cands, *best)
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.ratio, a.ratio); c != 0 {
			return c
		}
		return strings.Compare(a.mv.un.Name, b.mv.un.Name)
	})
	var out []searchMove
	sum := 0.0
	for _, c := range cands {
		if len(out) == limit || sum >= gap {
			break
		}
		out = append(out, c.mv)
		sum += c.mv.un.est[c.mv.to]
	}
	return out
}

// movesCost is what the moves add.
func movesCost(moves []searchMove) int {
	c := 0
	for _, mv := range moves {
		c += mv.un.cost(mv.to)
	}
	return c
}

// moveNames are the moves as "unit to level".
func moveNames(moves []searchMove) []string {
	var out []string
	for _, mv := range moves {
		out = append(out, mv.un.Name+" to "+levelNames[mv.to])
	}
	return out
}

// backOff lowers the units the batches raised, the least promising first
// (by their estimate per cost when picked, or, when the units' noise is
// known, the least noise per cost; ties: the lower name), in groups while
// the budget lasts: a group of a quarter of them first (with the units'
// noise known, as many as the noise estimates predict keep the target,
// backOffSize; under a metric other than the SQNR, twice the last group
// lowered), lowered together in one evaluation by judge; a group whose
// lowering keeps the target metric at target or above goes back to its
// levels before the batches (its promotions dropped), and one that does
// not is halved and tried again, down to a single unit, which then stays
// raised; after either of those the next group is predicted again.
// current is the worst output's SQNR and reached the target metric's
// value, both returned as it ends.
func (st *searchState) backOff(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit,
	base *yaml.Node, sp sensitivitySplit, m *compare.Measurer, batched []batchMember, current, reached, target float64, budget int, res *searchResult,
	judge candidateJudge) (float64, float64, error) {
	pending := slices.Clone(batched)
	predict := st.noiseScale > 0 && !slices.ContainsFunc(pending, func(b batchMember) bool { return !(b.back.un.noise >= 0) })
	quietness := func(b batchMember) float64 { return b.ratio }
	if predict {
		quietness = func(b batchMember) float64 { return b.back.un.noise / float64(max(b.back.un.cost(b.to), 1)) }
	}
	slices.SortStableFunc(pending, func(a, b batchMember) int {
		if c := cmp.Compare(quietness(a), quietness(b)); c != 0 {
			return c
		}
		return strings.Compare(a.back.un.Name, b.back.un.Name)
	})
	errOut := opts.IO.ErrOut
	size, halved := max(1, len(pending)/4), false
	for len(pending) > 0 && res.Evaluations < budget {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if b := pending[0]; b.back.un.level != b.to {
			pending = pending[1:] // raised again since
			continue
		}
		if predict && !halved {
			size = st.backOffSize(pending, current, target)
		}
		// The group: the next units, each once.
		var group []batchMember
		var moves []searchMove
		for _, b := range pending {
			if len(group) == size || b.back.un.level != b.to || slices.ContainsFunc(moves, func(mv searchMove) bool { return mv.un == b.back.un }) {
				break
			}
			group, moves = append(group, b), append(moves, b.back)
		}
		got, value, err := judge.judge(ctx, moves)
		if err != nil {
			return 0, 0, err
		}
		if predict {
			// The estimates came from the configured model, whose errors
			// compound; on the current one a unit lowered adds what it
			// measures: the scale follows the groups measured.
			predicted := 0.0
			for _, b := range group {
				predicted += st.noiseScale * b.back.un.noise
			}
			st.noiseScale = followMeasured(st.noiseScale, predicted, got.NoiseRatio()-compare.DB(current).NoiseRatio())
		}
		gain, cost := float64(got)-current, movesCost(moves)
		step := searchStep{Unit: moves[0].un.Name, To: levelNames[moves[0].to], SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured"}
		if len(moves) > 1 {
			step = searchStep{Unit: fmt.Sprintf("%d units", len(moves)), Moves: moveNames(moves), SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured"}
		}
		if value != float64(got) {
			step.Metric = &value
		}
		fmt.Fprintf(errOut, "search %d/%d: back off %s (cost %d): worst output %s dB (%+.2f dB)%s\n",
			res.Evaluations, budget, describeMoves(moves), cost, got, gain, judge.figure(value))
		why := "below the target"
		if value >= target {
			if why, err = st.checkExpressible(ctx, opts, s, newUnit, base, sp, moves); err != nil {
				return 0, 0, err
			}
		}
		switch {
		case why == "":
			for _, b := range group {
				b.back.un.level = b.back.to
				res.Promoted = slices.DeleteFunc(res.Promoted, func(p promotion) bool {
					return p.Unit == b.back.un.Name && p.Batch == b.batch
				})
			}
			current, reached = float64(got), value
			step.Verdict = "backed off"
			pending, halved = pending[len(group):], false
			if !predict && !judge.metric.isSQNR {
				// No noise estimates size the groups: a group lowered
				// without loss doubles the next (a task score's back-off
				// would otherwise go one unit at a time after a miss).
				size *= 2
			}
			fmt.Fprintf(errOut, "search: backed off %d unit(s): worst output %s dB\n", len(group), got)
		case len(group) == 1:
			pending = pending[1:] // stays raised
			halved = false
		default:
			size, halved = len(group)/2, true
		}
		res.Trace = append(res.Trace, step)
	}
	return current, reached, nil
}

// candidateJudge measures candidates for the search: the worst output's
// SQNR and the target metric's value (the SQNR itself under
// --target-sqnr), one evaluation each.
type candidateJudge struct {
	st     *searchState
	m      *compare.Measurer
	metric searchMetric
	res    *searchResult
}

func (j candidateJudge) judge(ctx context.Context, moves []searchMove) (compare.DB, float64, error) {
	if j.metric.isSQNR {
		got, err := j.st.measure(ctx, j.m, j.res, moves)
		return got, float64(got), err
	}
	model, err := j.st.write(ctx, j.st.levelsWith(moves))
	if err == nil {
		var got compare.DB
		var v float64
		if got, v, err = j.value(ctx, model); err == nil {
			return got, v, nil
		}
	}
	return 0, 0, fmt.Errorf("candidate with %s: %w", describeMoves(moves), err)
}

// value measures a written candidate by a metric other than the SQNR:
// its worst output's SQNR and the metric's value, one evaluation.
func (j candidateJudge) value(ctx context.Context, model *onnxgraph.Model) (compare.DB, float64, error) {
	got, err := j.m.MeasureAll(ctx, model)
	if err != nil {
		return 0, 0, err
	}
	j.res.Evaluations++
	v, err := j.metric.of(ctx, model, got)
	if err != nil {
		return 0, 0, err
	}
	return got.SQNR, v, nil
}

// figure is ", METRIC VALUE" for a metric other than the SQNR, for the
// progress lines that give the worst output's SQNR.
func (j candidateJudge) figure(v float64) string {
	if j.metric.isSQNR {
		return ""
	}
	return ", " + j.metric.name + " " + j.metric.format(v)
}

// metricBatch is the batch a search under a metric other than the SQNR
// (--target-top1, --eval-cmd) tries when its single steps stop short of
// the target: every unit whose 8-bit points are as configured goes to
// int16, measured by the metric. Single steps pick units by their SQNR
// estimates, one evaluation each, and a task score that hangs on many
// units at once (an OCR recognizer's exact lines) does not move for any
// one of them. When the batch meets the target and a config writes it,
// it is kept, its members ordered for the back-off by their noise in the
// sensitivity analysis (the quietest first; by their estimates when the
// analysis measured none alone), and returned with the worst output's
// SQNR and the metric's value; else nothing is kept.
func (st *searchState) metricBatch(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit,
	base *yaml.Node, sp sensitivitySplit, current float64, n, budget int, res *searchResult, judge candidateJudge) ([]batchMember, float64, float64, error) {
	all := allWide(st.units)
	if len(all) < 2 {
		return nil, 0, 0, nil
	}
	errOut := opts.IO.ErrOut
	got, value, err := judge.judge(ctx, all)
	if err != nil {
		return nil, 0, 0, err
	}
	gain, cost := float64(got)-current, movesCost(all)
	trace := searchStep{Unit: fmt.Sprintf("batch %d", n), Moves: moveNames(all), SQNR: got, Gain: compare.DB(gain), Cost: cost, Verdict: "measured", Metric: &value}
	fmt.Fprintf(errOut, "search %d/%d: batch %d, every 8-bit point in 16 bits: %s (cost %d): worst output %s dB (%+.2f dB)%s\n",
		res.Evaluations, budget, n, describeMoves(all), cost, got, gain, judge.figure(value))
	if value < judge.metric.target {
		res.Trace = append(res.Trace, trace)
		fmt.Fprintf(errOut, "search: batch %d falls short of the target\n", n)
		return nil, 0, 0, nil
	}
	why, err := st.checkExpressible(ctx, opts, s, newUnit, base, sp, all)
	if err != nil {
		return nil, 0, 0, err
	}
	if why != "" {
		trace.Verdict = "not expressible: " + why
		res.Trace = append(res.Trace, trace)
		fmt.Fprintf(errOut, "search: batch %d not promoted: %s\n", n, why)
		return nil, 0, 0, nil
	}
	trace.Verdict = "kept"
	res.Trace = append(res.Trace, trace)
	measured := !slices.ContainsFunc(all, func(mv searchMove) bool { return !(mv.un.noise >= 0) })
	kept := st.keepBatch(res, all, n, gain, func(mv searchMove) float64 {
		if measured {
			return mv.un.noise
		}
		return mv.un.est[mv.to]
	})
	fmt.Fprintf(errOut, "search: batch %d kept: %s %s\n", n, judge.metric.name, judge.metric.format(value))
	return kept, float64(got), value, nil
}

// followMeasured is the noise scale after a back-off group predicted to
// add predicted (the scale's estimate) added what was measured: moved
// halfway, in ratio, toward what the measurement says (one group's
// figure is noisy: errors cancel), by a factor of 1000 at most. A group
// that added nothing measurable says nothing of the scale.
func followMeasured(scale, predicted, added float64) float64 {
	if !(predicted > 0) || !(added > 0) {
		return scale
	}
	return scale * math.Sqrt(min(max(added/predicted, 1e-6), 1e6))
}

// backOffSize is how many of the pending units, lowered together, the
// noise estimates predict keep the worst output at target from current:
// each adds its noise times the noise batch's scale (at least one).
func (st *searchState) backOffSize(pending []batchMember, current, target float64) int {
	room := compare.DB(target).NoiseRatio() - compare.DB(current).NoiseRatio()
	n, added := 0, 0.0
	var seen []*searchUnit
	for _, b := range pending {
		if b.back.un.level != b.to || slices.Contains(seen, b.back.un) {
			break
		}
		if added += st.noiseScale * b.back.un.noise; added > room {
			break
		}
		n, seen = n+1, append(seen, b.back.un)
	}
	return max(1, n)
}

// allWide is every unit with 8-bit points, as configured, to int16 (but
// those no config writes so).
func allWide(units []*searchUnit) []searchMove {
	var out []searchMove
	for _, un := range units {
		if un.level == levelConfigured && len(un.Wide) > 0 && un.inexpressible[levelInt16] == "" {
			out = append(out, searchMove{un, levelInt16})
		}
	}
	return out
}

// pickStale is the step with the highest estimate per cost among those
// estimated on an earlier model than stamp's (ties: the lower name), nil
// when every estimate is fresh.
func pickStale(units []*searchUnit, stamp int) (*searchUnit, int) {
	var best *searchUnit
	var bestLevel int
	var bestRatio float64
	for _, un := range units {
		for _, to := range un.steps() {
			if un.stamp[to] == stamp || un.inexpressible[to] != "" {
				continue
			}
			if r := un.est[to] / float64(max(un.cost(to), 1)); best == nil || r > bestRatio {
				best, bestLevel, bestRatio = un, to, r
			}
		}
	}
	return best, bestLevel
}

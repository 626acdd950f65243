package passes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

// The Plan the passes fill in is defined in pkg/plan, below finalize,
// which writes it; these are the names the passes use for it.
type (
	Plan        = plan.Plan
	TensorPlan  = plan.TensorPlan
	Skip        = plan.Skip
	Params      = plan.Params
	Range       = plan.Range
	Role        = plan.Role
	Stage       = plan.Stage
	PalettePlan = plan.PalettePlan
)

// The roles and stages.
const (
	Activation = plan.Activation
	Weight     = plan.Weight
	Bias       = plan.Bias

	StageNone      = plan.StageNone
	Inspected      = plan.Inspected
	Prepared       = plan.Prepared
	Calibrated     = plan.Calibrated
	QParamsDecided = plan.QParamsDecided
	Finalized      = plan.Finalized
)

// Calibrator runs the float model on calibration data and returns the
// statistics of the plan's observed activations (Plan.Observed).
type Calibrator func(ctx context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error)

// Unit is what the passes work on: the model (read-only), the config, and
// the Plan they fill in.
type Unit struct {
	// Model is the model to quantize. The fold pass replaces it with a copy
	// in which Constant nodes are initializers, a tied lm_head that the
	// config quantizes otherwise than its embedding reads a weight of its
	// own (untieTables) and BatchNormalization is folded into the
	// preceding Conv (unless Prepare.KeepBatchNorm):
	// prepare, calibration and finalize work on that copy.
	Model  *onnxgraph.Model
	Config *config.QuantizerConfig
	// Palette is the kmeans_palettization_config, nil for none.
	Palette *config.QuantizerConfig
	// Prepare tunes the prepare pass.
	Prepare PrepareOptions
	// Calibrate produces activation statistics; it is only called when the
	// plan has activations to observe.
	Calibrate Calibrator
	// Write tunes the finalize pass.
	Write finalize.Options

	// Algorithms are the post-training algorithms to run (the config's
	// algorithms block); nil runs none.
	Algorithms *config.Algorithms
	// Data feeds the data-aware algorithms (bias correction).
	Data *AlgorithmData
	// Layers is what the algorithms did, node by node.
	Layers []LayerReport
	// SkipFigures leaves out the figures of Layers that only report on
	// an algorithm: the local SQNRs of the weights and products that
	// cross-layer equalization and SmoothQuant changed before prepare
	// (they quantize each changed weight again as it was, which on a
	// decoder costs as much as the weights' own range search) and of the
	// layers bias correction corrected (they read every layer's float
	// output). Nothing the algorithms decide depends on them.
	SkipFigures bool
	// KeepFloatWeights keeps the float values of the weights GPTQ rounds
	// (AdaRound keeps its own), for writing them at another precision than
	// planned (WithUnroundedWeights): the accuracy search and the
	// sensitivity analysis set it. A quantize that writes one model leaves
	// it off: a decoder's weights are never all in memory.
	KeepFloatWeights bool
	// ownsModel is set once Model is a private copy that the algorithms
	// may edit.
	ownsModel bool
	// readsScratch is set once Model reads the writer's scratch file too.
	readsScratch bool
	// UncorrectedBiases are the biases bias correction changed, as they
	// were, by the weight of their layer.
	UncorrectedBiases map[string]BiasValue
	// roundedWeights are the float weights GPTQ and AdaRound replaced by
	// rounded ones, by value name, for bias correction's error and for
	// writing them at other precisions (GPTQ keeps them when either needs
	// them).
	roundedWeights map[string][]float32
	// batchNormFloors are the folded BatchNorms' β − 3|γ| by Conv output,
	// kept by the fold pass for high-bias absorption.
	batchNormFloors map[string][]float32
	// pendingWeightReports are weights changed before prepare, reported
	// once their spec is planned.
	pendingWeightReports []pendingWeightReport
	// rescaled are the values the function-keeping algorithms changed
	// (cross-layer equalization, SmoothQuant, AWQ), by name; prepare hands
	// them to the tensors' plans (TensorPlan.Rescaled). A nil entry is a
	// value changed along two different axes, which is not recorded.
	rescaled map[string]*plan.Rescale
	// smoothed are the activations SmoothQuant scaled, reported once
	// their specs are planned.
	smoothed []*smoothSite

	Resolution *config.Resolution
	Plan       *Plan
	Stats      Stats
	Result     *finalize.Result
}

// Pass is one step of the pipeline.
type Pass struct {
	// Name is used in errors, --dump-after and timings.
	Name string
	// Needs is the stage the Plan must be at before the pass runs.
	Needs Stage
	// Makes is the stage the Plan is at after it. A pass that makes the
	// stage it needs changes the model or the plan without filling more of
	// it in; it runs when the plan is at that stage.
	Makes Stage
	Run   func(ctx context.Context, u *Unit) error
}

// Pipeline is the order of passes; Run is the only loop over it.
var Pipeline = []Pass{
	{Name: "inspect", Needs: StageNone, Makes: Inspected, Run: inspectPass},
	{Name: "fold", Needs: Inspected, Makes: Inspected, Run: foldPass},
	{Name: "prepare", Needs: Inspected, Makes: Prepared, Run: preparePass},
	{Name: "calibrate", Needs: Prepared, Makes: Calibrated, Run: calibratePass},
	{Name: "algorithms", Needs: Calibrated, Makes: Calibrated, Run: runDataAlgorithms},
	{Name: "qparams", Needs: Calibrated, Makes: QParamsDecided, Run: qparamsPass},
	{Name: "finalize", Needs: QParamsDecided, Makes: Finalized, Run: finalizePass},
}

// RunOptions control Run.
type RunOptions struct {
	// Until is the last pass to run ("" runs them all).
	Until string
	// DumpAfter names a pass after which the Plan is written to Dump as
	// text.
	DumpAfter string
	Dump      io.Writer
	// Check runs Plan.Check after every pass and fails the run, naming the
	// pass, when the plan breaks an invariant. Test binaries always check.
	Check bool
}

// Timing is the wall time of one pass.
type Timing struct {
	Pass    string        `json:"pass"`
	Elapsed time.Duration `json:"-"`
	Seconds float64       `json:"seconds"`
}

// PassNames lists the passes in order.
func PassNames() []string {
	out := make([]string, len(Pipeline))
	for i, p := range Pipeline {
		out[i] = p.Name
	}
	return out
}

func knownPass(name string) bool {
	for _, p := range Pipeline {
		if p.Name == name {
			return true
		}
	}
	return false
}

// Run runs the pipeline on u, checking each pass's stage, timing it and
// dumping the Plan after the one named by opts.DumpAfter.
func Run(ctx context.Context, u *Unit, opts RunOptions) ([]Timing, error) {
	for _, n := range []string{opts.Until, opts.DumpAfter} {
		if n != "" && !knownPass(n) {
			return nil, fmt.Errorf("unknown pass %q (passes: %v)", n, PassNames())
		}
	}
	// The passes' garbage is large and pointer-free (a weight decoded,
	// its codes, an activation batch), so a narrow headroom costs little
	// collection work and keeps the peak near the live heap: a 1.26 G
	// parameter decoder quantized to 4 bits peaks at about 1.2 GB instead
	// of 1.5.
	defer runtime.BatchGC()()
	// ONNX Runtime targets get the written model in the form its QDQ
	// fusions run on integers (finalize.Options.IntegerChains).
	if t := u.Prepare.Target; t != nil && t.ORT {
		u.Write.IntegerChains = true
	}
	var timings []Timing
	for _, p := range Pipeline {
		stage := StageNone
		if u.Plan != nil {
			stage = u.Plan.Stage
		}
		if stage < p.Needs {
			return timings, fmt.Errorf("%s: needs a plan at stage %s, have %s", p.Name, p.Needs, stage)
		}
		if stage > p.Makes || stage == p.Makes && p.Makes > p.Needs {
			continue // already done (a plan handed in at a later stage)
		}
		if err := ctx.Err(); err != nil {
			return timings, err
		}
		start := time.Now()
		if err := p.Run(ctx, u); err != nil {
			return timings, fmt.Errorf("%s: %w", p.Name, err)
		}
		el := time.Since(start)
		timings = append(timings, Timing{Pass: p.Name, Elapsed: el, Seconds: el.Seconds()})
		if u.Plan == nil {
			u.Plan = &Plan{}
		}
		u.Plan.Stage = p.Makes
		if opts.Check || testing.Testing() {
			if err := u.Plan.Check(); err != nil {
				return timings, fmt.Errorf("%s: the plan it left is invalid: %w", p.Name, err)
			}
		}
		if opts.DumpAfter == p.Name && opts.Dump != nil {
			if err := u.Plan.Dump(opts.Dump); err != nil {
				return timings, err
			}
		}
		if opts.Until == p.Name {
			break
		}
	}
	return timings, nil
}

func inspectPass(_ context.Context, u *Unit) error {
	if u.Model == nil {
		return errors.New("no model")
	}
	u.Plan = &Plan{Stage: Inspected}
	return nil
}

// foldPass turns Constant nodes into initializers (the rules and the
// folding read weights as initializers) and, unless Prepare.KeepBatchNorm,
// folds each BatchNormalization into the Conv before it, once, with a note
// per fold: the passes after it see one Conv whose weight prepare
// quantizes with the normalisation absorbed.
func foldPass(_ context.Context, u *Unit) error {
	m, _, err := finalize.ConstantsAsInitializers(u.Model)
	if err != nil {
		return err
	}
	u.Model = m
	if err := untieTables(u); err != nil {
		return err
	}
	if u.Prepare.KeepBatchNorm {
		return nil
	}
	if a := u.Algorithms; a != nil && a.CrossLayerEqualization != nil && a.CrossLayerEqualization.HighBiasAbsorption {
		if u.batchNormFloors, err = finalize.BatchNormFloors(u.Model); err != nil {
			return err
		}
	}
	fold := finalize.FoldBatchNorm
	if t := u.Prepare.Target; t != nil && t.Ops != nil {
		// A target's kernels decide the placement: bias Adds and
		// ConvTranspose's BatchNormalization fold too.
		fold = finalize.FoldIntoLayers
	}
	m, notes, err := fold(u.Model)
	if err != nil {
		return err
	}
	u.ownsModel = u.ownsModel || m != u.Model
	u.Model = m
	u.Plan.Notes = append(u.Plan.Notes, notes...)
	return nil
}

func preparePass(ctx context.Context, u *Unit) error {
	if u.Config == nil {
		return errors.New("no quantization config")
	}
	if err := runWeightAlgorithms(ctx, u); err != nil {
		return err
	}
	if err := runActivationAlgorithms(ctx, u); err != nil {
		return err
	}
	res, err := resolveFor(u.Config, u.Model.Graph, u.Prepare)
	if err != nil {
		return err
	}
	u.Resolution = res
	plan, err := Prepare(u.Model, res, u.Prepare)
	if err != nil {
		return err
	}
	plan.Notes = append(slices.Clone(u.Plan.Notes), plan.Notes...)
	if u.Palette != nil {
		pres, err := config.ResolvePalettization(u.Palette, u.Model.Graph)
		if err != nil {
			return err
		}
		res.Warnings = append(res.Warnings, pres.Warnings...)
		planPalettes(plan, pres)
	}
	for _, t := range plan.Tensors {
		if r := u.rescaled[t.Value]; r != nil {
			t.Rescaled = r
		}
	}
	u.Plan = plan
	if u.SkipFigures {
		u.smoothed, u.pendingWeightReports = nil, nil
		return nil
	}
	if err := reportSmoothed(u); err != nil {
		return err
	}
	return reportWeights(u)
}

func calibratePass(ctx context.Context, u *Unit) error {
	obs := u.Plan.Observed()
	moments := len(momentRequests(u.Plan)) > 0
	if len(obs) == 0 && (!moments || u.Calibrate == nil) {
		if moments && u.Stats == nil {
			u.Plan.Notes = append(u.Plan.Notes, "palettization is plain k-means: no calibration data for the data-aware mode")
		}
		return nil // weight-only or fixed ranges: nothing to observe
	}
	if u.Stats != nil {
		KeepInfinitiesFloat(u.Plan, u.Stats)
		return nil // statistics handed in (finalize --stats)
	}
	if u.Calibrate == nil {
		return fmt.Errorf("the plan quantizes %d activations (first %q): calibration data is needed", len(obs), obs[0].Value)
	}
	st, err := u.Calibrate(ctx, u.Model, u.Plan)
	if err != nil {
		return err
	}
	u.Stats = st
	KeepInfinitiesFloat(u.Plan, st)
	return nil
}

func finalizePass(_ context.Context, u *Unit) error {
	res, err := finalize.Write(u.Model, u.Plan, u.Write)
	if err != nil {
		return err
	}
	u.Result = res
	if t := u.Prepare.Target; t != nil && t.Ops != nil {
		// Placement's reasons are the plan's; the written model can run a
		// node it left in float on integers all the same (its neighbours
		// quantized its inputs and output, or the writer's integer chains
		// rewrote it) or no longer hold it (a folded factor): those are not
		// left in float.
		rewritten := map[string]bool{}
		for _, n := range res.Rewritten {
			rewritten[n] = true
		}
		g := res.Model.Graph
		u.Plan.Skipped = slices.DeleteFunc(u.Plan.Skipped, func(s Skip) bool {
			n := g.Node(s.Node)
			return rewritten[s.Node] || n != nil && strings.HasPrefix(s.Reason, "target ") && runsAsKernel(n, t)
		})
	}
	return nil
}

// noteRescale records that an algorithm divided value by scale and then
// subtracted shift (nil: zero), channel by channel along axis (−1: the
// last), after whatever was recorded for it before.
func (u *Unit) noteRescale(value string, axis int, scale, shift []float32) {
	if u.rescaled == nil {
		u.rescaled = map[string]*plan.Rescale{}
	}
	prev, seen := u.rescaled[value]
	if seen && prev == nil {
		return
	}
	u.rescaled[value] = prev.Then(axis, scale, shift)
}

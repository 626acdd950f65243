package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

type quantizeOptions struct {
	IO     *IO
	Config string
	// Settings are the tool settings given as flags, layered over the
	// environment and the config file by config.Settings.
	Settings config.Overrides
	// Prepare are the prepare pass's flags.
	Prepare passes.PrepareOptions
	// Algorithms are the --algorithms names, turned on over the config's.
	Algorithms []string
	Opset      int64
	DumpAfter  string
	// Check runs Plan.Check after every pass (--check).
	Check bool
	// Format is the --format flag: qdq or ort-nbits.
	Format string
	// FP4AsFP8 writes float4 weights as float8 e4m3fn codes.
	FP4AsFP8 bool
	// EvalSamples and MinSQNR (nil: no gate) are quantize's held-out
	// evaluation.
	EvalSamples int
	MinSQNR     *float64
	// Bench and MinSpeedup are quantize's --bench and --min-speedup.
	Bench      bool
	MinSpeedup float64
	// Profile times the calibration runs (quantize only).
	Profile profileFlags
	// Search is quantize's accuracy target (search.go).
	Search searchOptions
}

// addPrepareFlags adds the flags that tune the prepare pass; every command
// that prepares a plan has them, so that calibrate and finalize --stats
// plan the same tensors as quantize.
func addPrepareFlags(f *pflag.FlagSet, p *passes.PrepareOptions) {
	negBool(f, &p.NoOpIntrinsics, "op-intrinsics", "apply the op-intrinsic qparams (coreai-opt's graph-mode rule): asymmetric integer outputs for Relu, Clip, Sigmoid, Softmax and pools/concats of non-negative values, fixed ranges for Sigmoid, Softmax, Tanh and Clip; =false keeps the config's qscheme everywhere")
	negBool(f, &p.NoHeadroom, "logit-headroom", "give one bit of headroom above the calibrated maximum to the values whose largest entries decide a Softmax, LogSoftmax or ArgMax (its input and, through pools and data movement, the values it comes from), so that a class scored higher than in any calibration sample is not clipped to a tie, and keep the calibrated maximum of the input of the layer those values come from (no percentile, mse or entropy clipping of a classifier's features); =false keeps the calculator's ranges")
	negBool(f, &p.NoSiLUFloor, "silu-floor", "quantize the input of a SiLU (Sigmoid · x, quantized as a pattern) from where the SiLU's quantized output leaves 0, since every input below gives that output the code of 0 (a detector's pre-activations reach far below); =false keeps the calculator's range")
	negBool(f, &p.NoWideHeadroom, "wide-headroom", "give activations on grids of 16 bits or more headroom beyond their calibrated minimum and maximum (the range times 1.5, away from zero), so that values beyond what the calibration samples reached are not clipped; =false keeps the calculator's ranges")
	negBool(f, &p.NoMixedConcat, "float-mixed-concat", "leave in float a Concat that only graph outputs read (directly or through data movement and further Concats) when one of its inputs would keep fewer than 16 levels of the output's integer grid (a detector's boxes in pixels beside its class probabilities), with the values sharing its qparams; =false quantizes it as the config asks")
	f.Var(patternsFlag{&p.Patterns}, "patterns", "multi-node patterns quantized at their boundaries only: ops (LayerNorm and GELU written out, SiLU, HardSwish, MatMul + bias, attention scores up to Softmax), all (adds Conv/Gemm + Add, and leaves unquantized a Conv/Gemm/MatMul or linear layer output only a SiLU, HardSwish or GELU reads: fusions oneDNN makes and ONNX Runtime's x86 QDQ fusions do not), none")
	negBool(f, &p.ConcatOwnQParams, "concat-share", "give the inputs of Concat the output's qparams (coreai-opt's concat rule; ONNX Runtime's QLinearConcat wants one scale); =false gives each input its own")
}

// patternsFlag binds --patterns (ops, all or none) to a Patterns.
type patternsFlag struct{ p *passes.Patterns }

func (f patternsFlag) Set(s string) error {
	v, err := passes.ParsePatterns(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}

func (f patternsFlag) String() string {
	if f.p == nil {
		return passes.PatternsOps.String()
	}
	return f.p.String()
}

func (f patternsFlag) Type() string { return "ops|all|none" }

// addCalibrationFlags adds the calibration settings' flags.
func addCalibrationFlags(f *pflag.FlagSet, o *config.Overrides, samplesHelp string) {
	f.Var(optStrings{&o.Data}, "data", calibrationDataHelp)
	optInt(f, &o.Samples, "samples", config.DefaultSamples, samplesHelp)
	optInt(f, &o.BatchSize, "batch-size", config.DefaultBatchSize, "calibration samples per engine run (unset: the model's fixed batch size when its inputs fix one)")
}

// NewCmdQuantize builds `coreaiq quantize`: inspect, prepare, calibrate and
// finalize in one run.
func NewCmdQuantize(streams *IO, runF func(*quantizeOptions) error) *cobra.Command {
	opts := &quantizeOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "quantize [--config FILE] [--model PATH] [-o PATH] [--data PATH ...] [--preset NAME]",
		Short: "Quantize a model: prepare the plan, calibrate activations and write a QDQ model",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runQuantize(cmd.Context(), opts)
		},
	}
	addPipelineFlags(cmd, opts)
	f := cmd.Flags()
	addCalibrationFlags(f, &opts.Settings, "calibration samples to use")
	optString(f, &opts.Settings.Engine, "engine", "", config.DefaultEngine, "engine for calibration: go (built-in) or ort")
	optInt(f, &opts.Settings.Threads, "threads", 0, "engine threads (0: one per CPU)")
	optString(f, &opts.Settings.Report, "report", "", "", "write a JSON report here")
	addEvalFlags(f, opts)
	addQuantizeBenchFlags(f, opts)
	addSearchFlags(f, &opts.Search)
	opts.Profile.add(f)
	return cmd
}

// addPipelineFlags adds the flags prepare, finalize and quantize share.
func addPipelineFlags(cmd *cobra.Command, opts *quantizeOptions) {
	f := cmd.Flags()
	f.StringVar(&opts.Config, "config", "", "config file (tool settings and quantization config)")
	optString(f, &opts.Settings.Model, "model", "", "", "model to quantize (default: the config's model)")
	optString(f, &opts.Settings.Output, "output", "o", "", "output path")
	optString(f, &opts.Settings.Preset, "preset", "", "", "quantization preset (replaces the config's quantization_config and algorithms): "+strings.Join(config.PresetNames(), ", "))
	f.StringSliceVar(&opts.Algorithms, "algorithms", nil, "turn on post-training algorithms with their defaults, on top of the config's algorithms block: "+strings.Join(config.AlgorithmNames(), ", "))
	f.Int64Var(&opts.Opset, "opset", 0, "pin the output's default-domain opset (0: as low as the content allows)")
	f.StringVar(&opts.Format, "format", "qdq", "output format: qdq (QuantizeLinear/DequantizeLinear), or ort-nbits (4-bit MatMul/Gemm weights as ONNX Runtime's com.microsoft MatMulNBits, the rest QDQ)")
	f.BoolVar(&opts.FP4AsFP8, "fp4-as-fp8", false, "write float4 e2m1 weights as float8 e4m3fn codes of the same values (ONNX Runtime 1.23's CPU provider cannot load float4)")
	f.StringVar(&opts.DumpAfter, "dump-after", "", "print the plan as text to stderr after this pass: "+strings.Join(passes.PassNames(), ", "))
	f.BoolVar(&opts.Check, "check", false, "check the plan's invariants after every pass; a broken one fails the run (exit 1), naming the pass, tensor and rule")
	addPrepareFlags(f, &opts.Prepare)
	addTargetFlag(f, &opts.Settings)
}

// algorithmData feeds the data-aware algorithms the first samples of
// source, as quantize, calibrate and finalize all do, so that calibrate +
// finalize --stats write what quantize writes from the same data.
func (s *pipelineSetup) algorithmData(streams *IO, source calibrate.Source, samples int) *passes.AlgorithmData {
	return &passes.AlgorithmData{Engine: s.settings.Engine, Runtime: runtime.Options{Threads: s.settings.Threads},
		Source: source, Samples: samples, BatchSize: s.settings.BatchSize,
		Progress: passes.NewBlockProgressReporter(streams.ErrOut, streams.IsTerminal, slog.Default()).Report}
}

// pipelineSetup is what every pipeline command loads first.
type pipelineSetup struct {
	settings config.Settings
	// scratch, when set, takes the large initializers of the model the
	// pipeline writes (see finalize.Options.Scratch).
	scratch *onnxgraph.Scratch
	model   *onnxgraph.Model
	quant   *config.QuantizerConfig
	// algorithms are the config's or preset's algorithms with --algorithms.
	algorithms *config.Algorithms
	notices    []*config.Diagnostic
	// target is the deployment target (--target, `target:`, or the default).
	target *config.Target
	// palette is the config's kmeans_palettization_config, nil for none.
	palette *config.QuantizerConfig
	// randomData is set when the activation statistics came from random
	// inputs (calibrate --random-data): the written model is marked.
	randomData bool
	// batchFrom names where an explicit calibration batch size came from
	// ("" when it is the default).
	batchFrom string
	// outputs are the command's checked outputs (outputs.go); Discard them
	// when the command ends.
	outputs *outputPlan
	// samplesFrom names where an explicit sample count came from ("" when
	// it is the default).
	samplesFrom string
}

// setupPipeline resolves the settings, checks the command's outputs
// against its inputs before anything heavy runs (outputs names them from
// the settings; it may be nil), then loads the model. extraInputs are
// files the command reads besides the config, model and data.
func setupPipeline(opts *quantizeOptions, extraInputs []string, outputs func(config.Settings) []output) (_ *pipelineSetup, err error) {
	var cfg *config.Config
	if opts.Config != "" {
		var err error
		if cfg, err = loadConfig(opts.Config); err != nil {
			return nil, err
		}
	}
	st, err := cfg.Settings(opts.Settings)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	if st.Model == "" {
		return nil, Usagef("no model: give --model or a config with `model:`")
	}
	var plan *outputPlan
	defer func() {
		if err != nil {
			plan.Discard()
		}
	}()
	if outputs != nil {
		inputs := append([]string{opts.Config, st.Model}, extraInputs...)
		if plan, err = planOutputs(append(inputs, settingsInputFiles(st)...), outputs(st)...); err != nil {
			return nil, err
		}
	}
	m, err := loadModel(st.Model)
	if err == nil {
		err = plan.checkInputs(modelInputFiles(m))
	}
	if err == nil {
		err = checkModelForPipeline(m, opts.Opset)
	}
	if err != nil {
		return nil, err
	}
	s := &pipelineSetup{settings: st, model: m, batchFrom: batchSource(cfg, opts.Settings), outputs: plan,
		samplesFrom: samplesSource(cfg, opts.Settings)}
	if s.target, err = config.LookupTarget(st.Target); err != nil {
		return nil, &UsageError{Err: err}
	}
	if cfg != nil {
		s.palette = cfg.Palette
	}
	switch {
	case st.Preset != "":
		pc, err := config.PresetConfig(st.Preset)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		s.quant, s.algorithms = pc.Quant, pc.Algorithms
	case cfg != nil && cfg.Quant != nil && (cfg.Quant.GlobalRule.Line > 0 || s.target.Name == config.DefaultTarget):
		s.quant, s.notices = cfg.Quant, cfg.Notices
	default:
		// No quantization_config: the target's specs (generic: the
		// default preset, as a config file without one gets).
		if cfg != nil {
			s.notices = cfg.Notices
		}
		if s.quant, err = s.target.Config(); err != nil {
			return nil, err
		}
	}
	if st.Preset == "" && cfg != nil {
		s.algorithms = cfg.Algorithms
	}
	if s.algorithms == nil {
		s.algorithms = &config.Algorithms{}
	}
	if err := s.algorithms.EnableAlgorithms(opts.Algorithms); err != nil {
		return nil, Usagef("--algorithms: %v", err)
	}
	return s, nil
}

// batchSource names where an explicit calibration batch size came from,
// in the precedence of config.Settings (flag, environment, config file),
// or "" when none was given.
func batchSource(cfg *config.Config, given config.Overrides) string {
	switch {
	case given.BatchSize != nil:
		return "--batch-size"
	case os.Getenv("COREAIQ_CALIBRATION_BATCH_SIZE") != "":
		return "COREAIQ_CALIBRATION_BATCH_SIZE"
	case cfg != nil && cfg.FileSettings.BatchSize > 0:
		return cfg.File + ": calibration.batch_size"
	}
	return ""
}

// samplesSource names where an explicit calibration sample count came
// from, as batchSource does for the batch size.
func samplesSource(cfg *config.Config, given config.Overrides) string {
	switch {
	case given.Samples != nil:
		return "--samples"
	case os.Getenv("COREAIQ_CALIBRATION_SAMPLES") != "":
		return "COREAIQ_CALIBRATION_SAMPLES"
	case cfg != nil && cfg.FileSettings.Samples > 0:
		return cfg.File + ": calibration.samples"
	}
	return ""
}

// warnShortData says on stderr when the data holds fewer samples than
// were asked for explicitly: calibration then uses what there is.
func (s *pipelineSetup) warnShortData(w io.Writer, src calibrate.Source, asked int) {
	if s.samplesFrom != "" && src != nil && !src.Random() && src.Samples() < asked {
		fmt.Fprintf(w, "warning: %s asks for %d samples; the calibration data holds %d, which are all used\n",
			s.samplesFrom, asked, src.Samples())
	}
}

// resolveBatchSize fits the calibration batch to a model whose inputs fix
// their first dimension (mnist-cntk-op8: [1, 1, 28, 28]): without an
// explicit batch size it becomes the fixed one; an explicit one that
// differs is a usage error naming the input and both sizes, rather than a
// shape error in the middle of calibration.
func (s *pipelineSetup) resolveBatchSize() error {
	fixedBy := ""
	axes := map[string]int{}
	for _, d := range s.settings.Data {
		if e, err := config.ParseDataEntry(d); err == nil {
			axes[e.Name] = e.Axis
		}
	}
	if len(s.model.Graph.Inputs) == 1 {
		if axis, ok := axes[""]; ok {
			axes[s.model.Graph.Inputs[0].Name] = axis
		}
	}
	for _, v := range s.model.Graph.Inputs {
		if v.IsInitializer {
			continue // an initializer listed as an input (IR < 4)
		}
		axis := axes[v.Name]
		dims, ok := v.Shape()
		if !ok || len(dims) <= axis || dims[axis].Size <= 0 {
			continue
		}
		fixed := int(dims[axis].Size)
		switch {
		case s.batchFrom != "" && s.settings.BatchSize != fixed:
			return Usagef("input %q of %s has a fixed batch size of %d, but %s sets the calibration batch size to %d: leave it unset or make it %d",
				v.Name, s.settings.Model, fixed, s.batchFrom, s.settings.BatchSize, fixed)
		case fixedBy == "" && s.batchFrom == "":
			if fixed != s.settings.BatchSize {
				slog.Info("calibration batch size set to the model's fixed batch size", "input", v.Name, "batch_size", fixed)
			}
			s.settings.BatchSize, fixedBy = fixed, v.Name
		case fixedBy != "" && s.settings.BatchSize != fixed:
			return Usagef("inputs %q and %q of %s fix different batch sizes (%d and %d) on their batch axes", fixedBy, v.Name, s.settings.Model, s.settings.BatchSize, fixed)
		}
	}
	return nil
}

// runPipeline runs the passes up to until, printing config warnings and
// notices to stderr.
func runPipeline(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, u *passes.Unit, until string) ([]passes.Timing, error) {
	u.Model, u.Config, u.Palette, u.Prepare, u.Algorithms = s.model, s.quant, s.palette, opts.Prepare, s.algorithms
	// The algorithms' per-layer figures are read in the report only.
	u.SkipFigures = s.settings.Report == ""
	u.Prepare.Target = s.target
	u.Prepare.Progress = passes.NewWeightProgressReporter(opts.IO.ErrOut, opts.IO.IsTerminal, slog.Default()).Report
	format, err := finalize.ParseFormat(opts.Format)
	if err != nil {
		return nil, Usagef("--format: %v", err)
	}
	u.Write = finalize.Options{Opset: opts.Opset, Format: format, FP4AsFP8: opts.FP4AsFP8, Threads: s.settings.Threads, Scratch: s.scratch, RandomData: s.randomData}
	if u.Write.Threads == 0 {
		u.Write.Threads = goruntime.NumCPU()
	}
	for _, n := range s.notices {
		fmt.Fprintf(opts.IO.ErrOut, "notice: %s\n", n.Error())
	}
	if ctx == nil {
		ctx = context.Background()
	}
	timings, err := passes.Run(ctx, u, passes.RunOptions{Until: until, DumpAfter: opts.DumpAfter, Dump: opts.IO.ErrOut, Check: opts.Check})
	if u.Resolution != nil {
		for _, w := range u.Resolution.Warnings {
			fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", w.Error())
		}
	}
	if err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			return timings, configUsageError(err)
		}
		var missing *passes.MissingDataError
		if errors.As(err, &missing) {
			return timings, &UsageError{Err: err}
		}
		return timings, err
	}
	return timings, nil
}

func runQuantize(ctx context.Context, opts *quantizeOptions) error {
	s, err := setupPipeline(opts, nil, func(st config.Settings) []output {
		return []output{{"-o", outputPath(st), opts.IO.Out}, {"--report", st.Report, nil}, {"--profile-out", opts.Profile.Out, nil},
			{"--emit-config", opts.Search.EmitConfig, nil}}
	})
	if err != nil {
		return err
	}
	defer s.outputs.Discard()
	if err := s.resolveBatchSize(); err != nil {
		return err
	}
	var source calibrate.Source
	if len(s.settings.Data) > 0 || s.settings.Images != nil {
		// The data path calibrate uses (calibrate.go), so that quantize and
		// calibrate + finalize --stats observe the same samples.
		src, err := openCalibrationData(s, false)
		if err != nil {
			return err
		}
		defer src.Close()
		source = src
	}
	if err := opts.Search.check(); err != nil {
		return err
	}
	if opts.Search.active() {
		switch {
		case source == nil:
			return Usagef("%s needs calibration data (--data) to hold samples out of", opts.Search.targetFlag())
		case opts.EvalSamples == 0:
			opts.EvalSamples = defaultSensitivityEvalSamples
		}
	}
	eval, calibSamples, err := newQuantizeEval(opts.EvalSamples, opts.MinSQNR, source, s.settings.Samples)
	if err != nil {
		return err
	}
	prof, err := opts.Profile.start(s.settings.Engine)
	if err != nil {
		return err
	}
	s.warnShortData(opts.IO.ErrOut, source, calibSamples)
	// newUnit is a pipeline calibrating on the calibration samples; the
	// accuracy search quantizes its candidates with more of them.
	newUnit := func(prof *runtime.Profile) *passes.Unit {
		u := &passes.Unit{}
		if source != nil {
			u.Data = s.algorithmData(opts.IO, source, calibSamples)
			u.Calibrate = passes.EngineCalibrator(s.settings.Engine, runtime.Options{Threads: s.settings.Threads, Profile: prof}, source,
				calibrate.Options{Samples: calibSamples, BatchSize: s.settings.BatchSize}, nil)
		}
		return u
	}
	u := newUnit(prof)
	// The search writes raised weights from their float values.
	u.KeepFloatWeights = opts.Search.active() || opts.Search.EmitConfig != ""
	out := outputPath(s.settings)
	if opts.Search.TargetSQNR == nil && opts.Search.EmitConfig == "" {
		// The one model this run writes keeps its quantized weights on
		// disk until it is saved: memory stays bounded by the largest
		// tensor, not the model.
		if s.scratch, err = onnxgraph.NewScratch(filepath.Dir(s.outputs.Staged(out))); err != nil {
			return err
		}
		defer s.scratch.Close()
	}
	timings, err := runPipeline(ctx, opts, s, u, "")
	s.scratch = nil
	if err != nil {
		if source == nil && u.Plan != nil && len(u.Plan.Observed()) > 0 {
			return Usagef("%v: give --data (calibration.data in the config), or use a weight-only preset (--preset w8 or w4)", err)
		}
		return err
	}
	var search *searchResult
	if opts.Search.active() || opts.Search.EmitConfig != "" {
		sp := sensitivitySplit{grouping: compare.GroupByTensor, calibSamples: calibSamples, eval: eval, source: source, opset: opts.Opset}
		search, err = searchAccuracy(ctx, opts, s, u, func() *passes.Unit { return newUnit(nil) }, sp)
		if err != nil {
			return err
		}
		u = search.Unit
		if opts.Search.EmitConfig != "" {
			if err := onnxgraph.WriteFileAtomic(s.outputs.Staged(opts.Search.EmitConfig), search.Config); err != nil {
				return err
			}
		}
	}
	if err := u.Result.Model.Save(s.outputs.Staged(out), onnxgraph.SaveOptions{}); err != nil {
		return err
	}
	profile := opts.Profile
	profile.Out = s.outputs.Staged(profile.Out)
	if err := profile.finish(opts.IO.ErrOut, prof); err != nil {
		return err
	}
	rep := newReport(s, u, timings, out)
	rep.reportPath = s.settings.Report
	if search != nil && opts.Search.active() {
		rep.Search = search.report(&opts.Search)
	}
	var gateErr error
	if eval != nil {
		if rep.Eval, gateErr = eval.run(ctx, opts.IO.ErrOut, s.settings.Engine, s.settings.Threads, s.settings.BatchSize, s.model, u.Result.Model, source); rep.Eval == nil {
			return gateErr
		}
	}
	if s.settings.Report != "" {
		if err := writeReportFile(s.outputs.Staged(s.settings.Report), rep); err != nil {
			return err
		}
	}
	if err := s.outputs.Commit(); err != nil {
		return err
	}
	if err := writeReportTable(opts.IO.ErrOut, rep); err != nil {
		return err
	}
	if err := quantizeBench(ctx, opts, source, s.model, out, u.Result.Model); err != nil {
		return err
	}
	if search != nil && opts.Search.active() && !search.Met && gateErr == nil {
		gateErr = searchGateError(&opts.Search, search)
	}
	return gateErr
}

func modelInputs(m *onnxgraph.Model) []runtime.IOInfo {
	var out []runtime.IOInfo
	for _, v := range m.Graph.Inputs {
		info := runtime.IOInfo{Name: v.Name, DType: v.DType()}
		if dims, ok := v.Shape(); ok {
			info.Shape = make([]int64, len(dims))
			info.DimParams = make([]string, len(dims))
			for i, d := range dims {
				info.Shape[i], info.DimParams[i] = d.Size, d.Param
			}
		}
		out = append(out, info)
	}
	return out
}

// outputPath is the settings' output, or MODEL.quant.onnx beside the model.
func outputPath(st config.Settings) string {
	if st.Output != "" {
		return st.Output
	}
	return strings.TrimSuffix(st.Model, filepath.Ext(st.Model)) + ".quant.onnx"
}

// report is the JSON document of --report.
type report struct {
	Model     string          `json:"model"`
	Output    string          `json:"output"`
	Opset     int64           `json:"opset"`
	IRVersion int64           `json:"ir_version"`
	Tensors   []reportTensor  `json:"tensors"`
	Skipped   []plan.Skip     `json:"skipped"`
	Notes     []string        `json:"notes"`
	Passes    []passes.Timing `json:"passes"`
	PeakRSS   int64           `json:"peak_rss_bytes"`
	Counts    map[string]int  `json:"counts"`
	Naming    string          `json:"value_naming"`
	// RandomData is set when the activation ranges came from random inputs
	// (calibrate --random-data): the model is only good for testing.
	RandomData bool `json:"random_data,omitempty"`
	// Algorithms lists what each post-training algorithm did, node by node.
	Algorithms []passes.LayerReport `json:"algorithms,omitempty"`
	// Eval is the comparison on --eval-samples held-out samples.
	Eval *compare.Report `json:"eval,omitempty"`
	// Search is the --target-sqnr search's trace.
	Search *searchReport `json:"search,omitempty"`
	// Deploy is the deployability lint for the target (lint.go).
	Deploy *deployability `json:"deployability,omitempty"`
	// Palettes are the palettized weights (kmeans_palettization_config).
	Palettes []reportPalette `json:"palettized,omitempty"`
	// Size is the model's size before and after.
	Size *fileSizes `json:"file_size,omitempty"`

	// reportPath is where --report writes this report ("" when not asked).
	reportPath string
	// inputs are the model's graph inputs, for writeNonFinite.
	inputs map[string]bool
}

type reportTensor struct {
	Value    string      `json:"value"`
	Role     string      `json:"role"`
	Spec     string      `json:"spec"`
	Rule     config.Rule `json:"rule"`
	Nodes    []string    `json:"nodes"`
	Shared   string      `json:"shared_with,omitempty"`
	Scales   int         `json:"scales"`
	ScaleMin float32     `json:"scale_min"`
	ScaleMax float32     `json:"scale_max"`
	ZPMin    int32       `json:"zero_point_min"`
	ZPMax    int32       `json:"zero_point_max"`
	Observed *plan.Range `json:"observed,omitempty"`
	Fixed    *plan.Range `json:"fixed,omitempty"`
	Headroom bool        `json:"headroom,omitempty"`
	// WideHeadroom: the range widened away from zero (a grid of 16 bits
	// or more, plan.TensorPlan.WideHeadroom).
	WideHeadroom bool  `json:"wide_headroom,omitempty"`
	KeepMax      bool  `json:"keep_max,omitempty"`
	NaN          int64 `json:"nan,omitempty"`
	Inf          int64 `json:"inf,omitempty"`
	Axis         int   `json:"axis"`
	BlockSize    int   `json:"block_size,omitempty"`
}

func newReport(s *pipelineSetup, u *passes.Unit, timings []passes.Timing, out string) *report {
	r := &report{Model: s.settings.Model, Output: out, Opset: u.Result.Opset, IRVersion: u.Result.IRVersion,
		Skipped: append([]plan.Skip{}, u.Plan.Skipped...), Notes: append(append([]string{}, u.Plan.Notes...), u.Result.Notes...),
		Passes: timings, PeakRSS: peakRSS(), Counts: map[string]int{}, Naming: finalize.ValueNaming}
	for _, t := range u.Result.Tensors {
		rt := reportTensor{Value: t.Value, Role: t.Role.String(), Spec: t.SpecString(), Rule: t.Rule, Nodes: t.Nodes,
			Shared: t.SharedWith, Fixed: t.Fixed, Headroom: t.Headroom, WideHeadroom: t.WideHeadroom, KeepMax: t.KeepMax, Axis: t.Axis, BlockSize: t.BlockSize}
		if p := t.Params; p != nil && len(p.Scales) > 0 {
			rt.Scales, rt.Observed, rt.NaN, rt.Inf = len(p.Scales), p.Observed, p.NaN, p.Inf
			rt.ScaleMin, rt.ScaleMax = p.Scales[0], p.Scales[0]
			for _, v := range p.Scales {
				rt.ScaleMin, rt.ScaleMax = min(rt.ScaleMin, v), max(rt.ScaleMax, v)
			}
			rt.ZPMin, rt.ZPMax = p.ZeroPoints[0], p.ZeroPoints[0]
			for _, z := range p.ZeroPoints {
				rt.ZPMin, rt.ZPMax = min(rt.ZPMin, z), max(rt.ZPMax, z)
			}
		}
		r.Tensors = append(r.Tensors, rt)
		r.Counts[rt.Role]++
	}
	r.Counts["skipped_nodes"] = len(r.Skipped)
	r.inputs = map[string]bool{}
	for _, v := range u.Model.Graph.Inputs {
		r.inputs[v.Name] = true
	}
	r.Deploy = lintModel(s.target, u.Model, u.Result.Model, u.Plan)
	r.Algorithms = u.Layers
	if r.Palettes = reportPalettes(u.Result.Palettes); r.Palettes != nil {
		// The model is still in its staging directory (outputs.go).
		r.Size = &fileSizes{Before: modelBytes(s.settings.Model, s.model), After: modelBytes(s.outputs.Staged(out), u.Result.Model)}
	}
	return r
}

// peakRSS is the process's peak resident set size (VmHWM), 0 when the
// system does not report it.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

func writeReportFile(path string, r *report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return onnxgraph.WriteFileAtomic(path, append(b, '\n'))
}

// writeNonFinite warns of the activations whose calibration values held
// NaN or ±Inf, which their ranges leave out, naming a model input that
// held them (the data itself), else the value with the fewest (nearest
// to where they arose: the layers after it spread them).
func writeNonFinite(w io.Writer, r *report) {
	var first *reportTensor
	n := 0
	for i := range r.Tensors {
		t := &r.Tensors[i]
		if t.NaN+t.Inf == 0 {
			continue
		}
		n++
		switch {
		case first == nil:
			first = t
		case r.inputs[t.Value] != r.inputs[first.Value]:
			if r.inputs[t.Value] {
				first = t
			}
		case t.NaN+t.Inf < first.NaN+first.Inf:
			first = t
		}
	}
	if first == nil {
		return
	}
	where := fmt.Sprintf("value %q", first.Value)
	if r.inputs[first.Value] {
		where = fmt.Sprintf("the calibration data of input %q", first.Value)
	}
	fmt.Fprintf(w, "warning: %d activation(s) saw NaN or ±Inf values in calibration, left out of their ranges; %s held %d NaN and %d ±Inf (the report counts them per tensor)\n",
		n, where, first.NaN, first.Inf)
}

// writeReportTable prints the short summary to stderr.
func writeReportTable(w io.Writer, r *report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "wrote %s (opset %d, IR %d)\n", r.Output, r.Opset, r.IRVersion)
	if r.RandomData {
		fmt.Fprintln(tw, "warning: activation ranges come from random data (calibrate --random-data): for testing only")
	}
	writeNonFinite(tw, r)
	fmt.Fprintf(tw, "quantized\tweights %d\tbiases %d\tactivations %d\tskipped nodes %d\n",
		r.Counts["weight"], r.Counts["bias"], r.Counts["activation"], len(r.Skipped))
	writePaletteSummary(tw, r)
	for _, t := range r.Passes {
		fmt.Fprintf(tw, "pass %s\t%.3fs\n", t.Pass, t.Seconds)
	}
	for i, n := range r.Notes {
		if i == maxTableSkips && len(r.Notes) > maxTableSkips+1 {
			fmt.Fprintf(tw, "note: ... and %d more in the JSON report (--report)\n", len(r.Notes)-i)
			break
		}
		fmt.Fprintf(tw, "note: %s\n", n)
	}
	if r.Counts["activation"] == 0 && r.Counts["weight"] > 0 {
		// Weight-only: what was quantized, not every node without a weight.
		writeWeightOnly(tw, r)
		return tw.Flush()
	}
	for i, s := range r.Skipped {
		if i == maxTableSkips && len(r.Skipped) > maxTableSkips+1 {
			more := "the JSON report (--report) lists them all"
			if r.reportPath != "" {
				more = r.reportPath + " lists them all"
			}
			fmt.Fprintf(tw, "skipped ... and %d more\t%s\n", len(r.Skipped)-i, more)
			break
		}
		fmt.Fprintf(tw, "skipped %s (%s)\t%s\n", s.Node, s.OpType, s.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Deploy != nil {
		r.Deploy.write(w, r.reportPath)
	}
	return nil
}

// writeWeightOnly lists the quantized weights by spec (tensors, nodes)
// and counts the nodes left in float, which the JSON report lists.
func writeWeightOnly(tw io.Writer, r *report) {
	type group struct{ tensors, nodes int }
	groups := map[string]*group{}
	var specs []string
	for _, t := range r.Tensors {
		if t.Role != "weight" {
			continue
		}
		g := groups[t.Spec]
		if g == nil {
			g = &group{}
			groups[t.Spec] = g
			specs = append(specs, t.Spec)
		}
		g.tensors++
		g.nodes += len(t.Nodes)
	}
	sort.Strings(specs)
	for _, sp := range specs {
		fmt.Fprintf(tw, "weights %s	%d tensors read by %d nodes\n", sp, groups[sp].tensors, groups[sp].nodes)
	}
	more := "the JSON report (--report) lists them"
	if r.reportPath != "" {
		more = r.reportPath + " lists them"
	}
	fmt.Fprintf(tw, "left in float	%d nodes without a quantized weight; %s\n", len(r.Skipped), more)
}

// maxTableSkips caps the skipped nodes the stderr summary lists; a large
// model can leave hundreds of nodes in float, and the report keeps them all.
const maxTableSkips = 20

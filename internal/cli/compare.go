package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

type compareOptions struct {
	IO        *IO
	Reference string
	Candidate string
	Data      []string
	Engine    string
	Threads   int
	Samples   int
	BatchSize int
	Labels    string
	Format    string
	PerLayer  bool
	HTML      string
	// Slices are the --slice values as given.
	Slices []string
	// MinSQNR and MinTop1 are nil when the gate is not set.
	MinSQNR *float64
	MinTop1 *float64
}

// NewCmdCompare builds `coreaiq compare REFERENCE.onnx CANDIDATE.onnx`.
func NewCmdCompare(streams *IO, runF func(*compareOptions) error) *cobra.Command {
	opts := &compareOptions{IO: streams}
	var minTop1 *string
	cmd := &cobra.Command{
		Use:   "compare REFERENCE.onnx CANDIDATE.onnx --data NAME=FILE.npy|FILE.npz|DIR ...",
		Short: "Measure how closely a (quantized) model follows its reference: SQNR, agreement, per-layer error, quality gates",
		Long: `Runs both models on the same data and reports, per output, the SQNR in dB
(20·log10(‖x‖/‖x−x̂‖) over all samples), cosine similarity, maximum and mean
absolute error and, for [batch, classes] outputs, top-1 and top-5 agreement.
--per-layer pairs each quantized activation of a QDQ candidate with its float
value in the reference and lists them worst first. --min-sqnr and
--min-top1-agreement turn the figures into gates: the command exits with
status 3 when one fails.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Reference, opts.Candidate = args[0], args[1]
			if opts.Format != "table" && opts.Format != "json" {
				return Usagef("--format %q: want table or json", opts.Format)
			}
			if len(opts.Data) == 0 {
				return Usagef("--data is required: give NAME=FILE.npy per model input (FILE.npy alone for a single-input model), an .npz archive or a test_data_set directory")
			}
			if opts.Samples < 0 || opts.BatchSize < 0 || opts.Threads < 0 {
				return Usagef("--samples, --batch-size and --threads take 0 or more")
			}
			if opts.MinSQNR != nil && math.IsNaN(*opts.MinSQNR) {
				return Usagef("--min-sqnr: want a number of dB")
			}
			if minTop1 != nil {
				p, err := parsePercent(*minTop1)
				if err != nil {
					return err
				}
				opts.MinTop1 = &p
			}
			if runF != nil {
				return runF(opts)
			}
			return runCompare(cmd, opts)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&opts.Data, "data", nil, "input data, samples on axis 0 unless :axis=K says otherwise: NAME=FILE.npy[:axis=K] per input (FILE.npy alone for a single-input model), FILE.npz or a test_data_set directory (repeatable)")
	f.StringVar(&opts.Engine, "engine", "go", "inference engine: go (built-in) or ort (ONNX Runtime, in builds with -tags ort)")
	f.IntVar(&opts.Threads, "threads", 0, "threads per run (0: one per CPU)")
	f.IntVar(&opts.Samples, "samples", 0, "use only the first N samples (0: all)")
	f.IntVar(&opts.BatchSize, "batch-size", 0, "samples per run (0: the model's fixed batch size, else 8)")
	f.StringVar(&opts.Labels, "labels", "", "class labels (.npy, one per sample): also report each model's top-1 accuracy")
	f.StringVar(&opts.Format, "format", "table", "output format: table or json")
	f.BoolVar(&opts.PerLayer, "per-layer", false, "compare every quantized activation with its float counterpart, worst first")
	f.StringArrayVar(&opts.Slices, "slice", nil, "also compare named ranges of an output on their own, as OUTPUT:AXIS:NAME=FROM-TO[,NAME=FROM-TO...] (indices FROM to TO-1 along AXIS; repeatable), e.g. output:2:boxes=0-4,objectness=4-5,classes=5-85 for a detector whose rows hold boxes and scores side by side")
	f.StringVar(&opts.HTML, "html", "", "also write a self-contained HTML report (per-layer chart and histograms) to this file")
	optFloat64(f, &opts.MinSQNR, "min-sqnr", 0, "quality gate: exit 3 when an output's SQNR is below this many dB")
	optString(f, &minTop1, "min-top1-agreement", "", "", "quality gate: exit 3 when a [batch, classes] output's top-1 agreement is below this percentage (e.g. 99 or 99%)")
	return cmd
}

// parsePercent reads a percentage: "99", "99%" or "99.5". A value in (0, 1)
// is refused because it is almost surely a fraction meant as a percentage.
func parsePercent(s string) (float64, error) {
	p, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	switch {
	case err != nil || math.IsNaN(p):
		return 0, Usagef("--min-top1-agreement %q: want a percentage such as 99 or 99.5%%", s)
	case p < 0 || p > 100:
		return 0, Usagef("--min-top1-agreement %q: want a percentage from 0 to 100", s)
	case p > 0 && p < 1:
		return 0, Usagef("--min-top1-agreement %q is a percentage, not a fraction: for %g%% write %g", s, p*100, p*100)
	}
	return p, nil
}

func runCompare(cmd *cobra.Command, opts *compareOptions) error {
	ctx := cmd.Context()
	plan, err := planOutputs(append([]string{opts.Reference, opts.Candidate, opts.Labels}, dataEntryFiles(opts.Data)...),
		output{Flag: "--html", Path: opts.HTML})
	if err != nil {
		return err
	}
	defer plan.Discard()
	refModel, err := loadModel(opts.Reference)
	if err != nil {
		return err
	}
	candModel, err := loadModel(opts.Candidate)
	if err != nil {
		return err
	}
	ref, err := openSession(opts.Engine, opts.Reference, refModel, opts.Threads)
	if err != nil {
		return err
	}
	defer ref.Close()
	cand, err := openSession(opts.Engine, opts.Candidate, candModel, opts.Threads)
	if err != nil {
		return err
	}
	defer cand.Close()
	if err := sameInputs(ref, cand); err != nil {
		return err
	}

	src, err := openCompareData(opts.Data, ref.Inputs())
	if err != nil {
		return err
	}
	defer src.Close()
	batch := opts.BatchSize
	if batch == 0 {
		batch = fixedBatch(ref.Inputs())
	}
	samples := src.Samples()
	if opts.Samples > 0 {
		samples = min(samples, opts.Samples)
	}
	data, err := compare.SourceBatches(src, 0, samples, batch)
	if err != nil {
		return &UsageError{Err: fmt.Errorf("--data: %w", err)}
	}
	var copts compare.Options
	for _, s := range opts.Slices {
		sl, err := compare.ParseSlices(s)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("--slice: %w", err)}
		}
		if err := checkSlices(refModel, sl); err != nil {
			return &UsageError{Err: fmt.Errorf("--slice %s: %w", s, err)}
		}
		copts.Slices = append(copts.Slices, sl...)
	}
	if opts.Labels != "" {
		lt, err := npy.ReadNPYFile(opts.Labels)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("--labels: %w", err)}
		}
		labels, err := compare.LabelsOf(lt)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("--labels %s: %w", opts.Labels, err)}
		}
		if len(labels) < samples {
			return Usagef("--labels %s holds %d labels for %d samples", opts.Labels, len(labels), samples)
		}
		copts.Labels = labels[:samples]
	}
	if opts.PerLayer || opts.HTML != "" {
		p := compare.PairActivations(refModel, candModel)
		copts.Layers = &p
	}
	if opts.IO.IsTerminal {
		copts.Progress = func(n int) { fmt.Fprintf(opts.IO.ErrOut, "\rcompared %d/%d samples", n, samples) }
	}
	r, err := compare.Run(ctx, ref, cand, data, copts)
	if opts.IO.IsTerminal {
		fmt.Fprintln(opts.IO.ErrOut)
	}
	if err != nil {
		var inErr *runtime.InputError
		if errors.As(err, &inErr) {
			return &UsageError{Err: fmt.Errorf("--data: %w", err)}
		}
		return err
	}
	r.Reference, r.Candidate = opts.Reference, opts.Candidate
	violations, err := r.Check(compare.Gates{MinSQNR: opts.MinSQNR, MinTop1Agreement: opts.MinTop1})
	if err != nil {
		return &UsageError{Err: fmt.Errorf("--min-top1-agreement: %w", err)}
	}
	if opts.HTML != "" {
		if err := r.WriteHTMLFile(plan.Staged(opts.HTML)); err != nil {
			return err
		}
		if err := plan.Commit(); err != nil {
			return err
		}
	}
	if opts.PerLayer {
		if r.Palettized, err = compare.PalettizedWeights(candModel); err != nil {
			return err
		}
	}
	printed := *r
	if !opts.PerLayer {
		printed.Layers, printed.Unpaired, printed.WeightDequantizers = nil, nil, 0
	}
	if opts.Format == "json" {
		err = printed.WriteJSON(opts.IO.Out)
	} else {
		err = printed.WriteTable(opts.IO.Out)
	}
	if err != nil {
		return err
	}
	if len(violations) > 0 {
		return &GateError{Err: compare.GateError(violations)}
	}
	return nil
}

// openSession compiles a model, reporting unsupported ops and missing
// engines as usage errors (exit 2) naming the file.
func openSession(engine, path string, m *onnxgraph.Model, threads int) (runtime.Session, error) {
	s, err := runtime.Open(engine, m, runtime.Options{Threads: threads})
	if err != nil {
		var unsup *runtime.UnsupportedError
		var unavail *runtime.ErrEngineUnavailable
		if errors.As(err, &unsup) || errors.As(err, &unavail) {
			return nil, &UsageError{Err: fmt.Errorf("%s: %w", path, err)}
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// sameInputs checks that both models take the same inputs: they are fed
// the same batches.
func sameInputs(ref, cand runtime.Session) error {
	names := func(s runtime.Session) []string {
		var n []string
		for _, in := range s.Inputs() {
			n = append(n, in.Name)
		}
		slices.Sort(n)
		return n
	}
	a, b := names(ref), names(cand)
	if !slices.Equal(a, b) {
		return Usagef("the models take different inputs: reference %s, candidate %s", strings.Join(a, ", "), strings.Join(b, ", "))
	}
	return nil
}

// fixedBatch is the batch size the model's inputs fix on axis 0, or 8 when
// it is symbolic.
func fixedBatch(infos []runtime.IOInfo) int {
	for _, in := range infos {
		if len(in.Shape) > 0 && in.Shape[0] > 0 {
			return int(in.Shape[0])
		}
	}
	return 8
}

// openCompareData opens the --data flags as a streaming source, as
// quantize reads its calibration data: NAME=FILE.npy[:axis=K] per model
// input (FILE.npy alone for a single-input model), an .npz archive or an
// ONNX test_data_set directory (the ONNX model zoo ships its models with
// them).
func openCompareData(flags []string, infos []runtime.IOInfo) (calibrate.Source, error) {
	names := make([]string, len(infos))
	for i, in := range infos {
		names[i] = in.Name
	}
	for _, f := range flags {
		e, err := config.ParseDataEntry(f)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		switch {
		case e.Name != "" && !slices.Contains(names, e.Name):
			return nil, Usagef("--data %q: the model has no input %q (inputs: %s)", f, e.Name, strings.Join(names, ", "))
		case e.Name == "" && len(infos) != 1 && strings.EqualFold(filepath.Ext(e.File), ".npy"):
			return nil, Usagef("--data %q: want NAME=FILE.npy (model inputs: %s)", f, strings.Join(names, ", "))
		}
	}
	src, err := calibrate.Open(infos, flags, nil)
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("--data: %w", err)}
	}
	return src, nil
}

// quantizeEval is `quantize --eval-samples N --min-sqnr DB`: the last N
// samples of the calibration data are held out of calibration, and the
// quantized model is compared with the float one on them.
type quantizeEval struct {
	start, end int
	gates      compare.Gates
}

// addEvalFlags adds quantize's evaluation flags.
func addEvalFlags(f *pflag.FlagSet, opts *quantizeOptions) {
	f.IntVar(&opts.EvalSamples, "eval-samples", 0, "hold out the last N calibration samples and report each output's SQNR on them after quantizing")
	optFloat64(f, &opts.MinSQNR, "min-sqnr", 0, "quality gate on the held-out samples: exit 3 when an output's SQNR is below this many dB (needs --eval-samples)")
}

// newQuantizeEval checks the evaluation flags (n held-out samples, the
// SQNR gate or nil) and splits src: it returns the
// evaluation (nil without --eval-samples) and the number of calibration
// samples left for calibration (calibSamples, or fewer so that they do not
// overlap the held-out ones).
func newQuantizeEval(n int, minSQNR *float64, src calibrate.Source, calibSamples int) (*quantizeEval, int, error) {
	gate := minSQNR != nil
	switch {
	case n < 0:
		return nil, 0, Usagef("--eval-samples %d: want 0 or more", n)
	case n == 0 && gate:
		return nil, 0, Usagef("--min-sqnr needs held-out samples: give --eval-samples N")
	case n == 0:
		return nil, calibSamples, nil
	case src == nil:
		return nil, 0, Usagef("--eval-samples needs calibration data (--data) to hold samples out of")
	case n >= src.Samples():
		return nil, 0, Usagef("--eval-samples %d leaves no calibration sample: the data holds %d", n, src.Samples())
	}
	e := &quantizeEval{start: src.Samples() - n, end: src.Samples()}
	e.gates.MinSQNR = minSQNR
	if calibSamples <= 0 || calibSamples > e.start {
		calibSamples = e.start
	}
	return e, calibSamples, nil
}

// run compares the quantized model with the float one on the held-out
// samples, prints the per-output table to w and returns the report; a
// failed gate is a *GateError, returned after the report is complete.
func (e *quantizeEval) run(ctx context.Context, w io.Writer, engine string, threads, batch int, float, quantized *onnxgraph.Model, src calibrate.Source) (*compare.Report, error) {
	if batch <= 0 {
		batch = fixedBatch(modelInputs(float))
	}
	data, err := compare.SourceBatches(src, e.start, e.end, batch)
	if err != nil {
		return nil, err
	}
	r, err := compare.Evaluate(ctx, engine, float, quantized, threads, data, e.gates)
	if err != nil {
		return nil, fmt.Errorf("evaluating the quantized model on %d held-out samples: %w", e.end-e.start, err)
	}
	fmt.Fprintf(w, "evaluation on %d held-out samples (%d to %d)\n", e.end-e.start, e.start, e.end-1)
	if err := r.WriteOutputs(w); err != nil {
		return nil, err
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "FAILED  %s\n", v.Message)
	}
	if err := compare.GateError(r.Violations); err != nil {
		return r, &GateError{Err: err}
	}
	return r, nil
}

// checkSlices refuses a slice of an output the reference model does not
// have, or on an axis or past a length its declared shape rules out.
func checkSlices(m *onnxgraph.Model, sls []compare.Slice) error {
	for _, sl := range sls {
		i := slices.IndexFunc(m.Graph.Outputs, func(v *onnxgraph.Value) bool { return v.Name == sl.Output })
		if i < 0 {
			return fmt.Errorf("the reference model has no output %q", sl.Output)
		}
		dims, ok := m.Graph.Outputs[i].Shape()
		if !ok {
			continue
		}
		axis := sl.Axis
		if axis < 0 {
			axis += len(dims)
		}
		if axis < 0 || axis >= len(dims) {
			return fmt.Errorf("output %q has rank %d: axis %d is out of range", sl.Output, len(dims), sl.Axis)
		}
		if n := dims[axis].Size; n > 0 && int64(sl.To) > n {
			return fmt.Errorf("output %q: %q ends at %d, past axis %d's length %d", sl.Output, sl.Name, sl.To, sl.Axis, n)
		}
	}
	return nil
}

package cli

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

type sensitivityOptions struct {
	quantizeOptions
	Group   string
	Out     string
	Table   string
	NoCache bool
	Shard   string
}

// defaultSensitivityEvalSamples is the number of held-out samples the
// analysis measures on when --eval-samples is not given.
const defaultSensitivityEvalSamples = 4

// NewCmdSensitivity builds `coreaiq sensitivity`: the output error each
// group of quantization points causes, quantized alone and left in float.
func NewCmdSensitivity(streams *IO, runF func(*sensitivityOptions) error) *cobra.Command {
	opts := &sensitivityOptions{quantizeOptions: quantizeOptions{IO: streams}}
	cmd := &cobra.Command{
		Use:   "sensitivity --config FILE [--model PATH] [--data PATH ...] [--group node|module|tensor] [--shard i/n] [-o FILE]",
		Short: "Rank groups of quantization points by the output error they cause",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runSensitivity(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Config, "config", "", "config file (tool settings and quantization config)")
	optString(f, &opts.Settings.Model, "model", "", "", "model to analyse (default: the config's model)")
	optString(f, &opts.Settings.Preset, "preset", "", "", "quantization preset (replaces the config's quantization_config and algorithms): "+strings.Join(config.PresetNames(), ", "))
	f.StringSliceVar(&opts.Algorithms, "algorithms", nil, "turn on post-training algorithms with their defaults, on top of the config's algorithms block: "+strings.Join(config.AlgorithmNames(), ", "))
	addPrepareFlags(f, &opts.Prepare)
	addTargetFlag(f, &opts.Settings)
	addCalibrationFlags(f, &opts.Settings, "calibration samples to use (the held-out samples excluded)")
	optString(f, &opts.Settings.Engine, "engine", "", config.DefaultEngine, "engine for calibration and measurement: go (built-in) or ort")
	optInt(f, &opts.Settings.Threads, "threads", 0, "engine threads (0: one per CPU)")
	f.IntVar(&opts.EvalSamples, "eval-samples", defaultSensitivityEvalSamples, "hold out the last N calibration samples and measure on them")
	f.StringVar(&opts.Group, "group", string(compare.GroupByNode), "group quantization points by node (the points of one node), module (its module scope) or tensor (one point with the points sharing its qparams and its weight's bias)")
	f.StringVar(&opts.Shard, "shard", "", "measure shard i of n (0-based) of the groups, as i/n; `coreaiq sensitivity merge` joins the shards")
	f.StringVarP(&opts.Out, "output", "o", "", "also write the ranking as JSON here")
	f.StringVar(&opts.Table, "format", "table", "stdout format: table or json")
	f.BoolVar(&opts.NoCache, "no-cache", false, "measure again even when a cached result exists")
	cmd.AddCommand(newCmdSensitivityMerge(streams))
	return cmd
}

// newCmdSensitivityMerge builds `coreaiq sensitivity merge`: the results of
// the shards of one analysis joined into the result of the whole.
func newCmdSensitivityMerge(streams *IO) *cobra.Command {
	opts := &sensitivityOptions{quantizeOptions: quantizeOptions{IO: streams}}
	merge := &cobra.Command{
		Use:   "merge SHARD.json ... [-o FILE]",
		Short: "Join the results of sensitivity --shard i/n into the whole analysis's",
		Long: "Join the -o files of `coreaiq sensitivity --shard i/n`, one per shard, all of one\n" +
			"analysis (same model, config, data and flags). The result is the one an unsharded\n" +
			"run writes, byte for byte.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSensitivityMerge(opts, args)
		},
	}
	merge.Flags().StringVarP(&opts.Out, "output", "o", "", "also write the merged ranking as JSON here")
	merge.Flags().StringVar(&opts.Table, "format", "table", "stdout format: table or json")
	return merge
}

func runSensitivityMerge(opts *sensitivityOptions, inputs []string) error {
	if opts.Table != "table" && opts.Table != "json" {
		return Usagef("--format %q: want table or json", opts.Table)
	}
	var out []output
	if opts.Out != "" {
		out = append(out, output{Flag: "-o", Path: opts.Out})
	}
	plan, err := planOutputs(inputs, out...)
	if err != nil {
		return err
	}
	defer plan.Discard()
	var parts []*compare.Sensitivity
	for _, p := range inputs {
		b, err := os.ReadFile(p)
		if err != nil {
			return &UsageError{Err: err}
		}
		var r compare.Sensitivity
		if err := json.Unmarshal(b, &r); err != nil {
			return Usagef("%s: not a sensitivity result: %v", p, err)
		}
		parts = append(parts, &r)
	}
	merged, err := compare.MergeShards(parts)
	if err != nil {
		return &UsageError{Err: err}
	}
	return writeSensitivity(opts, plan, merged)
}

func runSensitivity(ctx context.Context, opts *sensitivityOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	grouping, err := compare.ParseGroupBy(opts.Group)
	if err != nil {
		return Usagef("--group: %v", err)
	}
	if opts.Table != "table" && opts.Table != "json" {
		return Usagef("--format %q: want table or json", opts.Table)
	}
	if opts.EvalSamples < 1 {
		return Usagef("--eval-samples %d: the analysis needs at least one held-out sample", opts.EvalSamples)
	}
	var shard compare.Shard
	if opts.Shard != "" {
		if shard.Index, shard.Count, err = parseShard(opts.Shard); err != nil {
			return err
		}
	}
	s, err := setupPipeline(&opts.quantizeOptions, nil, func(config.Settings) []output {
		return []output{{Flag: "-o", Path: opts.Out}}
	})
	if err != nil {
		return err
	}
	defer s.outputs.Discard()
	if err := s.resolveBatchSize(); err != nil {
		return err
	}
	if len(s.settings.Data) == 0 && s.settings.Images == nil {
		return Usagef("no calibration data: give --data (calibration.data or calibration.images in the config)")
	}
	source, err := openCalibrationData(s, false)
	if err != nil {
		return err
	}
	defer source.Close()
	eval, calibSamples, err := newQuantizeEval(opts.EvalSamples, nil, source, s.settings.Samples)
	if err != nil {
		return err
	}
	s.warnShortData(opts.IO.ErrOut, source, calibSamples)
	opts.Format = "qdq"
	u := &passes.Unit{KeepFloatWeights: true}
	u.Data = &passes.AlgorithmData{Engine: s.settings.Engine, Runtime: runtime.Options{Threads: s.settings.Threads},
		Source: source, Samples: calibSamples, BatchSize: s.settings.BatchSize}
	calProg := calibrate.NewProgressReporter(opts.IO.ErrOut, opts.IO.IsTerminal, slog.Default())
	u.Calibrate = passes.EngineCalibrator(s.settings.Engine, runtime.Options{Threads: s.settings.Threads}, source,
		calibrate.Options{Samples: calibSamples, BatchSize: s.settings.BatchSize, Progress: calProg.Report}, nil)
	if _, err := runPipeline(ctx, &opts.quantizeOptions, s, u, "prepare"); err != nil {
		return err
	}

	r, err := cachedSensitivity(ctx, opts.IO, s, u, sensitivitySplit{grouping: grouping, calibSamples: calibSamples, eval: eval, source: source, opset: opts.Opset, shard: shard}, opts.NoCache, func() error {
		_, err := passes.Run(ctx, u, passes.RunOptions{})
		calProg.Done()
		if err != nil {
			var list config.ErrorList
			if errors.As(err, &list) {
				return configUsageError(err)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	return writeSensitivity(opts, s.outputs, r)
}

// sensitivitySplit is what a sensitivity analysis measures besides the
// pipeline: the grouping, the calibration and held-out samples, the opset.
type sensitivitySplit struct {
	grouping     compare.GroupBy
	calibSamples int
	eval         *quantizeEval
	source       calibrate.Source
	opset        int64
	shard        compare.Shard
}

// cachedSensitivity is the sensitivity analysis of u's plan, read from the
// user's cache when an earlier run measured the same inputs (noCache
// measures again) and cached otherwise. finish, when set, runs the passes
// u still needs; it is skipped on a cache hit.
// heldOut reads the held-out samples in batches of the run's batch size
// (the model's fixed batch when none is set).
func (sp sensitivitySplit) heldOut(s *pipelineSetup) (iter.Seq2[compare.Batch, error], error) {
	batch := s.settings.BatchSize
	if batch <= 0 {
		batch = fixedBatch(modelInputs(s.model))
	}
	return compare.SourceBatches(sp.source, sp.eval.start, sp.eval.end, batch)
}

func cachedSensitivity(ctx context.Context, streams *IO, s *pipelineSetup, u *passes.Unit, sp sensitivitySplit, noCache bool, finish func() error) (*compare.Sensitivity, error) {
	key, err := sensitivityKey(s, u, sp)
	if err != nil {
		return nil, err
	}
	cachePath := ""
	if !noCache {
		if dir, err := os.UserCacheDir(); err == nil {
			k := key
			if sp.shard.Count > 0 {
				k += fmt.Sprintf("-shard%dof%d", sp.shard.Index, sp.shard.Count)
			}
			cachePath = filepath.Join(dir, "coreaiq", "sensitivity", k+".json")
		} else {
			slog.Warn("no user cache directory: the result is not cached", "err", err)
		}
	}
	if cachePath != "" {
		if b, err := os.ReadFile(cachePath); err == nil {
			var r compare.Sensitivity
			if err := json.Unmarshal(b, &r); err != nil {
				slog.Warn("unreadable cached sensitivity result: measuring again", "path", cachePath, "err", err)
			} else {
				fmt.Fprintf(streams.ErrOut, "sensitivity: cached result %s (--no-cache measures again)\n", cachePath)
				return &r, nil
			}
		}
	}
	if finish != nil {
		if err := finish(); err != nil {
			return nil, err
		}
	}
	data, err := sp.heldOut(s)
	if err != nil {
		return nil, err
	}
	prog := newSensitivityProgress(streams)
	r, err := compare.Analyze(ctx, compare.SensitivityInput{
		Float: s.model, Prepared: u.Model, Plan: u.Plan, Write: u.Write, ModelFor: func(pl *plan.Plan) (*onnxgraph.Model, error) {
			float := floatWeights(u.Plan, pl)
			m, err := passes.WithUncorrectedBiases(u, float)
			if err != nil {
				return nil, err
			}
			return passes.WithUnroundedWeights(u, m, float)
		},
		Data: data, Engine: s.settings.Engine, Threads: s.settings.Threads, Grouping: sp.grouping, Shard: sp.shard, Progress: prog.report,
	})
	prog.done()
	if err != nil {
		return nil, err
	}
	r.Key = key
	// The figures are used in their JSON form (DB rounds to 4 decimals),
	// the form the cache keeps, so that a cached run prints the same bytes
	// and makes the same choices as the run that measured.
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if cachePath != "" {
		if err := os.MkdirAll(filepath.Dir(cachePath), 0o755); err != nil {
			return nil, err
		}
		if err := onnxgraph.WriteFileAtomic(cachePath, b); err != nil {
			return nil, err
		}
	}
	var rounded compare.Sensitivity
	if err := json.Unmarshal(b, &rounded); err != nil {
		return nil, err
	}
	return &rounded, nil
}

// sensitivityKey hashes everything the analysis depends on: the model's
// bytes, the prepared plan (the resolved config with its weight qparams),
// the algorithms, the data of every sample used, the sample split, the
// grouping, the engine and its kernel set.
func sensitivityKey(s *pipelineSetup, u *passes.Unit, sp sensitivitySplit) (string, error) {
	grouping, calibSamples, eval, src := sp.grouping, sp.calibSamples, sp.eval, sp.source
	h := sha256.New()
	// The version changes with what a measurement writes: 3 writes a
	// weight GPTQ or AdaRound rounded from its float values.
	fmt.Fprintf(h, "coreaiq sensitivity 3\n")
	model, err := fileSHA256(s.settings.Model)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "model %s\n", model)
	writePlanKey(h, u.Plan)
	alg, err := json.Marshal(s.algorithms)
	if err != nil {
		return "", err
	}
	h.Write(alg)
	// The prepare options as given; the target is hashed by name.
	p := u.Prepare
	p.Target, p.Progress = nil, nil
	fmt.Fprintf(h, "\nprepare %+v target %s", p, s.target.Name)
	fmt.Fprintf(h, "\ncalibrate %d batch %d eval %d-%d group %s engine %s kernels %s opset %d\n",
		calibSamples, s.settings.BatchSize, eval.start, eval.end, grouping, s.settings.Engine, kernels.ActiveSet(), sp.opset)
	if len(u.UncorrectedBiases) > 0 {
		// The analysis writes a layer whose weight it leaves in float
		// with its bias as it was before bias correction.
		fmt.Fprintf(h, "uncorrected biases %d\n", len(u.UncorrectedBiases))
	}
	// Samples past the calibration ones and before the held-out ones are
	// not read, so only the used ones are hashed.
	for _, r := range [][2]int{{0, calibSamples}, {eval.start, eval.end}} {
		for lo := r[0]; lo < r[1]; lo += 16 {
			b, err := src.Batch(lo, min(lo+16, r[1]))
			if err != nil {
				return "", err
			}
			names := make([]string, 0, len(b))
			for n := range b {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				t := b[n]
				fmt.Fprintf(h, "%s %v %v\n", n, t.DType, t.Shape)
				if err := binary.Write(h, binary.LittleEndian, t.Data); err != nil {
					fmt.Fprintf(h, "%v\n", t.Data)
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writePlanKey writes what prepare decided in p (writePreparedPlan) and
// the palettization settings, which the plan's JSON leaves out.
func writePlanKey(w io.Writer, p *plan.Plan) {
	writePreparedPlan(w, p)
	for _, pp := range p.Palettes {
		if pp.Palette != nil {
			fmt.Fprintf(w, "palette %s %+v\n", pp.Value, *pp.Palette)
		}
	}
}

// preparedPlanSHA256 is the hex SHA-256 of writePlanKey's text: what the
// stats of calibrate record and finalize checks.
func preparedPlanSHA256(p *plan.Plan) string {
	h := sha256.New()
	writePlanKey(h, p)
	return hex.EncodeToString(h.Sum(nil))
}

// writePreparedPlan writes what prepare decided in plan: each point's
// value, role, spec, nodes, granularity, sharing and fixed range, a
// weight's qparams, and the nodes skipped. What calibration and writing
// add (activation qparams, notes) is left out, so that the plan of
// `coreaiq sensitivity`, keyed before calibrating, and that of quantize,
// keyed after, give one key.
func writePreparedPlan(w io.Writer, p *plan.Plan) {
	tensors := slices.Clone(p.Tensors)
	slices.SortFunc(tensors, func(a, b *plan.TensorPlan) int { return strings.Compare(a.Value, b.Value) })
	for _, t := range tensors {
		fmt.Fprintf(w, "tensor %q %s %s nodes %q axis %d block %d shared %q input %q weight %q beta %g",
			t.Value, t.Role, t.SpecString(), t.Nodes, t.Axis, t.BlockSize, t.SharedWith, t.Input, t.Weight, t.BiasBeta)
		if t.Fixed != nil {
			fmt.Fprintf(w, " fixed %g %g", t.Fixed.Min, t.Fixed.Max)
		}
		if t.Role == plan.Weight && t.Params != nil {
			fmt.Fprintf(w, " scales %v zero points %v", t.Params.Scales, t.Params.ZeroPoints)
		}
		fmt.Fprintln(w)
	}
	skipped := slices.Clone(p.Skipped)
	slices.SortFunc(skipped, func(a, b plan.Skip) int { return strings.Compare(a.Node, b.Node) })
	for _, sk := range skipped {
		fmt.Fprintf(w, "skipped %q %s %q\n", sk.Node, sk.OpType, sk.Reason)
	}
}

// writeSensitivity writes the ranking to stdout and to -o (through the
// command's checked outputs).
func writeSensitivity(opts *sensitivityOptions, outputs *outputPlan, r *compare.Sensitivity) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if opts.Out != "" {
		if err := onnxgraph.WriteFileAtomic(outputs.Staged(opts.Out), b); err != nil {
			return err
		}
		if err := outputs.Commit(); err != nil {
			return err
		}
	}
	if opts.Table == "json" {
		_, err := opts.IO.Out.Write(b)
		return err
	}
	return writeSensitivityTable(opts.IO.Out, r)
}

func writeSensitivityTable(w io.Writer, r *compare.Sensitivity) error {
	fmt.Fprintf(w, "output SQNR on %d held-out samples, all points quantized: %s dB\n", r.Samples, r.AllQuantized)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "rank\t%s\tpoints\tonly this (dB)\tall but this (dB)\tgain (dB)\n", r.Grouping)
	for i, g := range r.Groups {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", i+1, g.Group, g.Points, g.OnlySQNR, g.ExceptSQNR, g.Gain)
	}
	return tw.Flush()
}

// sensitivityProgress shows the analysis's progress: a bar redrawn in
// place on a terminal, a log record per group elsewhere.
type sensitivityProgress struct {
	io    *IO
	drawn bool
}

func newSensitivityProgress(streams *IO) *sensitivityProgress {
	return &sensitivityProgress{io: streams}
}

func (p *sensitivityProgress) report(done, total int, g compare.GroupSensitivity) {
	if !p.io.IsTerminal {
		slog.Info("sensitivity", "group", g.Group, "done", done, "total", total,
			"only_this_db", g.OnlySQNR.String(), "all_but_this_db", g.ExceptSQNR.String())
		return
	}
	const width = 30
	filled := done * width / total
	fmt.Fprintf(p.io.ErrOut, "\rsensitivity %s%s %d/%d groups ", strings.Repeat("█", filled), strings.Repeat("░", width-filled), done, total)
	p.drawn = true
}

func (p *sensitivityProgress) done() {
	if p.drawn {
		fmt.Fprintln(p.io.ErrOut)
	}
}

// floatWeights are the weights of the plan all that the candidate plan
// leaves in float.
func floatWeights(all, candidate *plan.Plan) []string {
	var out []string
	for _, t := range all.Tensors {
		if t.Role == plan.Weight && candidate.Tensor(t.Value) == nil {
			out = append(out, t.Value)
		}
	}
	return out
}

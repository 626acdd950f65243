package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

type calibrateOptions struct {
	quantizeOptions
	// Output is the stats file ("" or "-": stdout). It is read from the
	// flag alone: the config's output: is the quantized model's path.
	Output     string
	Shard      string
	RandomData bool
}

// NewCmdCalibrate builds `coreaiq calibrate`: prepare the plan, run the
// float model on calibration data, observe the planned activations and
// write the statistics that `finalize --stats` reads.
func NewCmdCalibrate(streams *IO, runF func(*calibrateOptions) error) *cobra.Command {
	opts := &calibrateOptions{quantizeOptions: quantizeOptions{IO: streams}}
	cmd := &cobra.Command{
		Use:   "calibrate --config FILE [--model PATH] [--data ...] [-o stats.json] [--shard i/n]",
		Short: "Observe the planned activations on calibration data and write a stats file",
		Long: "Prepare the plan from the config, run the float model on the calibration data and\n" +
			"write the observers' state as a stats file for `coreaiq finalize --stats`.\n\n" +
			"--data takes FILE.npy (a one-input model), NAME=FILE.npy, FILE.npz (keys are input\n" +
			"names) or a directory in the ONNX test data layout (input_N.pb, or test_data_set_*\n" +
			"directories); image files come from the config's calibration.images block.\n" +
			"--shard i/n calibrates the i-th of n slices of the samples; `coreaiq stats merge`\n" +
			"joins the shards into exactly what one run gives. Min/max and histogram statistics\n" +
			"shard; a moving average (the moving_average_minmax calculator) is refused, since it\n" +
			"depends on the order and boundaries of every batch.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runCalibrate(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Config, "config", "", "config file (tool settings and quantization config)")
	optString(f, &opts.Settings.Model, "model", "", "", "model to calibrate (default: the config's model)")
	optString(f, &opts.Settings.Preset, "preset", "", "", "quantization preset (replaces the config's quantization_config and algorithms): "+strings.Join(config.PresetNames(), ", "))
	f.StringVarP(&opts.Output, "output", "o", "", "stats file to write (default: stdout)")
	addCalibrationFlags(f, &opts.Settings, "calibration samples to use (before sharding)")
	f.StringSliceVar(&opts.Algorithms, "algorithms", nil, "turn on post-training algorithms with their defaults, on top of the config's algorithms block (give finalize the same): "+strings.Join(config.AlgorithmNames(), ", "))
	optString(f, &opts.Settings.Engine, "engine", "", config.DefaultEngine, "engine: go (built-in) or ort")
	optInt(f, &opts.Settings.Threads, "threads", 0, "engine threads (0: one per CPU)")
	f.StringVar(&opts.Shard, "shard", "", "calibrate shard i of n (0-based), as i/n")
	f.BoolVar(&opts.RandomData, "random-data", false, "use random inputs instead of data (smoke tests only; the stats are marked random_data)")
	addPrepareFlags(f, &opts.Prepare)
	addTargetFlag(f, &opts.Settings)
	return cmd
}

// parseShard parses "i/n".
func parseShard(s string) (i, n int, err error) {
	if s == "" {
		return 0, 1, nil
	}
	a, b, ok := strings.Cut(s, "/")
	if ok {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || n <= 0 || i < 0 || i >= n {
		return 0, 0, Usagef("--shard %q: want i/n with 0 <= i < n", s)
	}
	return i, n, nil
}

func runCalibrate(ctx context.Context, opts *calibrateOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	shard, shards, err := parseShard(opts.Shard)
	if err != nil {
		return err
	}
	s, err := setupPipeline(&opts.quantizeOptions, nil, func(config.Settings) []output {
		if opts.Output == "-" {
			return nil
		}
		return []output{{Flag: "-o", Path: opts.Output}}
	})
	if err != nil {
		return err
	}
	defer s.outputs.Discard()
	if err := s.resolveBatchSize(); err != nil {
		return err
	}
	sum, err := fileSHA256(s.settings.Model)
	if err != nil {
		return err
	}
	// The calibration runs as the pipeline's calibrate pass, with the
	// calibrator quantize uses: one code path, so that quantize and
	// calibrate + finalize --stats produce the same model.
	u := &passes.Unit{}
	var stats *calibrate.Stats
	var prog *calibrate.ProgressReporter
	if opts.RandomData || len(s.settings.Data) > 0 || s.settings.Images != nil {
		src, err := openCalibrationData(s, opts.RandomData)
		if err != nil {
			return err
		}
		defer src.Close()
		s.warnShortData(opts.IO.ErrOut, src, s.settings.Samples)
		if src.Random() {
			slog.Warn("calibrating with random data: the ranges say nothing about real inputs; the stats file is marked random_data")
		}
		prog = calibrate.NewProgressReporter(opts.IO.ErrOut, opts.IO.IsTerminal, slog.Default())
		copts := calibrate.Options{Samples: s.settings.Samples, BatchSize: s.settings.BatchSize,
			Shard: shard, Shards: shards, ModelSHA256: sum, Progress: prog.Report}
		u.Calibrate = passes.EngineCalibrator(s.settings.Engine, runtime.Options{Threads: s.settings.Threads}, src, copts,
			func(st *calibrate.Stats) { stats = st })
		// The algorithms that run before calibration (SmoothQuant, AWQ,
		// equalization through gated activations) read the same samples as
		// under quantize: every shard reads all of them.
		u.Data = s.algorithmData(opts.IO, src, s.settings.Samples)
	}
	_, err = runPipeline(ctx, &opts.quantizeOptions, s, u, "calibrate")
	if prog != nil {
		prog.Done()
	}
	if err != nil {
		if u.Calibrate == nil && u.Plan != nil && len(u.Plan.Observed()) > 0 {
			return Usagef("%v: no calibration data: give --data (calibration.data or calibration.images in the config), or --random-data for a smoke test", err)
		}
		if errors.Is(err, calibrate.ErrNotMergeable) {
			return &UsageError{Err: err}
		}
		return err
	}
	if stats == nil {
		// Weight-only or fixed ranges: finalize needs no statistics, but a
		// script that always runs calibrate gets a valid (empty) file.
		slog.Info("the plan observes no activations; writing empty statistics", "model", s.settings.Model)
		stats = &calibrate.Stats{Version: calibrate.StatsVersion, ModelSHA256: sum}
	}
	stats.PlanSHA256 = preparedPlanSHA256(u.Plan)
	if opts.Output == "" || opts.Output == "-" {
		return stats.Write(opts.IO.Out)
	}
	if err := stats.WriteFile(s.outputs.Staged(opts.Output)); err != nil {
		return err
	}
	return s.outputs.Commit()
}

// openCalibrationData opens the settings' calibration data (or random
// inputs when asked) for the model: the one path calibrate and quantize
// share, so that both observe the same samples.
// calibrationDataHelp describes --data for the commands that calibrate.
const calibrationDataHelp = "calibration data, batch on axis 0 unless :axis=K says otherwise: FILE.npy (one-input model), NAME=FILE.npy[:axis=K], FILE.npz or a test_data_set directory (repeatable)"

func openCalibrationData(s *pipelineSetup, random bool) (calibrate.Source, error) {
	inputs := modelInputs(s.model)
	if random {
		if len(s.settings.Data) > 0 || s.settings.Images != nil {
			return nil, Usagef("--random-data and calibration data (--data, calibration.data or calibration.images) exclude each other")
		}
		src, err := calibrate.NewRandomSource(inputs, s.settings.Samples)
		if err != nil {
			return nil, &UsageError{Err: fmt.Errorf("random data: %w", err)}
		}
		return src, nil
	}
	src, err := calibrate.Open(inputs, s.settings.Data, s.settings.Images)
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("calibration data: %w", err)}
	}
	return src, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

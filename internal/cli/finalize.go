package cli

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

// bytesBuffer is the buffer documents are built in before an atomic write.
type bytesBuffer = bytes.Buffer

type finalizeOptions struct {
	quantizeOptions
	Stats string
}

// NewCmdFinalize builds `coreaiq finalize`: prepare again, take activation
// statistics from a stats file and write the quantized model.
func NewCmdFinalize(streams *IO, runF func(*finalizeOptions) error) *cobra.Command {
	opts := &finalizeOptions{quantizeOptions: quantizeOptions{IO: streams}}
	cmd := &cobra.Command{
		Use:   "finalize --config FILE --stats stats.json [-o out.onnx]",
		Short: "Write the quantized QDQ model from the config and calibration statistics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runFinalize(cmd.Context(), opts)
		},
	}
	addPipelineFlags(cmd, &opts.quantizeOptions)
	cmd.Flags().StringVar(&opts.Stats, "stats", "", "calibration statistics (coreaiq calibrate -o); not needed for weight-only configs")
	addCalibrationFlags(cmd.Flags(), &opts.Settings, "calibration samples the data-aware algorithms read (as calibrate was given)")
	optString(cmd.Flags(), &opts.Settings.Engine, "engine", "", config.DefaultEngine, "engine for the data-aware algorithms: go (built-in) or ort")
	optInt(cmd.Flags(), &opts.Settings.Threads, "threads", 0, "engine threads (0: one per CPU)")
	optString(cmd.Flags(), &opts.Settings.Report, "report", "", "", "write a JSON report here")
	return cmd
}

func runFinalize(ctx context.Context, opts *finalizeOptions) error {
	s, err := setupPipeline(&opts.quantizeOptions, []string{opts.Stats}, func(st config.Settings) []output {
		return []output{{"-o", outputPath(st), opts.IO.Out}, {"--report", st.Report, nil}}
	})
	if err != nil {
		return err
	}
	defer s.outputs.Discard()
	if err := s.resolveBatchSize(); err != nil {
		return err
	}
	u := &passes.Unit{}
	if len(s.settings.Data) > 0 || s.settings.Images != nil {
		// The data-aware algorithms (bias correction, GPTQ, AdaRound, and
		// those before calibration again) read what they read under
		// quantize and calibrate.
		src, err := openCalibrationData(s, false)
		if err != nil {
			return err
		}
		defer src.Close()
		u.Data = s.algorithmData(opts.IO, src, s.settings.Samples)
	}
	var stats *calibrate.Stats
	randomData := false
	if opts.Stats != "" {
		st, err := calibrate.ReadFile(opts.Stats)
		if err != nil {
			return &UsageError{Err: err}
		}
		sum, err := fileSHA256(s.settings.Model)
		if err != nil {
			return err
		}
		if err := st.CheckModel(sum); err != nil {
			return &UsageError{Err: fmt.Errorf("%s: %w", opts.Stats, err)}
		}
		randomData = st.RandomData
		s.randomData = randomData
		u.Stats = passes.StatsOf(st)
		stats = st
	}
	out := outputPath(s.settings)
	if s.scratch, err = onnxgraph.NewScratch(filepath.Dir(s.outputs.Staged(out))); err != nil {
		return err
	}
	defer s.scratch.Close()
	timings, err := runPipeline(ctx, &opts.quantizeOptions, s, u, "")
	s.scratch = nil
	if err != nil {
		if opts.Stats == "" && u.Plan != nil && len(u.Plan.Observed()) > 0 {
			return Usagef("%v: give --stats (from coreaiq calibrate)", err)
		}
		return err
	}
	if stats != nil {
		if err := stats.CheckPlan(preparedPlanSHA256(u.Plan)); err != nil {
			return &UsageError{Err: fmt.Errorf("%s: %w", opts.Stats, err)}
		}
	}
	if err := u.Result.Model.Save(s.outputs.Staged(out), onnxgraph.SaveOptions{}); err != nil {
		return err
	}
	rep := newReport(s, u, timings, out)
	rep.RandomData = randomData
	rep.reportPath = s.settings.Report
	if s.settings.Report != "" {
		if err := writeReportFile(s.outputs.Staged(s.settings.Report), rep); err != nil {
			return err
		}
	}
	if err := s.outputs.Commit(); err != nil {
		return err
	}
	return writeReportTable(opts.IO.ErrOut, rep)
}

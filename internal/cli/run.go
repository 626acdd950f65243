package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

type runOptions struct {
	IO        *IO
	Model     string
	Inputs    []string
	OutputDir string
	Engine    string
	Threads   int
	Repeat    int
	Profile   profileFlags
}

// profileFlags are --profile and --profile-out, which time the built-in
// engine's steps.
type profileFlags struct {
	Table bool
	Out   string
}

// profileTop is the number of slowest nodes --profile lists.
const profileTop = 20

func (p *profileFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&p.Table, "profile", false, "print to stderr the built-in engine's time per op type and its slowest nodes (count, total, share, kernel chosen); with --repeat, of the timed runs")
	f.StringVar(&p.Out, "profile-out", "", "write the built-in engine's steps to FILE as Chrome trace JSON (chrome://tracing, Perfetto)")
}

// start returns the profile to collect into, or nil when neither flag
// is set; only the built-in engine is profiled.
func (p *profileFlags) start(engine string) (*runtime.Profile, error) {
	if !p.Table && p.Out == "" {
		return nil, nil
	}
	if engine != "" && engine != "go" {
		return nil, Usagef("--profile and --profile-out time the built-in engine; --engine is %q", engine)
	}
	return runtime.NewProfile(), nil
}

// finish prints and writes what the flags ask for.
func (p *profileFlags) finish(w io.Writer, prof *runtime.Profile) error {
	if prof == nil {
		return nil
	}
	if p.Table {
		if err := prof.WriteTable(w, profileTop); err != nil {
			return err
		}
	}
	if p.Out != "" {
		f, err := os.Create(p.Out)
		if err != nil {
			return fmt.Errorf("--profile-out: %w", err)
		}
		if err := prof.WriteTrace(f); err != nil {
			f.Close()
			return fmt.Errorf("--profile-out: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--profile-out: %w", err)
		}
	}
	return nil
}

// NewCmdRun builds `coreaiq run MODEL --input NAME=FILE.npy ...`.
func NewCmdRun(streams *IO, runF func(*runOptions) error) *cobra.Command {
	opts := &runOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "run MODEL --input NAME=FILE.npy ...",
		Short: "Run a model on .npy inputs and write each output as <name>.npy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Model = args[0]
			if opts.Threads < 0 {
				return Usagef("--threads %d: want 0 (one per CPU) or more", opts.Threads)
			}
			if opts.Repeat < 0 {
				return Usagef("--repeat %d: want 0 or more", opts.Repeat)
			}
			if runF != nil {
				return runF(opts)
			}
			return runRun(cmd, opts)
		},
	}
	cmd.Flags().StringArrayVar(&opts.Inputs, "input", nil, "model input as NAME=FILE.npy (repeatable; FILE.npy alone for a single-input model)")
	cmd.Flags().StringVar(&opts.OutputDir, "output-dir", ".", "directory for the output .npy files")
	cmd.Flags().StringVar(&opts.Engine, "engine", "go", "inference engine: go (built-in) or ort (ONNX Runtime, in builds with -tags ort)")
	cmd.Flags().IntVar(&opts.Threads, "threads", 0, "threads per run (0: one per CPU)")
	cmd.Flags().IntVar(&opts.Repeat, "repeat", 0, "after one untimed warm-up, time N runs and print latency JSON to stderr")
	opts.Profile.add(cmd.Flags())
	return cmd
}

// latencyReport is the JSON line --repeat prints to stderr.
type latencyReport struct {
	LatencyMS struct {
		Median float64 `json:"median"`
		Min    float64 `json:"min"`
		Max    float64 `json:"max"`
	} `json:"latency_ms"`
	Runs    int    `json:"runs"`
	Engine  string `json:"engine"`
	Threads int    `json:"threads"`
}

func runRun(cmd *cobra.Command, opts *runOptions) error {
	ctx := cmd.Context()
	m, err := loadModel(opts.Model)
	if err != nil {
		return err
	}
	prof, err := opts.Profile.start(opts.Engine)
	if err != nil {
		return err
	}
	sess, err := runtime.Open(opts.Engine, m, runtime.Options{Threads: opts.Threads, Profile: prof})
	if err != nil {
		var unsup *runtime.UnsupportedError
		var unavail *runtime.ErrEngineUnavailable
		err = namingModel(opts.Model, err)
		if errors.As(err, &unsup) || errors.As(err, &unavail) {
			return &UsageError{Err: err}
		}
		return err
	}
	defer sess.Close()
	if err := os.MkdirAll(opts.OutputDir, 0o755); err != nil {
		return Usagef("--output-dir: %v", err)
	}
	var outFiles []output
	for _, o := range sess.Outputs() {
		outFiles = append(outFiles, output{Flag: "--output-dir", Path: filepath.Join(opts.OutputDir, OutputFileName(o.Name))})
	}
	outFiles = append(outFiles, output{Flag: "--profile-out", Path: opts.Profile.Out})
	plan, err := planOutputs(append(append(modelInputFiles(m), opts.Inputs...), dataEntryFiles(opts.Inputs)...), outFiles...)
	if err != nil {
		return err
	}
	defer plan.Discard()
	inputs, err := readRunInputs(opts.Inputs, sess.Inputs())
	if err != nil {
		return err
	}
	run := func() (map[string]*tensor.Tensor, error) {
		outs, err := sess.Run(ctx, inputs, runtime.RunOptions{})
		if err != nil {
			var inErr *runtime.InputError
			if errors.As(err, &inErr) {
				return nil, &UsageError{Err: err}
			}
			return nil, err
		}
		return outs, nil
	}
	outs, err := run()
	if err != nil {
		return err
	}
	if opts.Repeat > 0 {
		if prof != nil {
			prof.Reset() // profile the timed runs, not the warm-up
		}
		times := make([]float64, opts.Repeat)
		for i := range times {
			start := time.Now()
			if _, err := run(); err != nil {
				return err
			}
			times[i] = float64(time.Since(start).Nanoseconds()) / 1e6
		}
		slices.Sort(times)
		var rep latencyReport
		rep.LatencyMS.Min, rep.LatencyMS.Max = times[0], times[len(times)-1]
		if n := len(times); n%2 == 1 {
			rep.LatencyMS.Median = times[n/2]
		} else {
			rep.LatencyMS.Median = (times[n/2-1] + times[n/2]) / 2
		}
		rep.Runs, rep.Engine, rep.Threads = opts.Repeat, sess.Engine(), opts.Threads
		if rep.Threads == 0 {
			rep.Threads = goruntime.NumCPU()
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(opts.IO.ErrOut, string(b))
	}
	profile := opts.Profile
	profile.Out = plan.Staged(profile.Out)
	if err := profile.finish(opts.IO.ErrOut, prof); err != nil {
		return err
	}
	for _, o := range sess.Outputs() {
		t := outs[o.Name]
		if t == nil {
			return fmt.Errorf("output %q was not computed", o.Name)
		}
		path := filepath.Join(opts.OutputDir, OutputFileName(o.Name))
		if err := npy.WriteNPYFile(plan.Staged(path), t); err != nil {
			return fmt.Errorf("output %q: %w", o.Name, err)
		}
	}
	return plan.Commit()
}

// namingModel prefixes an engine's error with the model path, unless the
// engine named the model itself (ONNX Runtime's Library.Open does, for its
// API users), so that the path appears once.
func namingModel(path string, err error) error {
	if strings.Contains(err.Error(), path) {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// OutputFileName is the file a model output is written to: the name with
// `/` and `:` replaced by `_`, plus `.npy`.
func OutputFileName(name string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(name) + ".npy"
}

// readRunInputs reads the --input flags: NAME=FILE.npy, or FILE.npy alone
// when the model has one input.
func readRunInputs(flags []string, infos []runtime.IOInfo) (map[string]*tensor.Tensor, error) {
	names := make([]string, len(infos))
	for i, in := range infos {
		names[i] = in.Name
	}
	inputs := map[string]*tensor.Tensor{}
	for _, f := range flags {
		name, file, ok := strings.Cut(f, "=")
		if !ok {
			if len(infos) != 1 {
				return nil, Usagef("--input %q: want NAME=FILE.npy (model inputs: %s)", f, strings.Join(names, ", "))
			}
			name, file = names[0], f
		}
		if !slices.Contains(names, name) {
			return nil, Usagef("--input %q: the model has no input %q (inputs: %s)", f, name, strings.Join(names, ", "))
		}
		if _, dup := inputs[name]; dup {
			return nil, Usagef("--input %q: input %q is given twice", f, name)
		}
		t, err := npy.ReadNPYFile(file)
		if err != nil {
			return nil, &UsageError{Err: fmt.Errorf("input %q: %w", name, err)}
		}
		inputs[name] = t
	}
	var missing []string
	for _, n := range names {
		if inputs[n] == nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, Usagef("missing --input for %s (give NAME=FILE.npy)", strings.Join(missing, ", "))
	}
	return inputs, nil
}

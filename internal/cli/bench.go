package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// ortEngine is the ONNX Runtime engine's name (pkg/runtime/ort.EngineName;
// that package is only compiled in with -tags ort).
const ortEngine = "ort"

type benchOptions struct {
	IO         *IO
	Float      string
	Quant      string
	Data       []string
	BatchSize  int
	Threads    int
	Runs       int
	Budget     time.Duration
	MinSpeedup float64
	Format     string
	// Engines are the engines to time ("": every engine of the binary).
	Engine string
}

func addBenchFlags(cmd *cobra.Command, o *benchOptions) {
	f := cmd.Flags()
	f.IntVar(&o.Threads, "threads", 1, "intra-op threads of every engine, the same for both models")
	f.IntVar(&o.Runs, "runs", 30, "timed runs of each model per engine, interleaved")
	f.DurationVar(&o.Budget, "budget", 60*time.Second, "stop an engine's timed runs after this long (at least 3 runs)")
}

// NewCmdBench builds `coreaiq bench FLOAT.onnx QUANT.onnx --data ...`.
func NewCmdBench(streams *IO, runF func(*benchOptions) error) *cobra.Command {
	o := &benchOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "bench FLOAT.onnx QUANT.onnx --data NAME=FILE.npy ...",
		Short: "Time a float model and its quantized model in ONNX Runtime and the built-in engine",
		Long: `bench opens both models in every engine of this binary with the same
threads, runs each once untimed, then alternates timed runs of the two
(so that load from other processes hits both alike) and prints the median
latencies and the speedup (float median / quantized median). ONNX Runtime
is in binaries built with -tags ort; the default binary times the built-in
engine only and says so.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Float, o.Quant = args[0], args[1]
			if len(o.Data) == 0 {
				return Usagef("no input data: give --data NAME=FILE.npy")
			}
			if err := o.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(o)
			}
			return runBench(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Data, "data", nil, "model inputs: NAME=FILE.npy (FILE.npy alone for a one-input model), FILE.npz or a test_data_set directory, batch-first; the first --batch-size samples are used")
	f.IntVar(&o.BatchSize, "batch-size", 1, "samples per run")
	f.Float64Var(&o.MinSpeedup, "min-speedup", 0, "gate: exit 3 when ONNX Runtime's speedup is below this (needs the ort build)")
	f.StringVar(&o.Format, "format", "table", "output: table or json")
	f.StringVar(&o.Engine, "engine", "", "time only this engine: ort or go (default: ONNX Runtime when the binary has it, then the built-in engine)")
	addBenchFlags(cmd, o)
	return cmd
}

func (o *benchOptions) check() error {
	switch {
	case o.BatchSize < 1:
		return Usagef("--batch-size %d: want 1 or more", o.BatchSize)
	case o.Threads < 0:
		return Usagef("--threads %d: want 0 (one per CPU) or more", o.Threads)
	case o.Runs < 3:
		return Usagef("--runs %d: want 3 or more", o.Runs)
	case o.MinSpeedup < 0:
		return Usagef("--min-speedup %g: want a positive ratio", o.MinSpeedup)
	case o.Engine != "" && o.Engine != ortEngine && o.Engine != "go":
		return Usagef("--engine %q: want ort or go", o.Engine)
	case o.Engine == "go" && o.MinSpeedup > 0:
		return Usagef("--min-speedup gates ONNX Runtime's speedup; drop --engine go")
	case o.Format != "table" && o.Format != "json":
		return Usagef("--format %q: want table or json", o.Format)
	case o.MinSpeedup > 0 && !slices.Contains(runtime.Engines(), ortEngine):
		return Usagef("--min-speedup gates ONNX Runtime's speedup, and this binary has only the built-in engine: build with -tags ort (see README, ONNX Runtime engine)")
	}
	return nil
}

// BenchResult is one engine's timing of the two models.
type BenchResult struct {
	Engine  string  `json:"engine"`
	Threads int     `json:"threads"`
	Batch   int     `json:"batch"`
	Runs    int     `json:"runs"`
	FloatMS float64 `json:"float_ms"`
	QuantMS float64 `json:"quant_ms"`
	// Speedup is FloatMS / QuantMS: above 1 the quantized model is faster.
	Speedup float64 `json:"speedup"`
	// FloatCPUMS, QuantCPUMS and CPUSpeedup are the same for the CPU time
	// per run, which load from other processes does not inflate; absent
	// where the system does not report it. CPUClock says whose: "thread",
	// the thread that calls ONNX Runtime when it runs on one thread (on
	// Linux), else "process" (all threads).
	FloatCPUMS float64 `json:"float_cpu_ms,omitempty"`
	QuantCPUMS float64 `json:"quant_cpu_ms,omitempty"`
	CPUSpeedup float64 `json:"cpu_speedup,omitempty"`
	CPUClock   string  `json:"cpu_clock,omitempty"`
}

// BenchReport is what bench prints with --format json.
type BenchReport struct {
	Float   string        `json:"float"`
	Quant   string        `json:"quant"`
	Results []BenchResult `json:"results"`
	// Missing explains an engine this binary does not have.
	Missing string `json:"missing,omitempty"`
}

// noORT is what bench says in a binary without ONNX Runtime.
const noORT = "ONNX Runtime is not in this binary (build with -tags ort, see README): timed the built-in engine only, whose figures say nothing about ONNX Runtime's integer kernels"

func runBench(ctx context.Context, o *benchOptions) error {
	fm, err := loadModel(o.Float)
	if err != nil {
		return err
	}
	qm, err := loadModel(o.Quant)
	if err != nil {
		return err
	}
	inputs, err := benchInputs(o.Data, o.BatchSize, modelInputs(fm))
	if err != nil {
		return err
	}
	rep, err := benchModels(ctx, o, fm, qm, inputs)
	if err != nil {
		return err
	}
	if err := rep.write(o.IO.Out, o.Format); err != nil {
		return err
	}
	return rep.gate(o.MinSpeedup)
}

// benchModels times fm and qm in every engine of the binary, ONNX Runtime
// first.
func benchModels(ctx context.Context, o *benchOptions, fm, qm *onnxgraph.Model, inputs map[string]*tensor.Tensor) (*BenchReport, error) {
	rep := &BenchReport{Float: o.Float, Quant: o.Quant}
	engines := []string{"go"}
	if slices.Contains(runtime.Engines(), ortEngine) {
		engines = []string{ortEngine, "go"}
	} else {
		rep.Missing = noORT
	}
	if o.Engine != "" {
		if !slices.Contains(engines, o.Engine) {
			return nil, Usagef("--engine %s: %s", o.Engine, noORT)
		}
		engines = []string{o.Engine}
	}
	for _, eng := range engines {
		r, err := benchEngine(ctx, o, eng, fm, qm, inputs)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

func benchEngine(ctx context.Context, o *benchOptions, engine string, fm, qm *onnxgraph.Model, inputs map[string]*tensor.Tensor) (BenchResult, error) {
	res := BenchResult{Engine: engine, Threads: o.Threads, Batch: o.BatchSize}
	// Every run starts from the same OS thread, as in a program that calls
	// the runtime from one thread: otherwise Go's scheduler may move the
	// calling goroutine between threads between runs (cold caches) and
	// hand its processor to a spinning thread while a run is in C.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	cpuClock := processCPU
	res.CPUClock = "process"
	if engine == ortEngine && o.Threads == 1 {
		// ONNX Runtime on one thread computes on the calling thread only:
		// its CPU time is the run's, without the Go runtime's background
		// work (garbage collection, idle threads) that the process's
		// time adds to both models alike, which pulls the ratio toward 1.
		if _, ok := threadCPU(); ok {
			cpuClock, res.CPUClock = threadCPU, "thread"
		}
	}
	var sessions []runtime.Session
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	for i, m := range []*onnxgraph.Model{fm, qm} {
		s, err := runtime.Open(engine, m, runtime.Options{Threads: o.Threads})
		if err != nil {
			err = namingModel([]string{o.Float, o.Quant}[i], err)
			var unsup *runtime.UnsupportedError
			if errors.As(err, &unsup) {
				return res, &UsageError{Err: err}
			}
			return res, err
		}
		sessions = append(sessions, s)
	}
	for _, s := range sessions { // warm-up, and the check that both run
		if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
			return res, fmt.Errorf("%s engine: %w", engine, err)
		}
	}
	var lat, cpu [2][]float64
	start := time.Now()
	for r := 0; r < o.Runs && (r < 3 || time.Since(start) < o.Budget); r++ {
		for i, s := range sessions {
			c0, cpuOK := cpuClock()
			t0 := time.Now()
			if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
				return res, fmt.Errorf("%s engine: %w", engine, err)
			}
			lat[i] = append(lat[i], float64(time.Since(t0).Nanoseconds())/1e6)
			if c1, ok := cpuClock(); ok && cpuOK {
				cpu[i] = append(cpu[i], float64((c1-c0).Nanoseconds())/1e6)
			}
		}
	}
	res.Runs = len(lat[0])
	res.FloatMS, res.QuantMS = median(lat[0]), median(lat[1])
	res.Speedup = res.FloatMS / res.QuantMS
	if len(cpu[0]) == res.Runs && len(cpu[1]) == res.Runs {
		res.FloatCPUMS, res.QuantCPUMS = median(cpu[0]), median(cpu[1])
		if res.QuantCPUMS > 0 {
			res.CPUSpeedup = res.FloatCPUMS / res.QuantCPUMS
		}
	}
	return res, nil
}

// benchInputs reads the first batch samples of data (--data flags).
func benchInputs(data []string, batch int, infos []runtime.IOInfo) (map[string]*tensor.Tensor, error) {
	src, err := calibrate.Open(infos, data, nil)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	defer src.Close()
	return sourceBatch(src, batch)
}

// sourceBatch reads the first batch samples of src.
func sourceBatch(src calibrate.Source, batch int) (map[string]*tensor.Tensor, error) {
	if n := src.Samples(); n < batch {
		return nil, Usagef("the data holds %d samples, fewer than the batch size %d", n, batch)
	}
	return src.Batch(0, batch)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (r *BenchReport) write(w io.Writer, format string) error {
	if format == "json" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "engine\tbatch\tthreads\truns\tfloat ms\tquantized ms\tspeedup\tfloat CPU ms\tquantized CPU ms\tCPU speedup\tCPU of\t\n")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.3f\t%.3f\t%.2f×\t%.3f\t%.3f\t%.2f×\t%s\t\n", x.Engine, x.Batch, x.Threads, x.Runs,
			x.FloatMS, x.QuantMS, x.Speedup, x.FloatCPUMS, x.QuantCPUMS, x.CPUSpeedup, x.CPUClock)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Missing != "" {
		fmt.Fprintf(w, "note: %s\n", r.Missing)
	}
	return nil
}

// gate returns a GateError when ONNX Runtime's speedup is below min (0: no
// gate).
func (r *BenchReport) gate(min float64) error {
	if min <= 0 {
		return nil
	}
	for _, x := range r.Results {
		if x.Engine == ortEngine && x.Speedup < min {
			return &GateError{Err: fmt.Errorf("%s is %.2f× faster than %s in ONNX Runtime (batch %d, %d threads), below --min-speedup %g",
				r.Quant, x.Speedup, r.Float, x.Batch, x.Threads, min)}
		}
	}
	return nil
}

// addQuantizeBenchFlags adds quantize's --bench and --min-speedup.
func addQuantizeBenchFlags(f *pflag.FlagSet, o *quantizeOptions) {
	f.BoolVar(&o.Bench, "bench", false, "after writing, time the float and the quantized model as `coreaiq bench` does (1 thread, batch 1, the first calibration sample)")
	f.Float64Var(&o.MinSpeedup, "min-speedup", 0, "with --bench: exit 3 (after writing the model and the report) when ONNX Runtime's speedup is below this")
}

// addTargetFlag adds --target, which every command that prepares a plan
// takes (calibrate and finalize --stats must plan what quantize plans).
func addTargetFlag(f *pflag.FlagSet, o *config.Overrides) {
	optString(f, &o.Target, "target", "", "", "deployment target: where Q/DQ pairs go and the specs a config without quantization_config gets: "+
		strings.Join(config.TargetNames(), ", ")+" (default "+config.DefaultTarget+")")
}

// quantizeBench runs bench on the model quantize just wrote, when --bench
// or --min-speedup asks, and returns the gate's error.
func quantizeBench(ctx context.Context, cmd *quantizeOptions, src calibrate.Source, float *onnxgraph.Model, out string, written *onnxgraph.Model) error {
	minSpeedup := cmd.MinSpeedup
	if !cmd.Bench && minSpeedup == 0 {
		return nil
	}
	o := &benchOptions{IO: cmd.IO, Float: float.Path, Quant: out, BatchSize: 1, Threads: 1, Runs: 30,
		Budget: 60 * time.Second, MinSpeedup: minSpeedup, Format: "table"}
	if err := o.check(); err != nil {
		return err
	}
	if src == nil {
		return Usagef("--bench needs input data: give --data (calibration.data in the config)")
	}
	inputs, err := sourceBatch(src, 1)
	if err != nil {
		return err
	}
	rep, err := benchModels(ctx, o, float, written, inputs)
	if err != nil {
		return err
	}
	if err := rep.write(cmd.IO.ErrOut, "table"); err != nil {
		return err
	}
	return rep.gate(minSpeedup)
}

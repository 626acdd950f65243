//go:build ort

// Command ortquant measures what quantization buys in ONNX Runtime: for
// each model it quantizes the float model with a preset (ort-x86 by
// default, calibrated on calib_<input>.npy with the built-in engine), opens
// the float and the quantized model in ONNX Runtime with the same thread
// count and default optimizations, warms each up once, alternates their
// timed runs (so that load from other processes hits both alike) and
// prints the median latencies and the float/quantized ratio (above 1: the
// quantized model is faster).
//
//	ONNXRUNTIME_LIB=$(scripts/fetch-ort.sh) go run -tags ort ./bench/ortquant -models ../shared/models
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coreaiq/coreaiq/bench/internal/benchio"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ortquant:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("models", benchio.DefaultModels(), "folder of model folders (model.onnx, calib_<input>.npy, eval_<input>.npy); env COREAIQ_SHARED_MODELS")
	only := flag.String("only", "resnet18,mobilenetv2", "comma-separated model folder names")
	preset := flag.String("preset", "ort-x86", "quantization preset")
	runs := flag.Int("runs", 30, "timed runs per model and configuration")
	budget := flag.Duration("budget", 30*time.Second, "stop a configuration's timed runs after this long (at least 3 runs each)")
	batches := flag.String("batch", "1,8", "batch sizes")
	threads := flag.Int("threads", 1, "ONNX Runtime intra-op threads for both models")
	samples := flag.Int("samples", 16, "calibration samples")
	flag.Parse()

	var bs []int
	for _, f := range strings.Split(*batches, ",") {
		var v int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &v); err != nil || v < 1 {
			return fmt.Errorf("-batch: %q is not a positive integer", f)
		}
		bs = append(bs, v)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "model\tbatch\tthreads\tfloat ms\t%s ms\tfloat/%s\truns\t\n", *preset, *preset)
	for _, name := range strings.Split(*only, ",") {
		mdir := filepath.Join(*dir, name)
		m, err := onnxgraph.Load(filepath.Join(mdir, "model.onnx"))
		if err != nil {
			return err
		}
		q, err := quantize(m, mdir, *preset, *samples)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, b := range bs {
			fl, qu, n, err := measure(m, q, mdir, b, *threads, *runs, *budget)
			if err != nil {
				return fmt.Errorf("%s batch %d: %w", name, b, err)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%.2f\t%d\t\n", name, b, *threads, fl, qu, fl/qu, n)
			fmt.Fprintf(os.Stderr, "ortquant: %s batch %d done\n", name, b)
		}
	}
	return tw.Flush()
}

// quantize runs the pipeline as `coreaiq quantize --preset P --data
// calib_<input>.npy` does.
func quantize(m *onnxgraph.Model, dir, preset string, samples int) (*onnxgraph.Model, error) {
	cfg, err := config.Preset(preset)
	if err != nil {
		return nil, err
	}
	gs, err := runtime.NewGoSession(m, runtime.Options{})
	if err != nil {
		return nil, err
	}
	inputs := gs.Inputs()
	gs.Close()
	var data []string
	for _, in := range inputs {
		data = append(data, in.Name+"="+benchio.DataFile(dir, "calib", in.Name))
	}
	src, err := calibrate.Open(inputs, data, nil)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	u := &passes.Unit{Model: m, Config: cfg,
		Calibrate: passes.EngineCalibrator("go", runtime.Options{}, src, calibrate.Options{Samples: samples, BatchSize: 8}, nil)}
	if _, err := passes.Run(context.Background(), u, passes.RunOptions{}); err != nil {
		return nil, err
	}
	return u.Result.Model, nil
}

func measure(fm, qm *onnxgraph.Model, dir string, batch, threads, runs int, budget time.Duration) (floatMs, quantMs float64, n int, err error) {
	var sessions []runtime.Session
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	for _, m := range []*onnxgraph.Model{fm, qm} {
		s, err := ort.Open(m, runtime.Options{Threads: threads})
		if err != nil {
			return 0, 0, 0, err
		}
		sessions = append(sessions, s)
	}
	inputs := map[string]*tensor.Tensor{}
	for _, in := range sessions[0].Inputs() {
		t, err := npy.ReadNPYFile(benchio.DataFile(dir, "eval", in.Name))
		if err != nil {
			return 0, 0, 0, err
		}
		if len(t.Shape) == 0 || t.Shape[0] < batch {
			return 0, 0, 0, fmt.Errorf("input %q: fewer than %d samples", in.Name, batch)
		}
		per := t.Len() / t.Shape[0]
		shape := slices.Clone(t.Shape)
		shape[0] = batch
		inputs[in.Name] = &tensor.Tensor{DType: t.DType, Shape: shape, Data: reflect.ValueOf(t.Data).Slice(0, batch*per).Interface()}
	}
	ctx := context.Background()
	for _, s := range sessions {
		if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
			return 0, 0, 0, err
		}
	}
	lat := [2][]float64{}
	start := time.Now()
	for r := 0; r < runs && (r < 3 || time.Since(start) < budget); r++ {
		for i, s := range sessions {
			t0 := time.Now()
			if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
				return 0, 0, 0, err
			}
			lat[i] = append(lat[i], float64(time.Since(t0).Microseconds())/1000)
		}
	}
	return benchio.Median(lat[0]), benchio.Median(lat[1]), len(lat[0]), nil
}

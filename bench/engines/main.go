//go:build ort

// Command engines compares the built-in engine with ONNX Runtime on every
// model of a models folder (each sub-folder holds model.onnx and, per
// input, eval_<input>.npy or else calib_<input>.npy, batch-first; see
// README.md). For each model, batch size and thread
// count it opens both sessions, warms each up once and then alternates
// their runs, so that load from other processes hits both alike, and
// prints the median latencies and the go/ort ratio as a table.
//
//	go run -tags ort ./bench/engines -models ../shared/models
package main

import (
	"context"
	"errors"
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
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "engines:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("models", benchio.DefaultModels(), "folder of model folders (model.onnx, eval_<input>.npy or calib_<input>.npy); env COREAIQ_SHARED_MODELS")
	runs := flag.Int("runs", 20, "timed runs per engine and configuration")
	budget := flag.Duration("budget", 20*time.Second, "stop a configuration's timed runs after this long (at least 3 runs each)")
	batches := flag.String("batch", "1,8", "batch sizes")
	threadList := flag.String("threads", "1,2", "thread counts")
	only := flag.String("only", "", "comma-separated model folder names (default: all)")
	flag.Parse()

	bs, err := ints(*batches)
	if err != nil {
		return fmt.Errorf("-batch: %w", err)
	}
	ts, err := ints(*threadList)
	if err != nil {
		return fmt.Errorf("-threads: %w", err)
	}
	entries, err := os.ReadDir(*dir)
	if err != nil {
		return fmt.Errorf("models folder: %w", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tbatch\tthreads\tgo ms\tort ms\tgo/ort\truns\t")
	for _, e := range entries {
		if !e.IsDir() || (*only != "" && !slices.Contains(strings.Split(*only, ","), e.Name())) {
			continue
		}
		mdir := filepath.Join(*dir, e.Name())
		if _, err := os.Stat(filepath.Join(mdir, "model.onnx")); err != nil {
			continue
		}
		m, err := onnxgraph.Load(filepath.Join(mdir, "model.onnx"))
		if err != nil {
			return err
		}
		for _, b := range bs {
			for _, t := range ts {
				row, err := measure(m, mdir, b, t, *runs, *budget)
				var skip *skipError
				switch {
				case errors.As(err, &skip):
					fmt.Fprintf(tw, "%s\t%d\t%d\t-\t-\t%s\t\t\n", e.Name(), b, t, skip.why)
				case err != nil:
					return fmt.Errorf("%s batch %d threads %d: %w", e.Name(), b, t, err)
				default:
					fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%.2f\t%d\t\n", e.Name(), b, t, row.goMs, row.ortMs, row.goMs/row.ortMs, row.runs)
				}
				fmt.Fprintf(os.Stderr, "engines: %s batch %d threads %d done\n", e.Name(), b, t)
			}
		}
	}
	return tw.Flush()
}

type skipError struct{ why string }

func (e *skipError) Error() string { return e.why }

type result struct {
	goMs, ortMs float64
	runs        int
}

// switchPause is the idle time before each block of runs of one engine,
// longer than either engine's worker threads spin before they sleep:
// ONNX Runtime 1.23's intra-op pool (2 threads) was measured burning
// 12 ms of CPU in the 10 ms after a run and 25 ms in the 100 ms after it.
const switchPause = 50 * time.Millisecond

// warmUp is the least time each block spends in untimed runs: after the
// pause, CPUs that went idle take a while to run at full speed again
// (digits_lenet batch 8 on the built-in engine: 1.5 ms per run after a
// 5 ms warm-up, 0.98 ms after 50 ms, 0.97 ms in a continuous loop).
const warmUp = 50 * time.Millisecond

func measure(m *onnxgraph.Model, dir string, batch, threads, runs int, budget time.Duration) (*result, error) {
	gs, err := runtime.NewGoSession(m, runtime.Options{Threads: threads})
	if err != nil {
		return nil, err
	}
	defer gs.Close()
	ortSess, err := ort.Open(m, runtime.Options{Threads: threads})
	if err != nil {
		return nil, err
	}
	defer ortSess.Close()
	inputs := map[string]*tensor.Tensor{}
	for _, in := range gs.Inputs() {
		t, err := readSamples(dir, in.Name)
		if err != nil {
			return nil, err
		}
		if len(in.Shape) > 0 && in.Shape[0] > 0 && int(in.Shape[0]) != batch {
			return nil, &skipError{why: fmt.Sprintf("fixed batch %d", in.Shape[0])}
		}
		if t, err = firstSamples(t, batch); err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		inputs[in.Name] = t
	}
	ctx := context.Background()
	sessions := []runtime.Session{gs, ortSess}
	for _, s := range sessions {
		if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
			return nil, fmt.Errorf("%s engine: %w", s.Engine(), err)
		}
	}
	// The engines take turns in blocks of a few runs, with a pause before
	// each block: both keep their worker threads spinning for a while
	// after a run (ONNX Runtime's intra-op pool by default), and a run
	// that starts while the other engine's workers still spin has one core
	// fewer. Each block starts with untimed runs for at least warmUp, so
	// that short models are not timed while idle CPUs wake up.
	const block = 3
	lat := [2][]float64{}
	start := time.Now()
	for len(lat[0]) < runs && (len(lat[0]) < 3 || time.Since(start) < budget) {
		for i, s := range sessions {
			time.Sleep(switchPause)
			for w := time.Now(); ; {
				if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
					return nil, fmt.Errorf("%s engine: %w", s.Engine(), err)
				}
				if time.Since(w) >= warmUp {
					break
				}
			}
			for range block {
				t0 := time.Now()
				if _, err := s.Run(ctx, inputs, runtime.RunOptions{}); err != nil {
					return nil, fmt.Errorf("%s engine: %w", s.Engine(), err)
				}
				lat[i] = append(lat[i], float64(time.Since(t0).Microseconds())/1000)
			}
		}
	}
	return &result{goMs: benchio.Median(lat[0]), ortMs: benchio.Median(lat[1]), runs: len(lat[0])}, nil
}

// readSamples reads an input's samples: eval_<input>.npy, or
// calib_<input>.npy when the folder has no evaluation data.
func readSamples(dir, input string) (*tensor.Tensor, error) {
	path := benchio.DataFile(dir, "eval", input)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		path = benchio.DataFile(dir, "calib", input)
	}
	return npy.ReadNPYFile(path)
}

// firstSamples returns the first n samples (axis 0) of t.
func firstSamples(t *tensor.Tensor, n int) (*tensor.Tensor, error) {
	if len(t.Shape) == 0 || t.Shape[0] < n {
		return nil, &skipError{why: fmt.Sprintf("%d samples in eval data", t.Shape[0])}
	}
	per := t.Len() / t.Shape[0]
	shape := slices.Clone(t.Shape)
	shape[0] = n
	data := reflect.ValueOf(t.Data).Slice(0, n*per).Interface()
	return &tensor.Tensor{DType: t.DType, Shape: shape, Data: data}, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var v int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &v); err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

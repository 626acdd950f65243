// Command portable compares the portable Go kernels with the amd64
// assembly on whole models: it builds coreaiq twice (the default build,
// run with COREAIQ_KERNELS=avx2, and the noasm build, which has only the
// Go kernels), writes each model's first sample as batch-1 inputs, then
// runs `coreaiq run --repeat` of the builds in turn, round after round,
// so that load from other processes hits them alike, and prints each
// build's median latency and its ratio to the AVX2 kernels (see
// README.md).
//
//	go run ./bench/portable
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/coreaiq/coreaiq/bench/internal/benchio"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "portable:", err)
		os.Exit(1)
	}
}

// variant is one way of running the models: a build and the kernel set
// it is asked for.
type variant struct {
	name    string
	tags    string // go build -tags
	goamd64 string // GOAMD64 of the build, "" for Go's default
	kernels string // COREAIQ_KERNELS, "" for the widest the build has
	bin     string
}

func run() error {
	dir := flag.String("models", benchio.DefaultModels(), "folder of model folders (model.onnx, eval_<input>.npy or calib_<input>.npy); env COREAIQ_SHARED_MODELS")
	only := flag.String("only", "resnet18,mobilenetv2,bert_encoder", "comma-separated model folder names")
	rounds := flag.Int("rounds", 7, "rounds; each runs every variant once")
	repeat := flag.Int("repeat", 10, "timed runs per variant and round (coreaiq run --repeat)")
	threads := flag.Int("threads", 1, "threads per run")
	v3 := flag.Bool("v3", false, "also run the noasm build for GOAMD64=v3, where the compiler makes each multiply-add of the Go kernels one FMA")
	portableSet := flag.Bool("portable-set", false, "also run the default build with COREAIQ_KERNELS=portable")
	flag.Parse()

	variants := []*variant{
		{name: "avx2", kernels: "avx2"},
		{name: "noasm", tags: "noasm"},
	}
	if *v3 {
		variants = append(variants, &variant{name: "noasm-v3", tags: "noasm", goamd64: "v3"})
	}
	if *portableSet {
		variants = append(variants, &variant{name: "portable", kernels: "portable"})
	}
	tmp, err := os.MkdirTemp("", "coreaiq-bench-portable-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for i, v := range variants {
		v.bin = filepath.Join(tmp, fmt.Sprintf("coreaiq-%d", i))
		if err := build(v); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "model\t")
	for _, v := range variants {
		fmt.Fprintf(tw, "%s ms\t", v.name)
	}
	for _, v := range variants[1:] {
		fmt.Fprintf(tw, "%s/%s\t", v.name, variants[0].name)
	}
	fmt.Fprintln(tw, "rounds\t")
	fmt.Fprintf(os.Stderr, "portable: load average at start: %s\n", loadAverage())
	for _, name := range strings.Split(*only, ",") {
		mdir := filepath.Join(*dir, name)
		args, err := batchOneInputs(mdir, filepath.Join(tmp, name))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		args = append([]string{"run", filepath.Join(mdir, "model.onnx"), "--output-dir", filepath.Join(tmp, name, "out"),
			"--threads", fmt.Sprint(*threads), "--repeat", fmt.Sprint(*repeat)}, args...)
		// medians[i] holds variant i's median of each round. Every other
		// round runs the variants in reverse order, so that none always
		// follows another.
		medians := make([][]float64, len(variants))
		for r := 0; r < *rounds; r++ {
			for k := range variants {
				i := k
				if r%2 == 1 {
					i = len(variants) - 1 - k
				}
				v := variants[i]
				ms, err := timeRun(v, args)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", name, v.name, err)
				}
				medians[i] = append(medians[i], ms)
			}
		}
		fmt.Fprintf(tw, "%s\t", name)
		for i := range variants {
			fmt.Fprintf(tw, "%.2f\t", benchio.Median(medians[i]))
		}
		// The ratio is the median of the rounds' ratios: the runs of one
		// round are close in time, and so in the load they met.
		for i := range variants[1:] {
			ratios := make([]float64, *rounds)
			for r := range ratios {
				ratios[r] = medians[i+1][r] / medians[0][r]
			}
			fmt.Fprintf(tw, "%.2f\t", benchio.Median(ratios))
		}
		fmt.Fprintf(tw, "%d\t\n", *rounds)
		fmt.Fprintf(os.Stderr, "portable: %s done\n", name)
	}
	fmt.Fprintf(os.Stderr, "portable: load average at end: %s\n", loadAverage())
	return tw.Flush()
}

// loadAverage is the 1, 5 and 15 minute load averages where the system
// tells them (/proc/loadavg), to be quoted with the figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// build builds coreaiq as v says into v.bin.
func build(v *variant) error {
	args := []string{"build", "-o", v.bin}
	if v.tags != "" {
		args = append(args, "-tags", v.tags)
	}
	cmd := exec.Command("go", append(args, "./cmd/coreaiq")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if v.goamd64 != "" {
		cmd.Env = append(cmd.Env, "GOAMD64="+v.goamd64)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s (run from the repository root): %w", v.name, err)
	}
	return nil
}

// timeRun runs coreaiq with args as v says and returns the median latency
// it prints.
func timeRun(v *variant, args []string) (float64, error) {
	cmd := exec.Command(v.bin, args...)
	cmd.Env = append(os.Environ(), "COREAIQ_KERNELS="+v.kernels)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w: %s", err, stderr.String())
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		var rep struct {
			LatencyMS struct {
				Median float64 `json:"median"`
			} `json:"latency_ms"`
		}
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rep) == nil && rep.LatencyMS.Median > 0 {
			return rep.LatencyMS.Median, nil
		}
	}
	return 0, fmt.Errorf("no latency line in: %s", stderr.String())
}

// batchOneInputs writes the first sample of each model input (from
// eval_<input>.npy, else calib_<input>.npy) into out and returns the
// --input flags that read them.
func batchOneInputs(mdir, out string) ([]string, error) {
	m, err := onnxgraph.Load(filepath.Join(mdir, "model.onnx"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var args []string
	for _, in := range m.Graph.Inputs {
		name := in.Name
		path := benchio.DataFile(mdir, "eval", name)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			path = benchio.DataFile(mdir, "calib", name)
		}
		t, err := npy.ReadNPYFile(path)
		if err != nil {
			return nil, err
		}
		if len(t.Shape) == 0 || t.Shape[0] < 1 {
			return nil, fmt.Errorf("%s: no samples", path)
		}
		per := t.Len() / t.Shape[0]
		shape := slices.Clone(t.Shape)
		shape[0] = 1
		first := &tensor.Tensor{DType: t.DType, Shape: shape, Data: reflect.ValueOf(t.Data).Slice(0, per).Interface()}
		file := filepath.Join(out, filepath.Base(path))
		if err := npy.WriteNPYFile(file, first); err != nil {
			return nil, err
		}
		args = append(args, "--input", name+"="+file)
	}
	return args, nil
}

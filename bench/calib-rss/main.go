// Command calib-rss measures the peak resident set size of `coreaiq
// quantize` (or `calibrate`) on a shared model for a small and a large
// number of samples (the calibration data tiled to reach them). DESIGN §8
// asks for peak RSS independent of the number of samples. The defaults
// quantize resnet18 with batches of 32, on one batch and on 128 samples.
//
//	go build -o /tmp/coreaiq ./cmd/coreaiq
//	go run ./bench/calib-rss -coreaiq /tmp/coreaiq
//	go run ./bench/calib-rss -coreaiq /tmp/coreaiq -command calibrate -model digits_resnet -samples 64,512 -batch-size 8
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreaiq/coreaiq/bench/internal/benchio"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

func main() {
	bin := flag.String("coreaiq", "coreaiq", "coreaiq binary")
	shared := flag.String("shared", benchio.DefaultModels(), "shared model folder; env COREAIQ_SHARED_MODELS")
	model := flag.String("model", "resnet18", "model folder (one input, calib_input.npy)")
	samples := flag.String("samples", "32,128", "sample counts to compare")
	batch := flag.Int("batch-size", 32, "calibration batch size")
	command := flag.String("command", "quantize", "coreaiq command to measure: quantize (writes the model) or calibrate (writes the stats)")
	flag.Parse()
	if *command != "quantize" && *command != "calibrate" {
		fmt.Fprintf(os.Stderr, "calib-rss: -command %q: want quantize or calibrate\n", *command)
		os.Exit(2)
	}
	if err := run(*bin, *command, filepath.Join(*shared, *model), *samples, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "calib-rss:", err)
		os.Exit(1)
	}
}

func run(bin, command, dir, samples string, batch int) error {
	src, err := npy.ReadNPYFile(filepath.Join(dir, "calib_input.npy"))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "calib-rss")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var first int64
	for _, s := range strings.Split(samples, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		data := filepath.Join(tmp, fmt.Sprintf("calib_%d.npy", n))
		if err := tile(src, n, data); err != nil {
			return err
		}
		out := filepath.Join(tmp, "stats.json")
		if command == "quantize" {
			out = filepath.Join(tmp, "model.int8.onnx")
		}
		cmd := exec.Command(bin, command, "--model", filepath.Join(dir, "model.onnx"), "--preset", "w8a8",
			"--data", data, "--samples", s, "--batch-size", strconv.Itoa(batch), "-o", out)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %w\n%s", cmd.Args, err, out)
		}
		kb := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		if first == 0 {
			first = kb
		}
		fmt.Printf("samples %4d  peak RSS %7.1f MiB  (%+.1f%% vs %s samples)  user %.2fs\n", n, float64(kb)/1024,
			100*float64(kb-first)/float64(first), strings.Split(samples, ",")[0], cmd.ProcessState.UserTime().Seconds())
	}
	return nil
}

// tile writes n samples, repeating the source's samples in order.
func tile(src *tensor.Tensor, n int, path string) error {
	row := tensor.NumElements(src.Shape[1:])
	in := src.Data.([]float32)
	out := tensor.New(tensor.Float, append([]int{n}, src.Shape[1:]...)...)
	d := out.Data.([]float32)
	for i := range n {
		j := i % src.Shape[0]
		copy(d[i*row:(i+1)*row], in[j*row:(j+1)*row])
	}
	return npy.WriteNPYFile(path, out)
}

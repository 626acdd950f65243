// Command llm measures weight-only quantization of Llama-shaped decoders:
// for each size it writes the decoder with llamagen (deterministic weights,
// std 0.02), runs `coreaiq quantize` on it with each binary given,
// alternating binaries over the repeats so that load from other processes
// hits them alike, and prints per run the wall time, the user CPU time, the
// peak resident set size of the coreaiq process and the weight error: the
// SQNR of every quantized MatMul weight against the float weight,
// 10·log10(Σw²/Σ(w−ŵ)²) over all of them, read back from the written
// MatMulNBits initializers. Medians close each binary's rows.
//
//	go build -o /tmp/coreaiq ./cmd/coreaiq
//	go run ./bench/llm -coreaiq /tmp/coreaiq -sizes 168m,1.26b -external
//	go run ./bench/llm -coreaiq /tmp/new,/tmp/old -sizes 168m -repeat 3
//
// Run it from the repository root (it runs llamagen with `go run`).
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coreaiq/coreaiq/bench/internal/benchio"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func main() {
	bins := flag.String("coreaiq", "coreaiq", "coreaiq binaries to compare, comma-separated")
	sizes := flag.String("sizes", "168m", "decoder sizes (llamagen -size), comma-separated")
	fp16 := flag.Bool("fp16", false, "float16 decoders")
	external := flag.Bool("external", false, "write the decoders with external data")
	preset := flag.String("preset", "w4", "preset")
	repeat := flag.Int("repeat", 1, "runs per binary")
	work := flag.String("work", "", "folder for the models (default: a temporary one, removed at the end)")
	flag.Parse()
	if err := run(strings.Split(*bins, ","), strings.Split(*sizes, ","), *fp16, *external, *preset, *repeat, *work); err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		os.Exit(1)
	}
}

type result struct {
	wall, user time.Duration
	rssMiB     float64
	sqnr       float64
}

func run(bins, sizes []string, fp16, external bool, preset string, repeat int, work string) error {
	if work == "" {
		tmp, err := os.MkdirTemp("", "bench-llm")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		work = tmp
	}
	for _, size := range sizes {
		dir := filepath.Join(work, size)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		model := filepath.Join(dir, "llama.onnx")
		args := []string{"run", "./internal/testmodels/llama/llamagen", "-size", size, "-o", model}
		if fp16 {
			args = append(args, "-fp16")
		}
		if external {
			args = append(args, "-external")
		}
		gen := exec.Command("go", args...)
		gen.Stderr = os.Stderr
		out, err := gen.Output()
		if err != nil {
			return fmt.Errorf("llamagen: %w", err)
		}
		fmt.Printf("%s (%s, fp16 %v, external data %v, preset %s)\n", strings.TrimSpace(string(out)), size, fp16, external, preset)
		results := make([][]result, len(bins))
		for r := range repeat {
			for i, bin := range bins {
				res, err := quantize(bin, model, filepath.Join(dir, fmt.Sprintf("out%d", i), "llama.w4.onnx"), preset)
				if err != nil {
					return err
				}
				results[i] = append(results[i], res)
				fmt.Printf("  %-24s run %d: wall %7.2fs  user %7.2fs  peak RSS %7.1f MiB  weight SQNR %.3f dB\n",
					filepath.Base(bin), r+1, res.wall.Seconds(), res.user.Seconds(), res.rssMiB, res.sqnr)
			}
		}
		for i, bin := range bins {
			var wall, user, rss []float64
			for _, r := range results[i] {
				wall, user, rss = append(wall, r.wall.Seconds()), append(user, r.user.Seconds()), append(rss, r.rssMiB)
			}
			fmt.Printf("  %-24s median: wall %7.2fs  user %7.2fs  peak RSS %7.1f MiB\n", filepath.Base(bin),
				benchio.Median(wall), benchio.Median(user), benchio.Median(rss))
		}
		if len(bins) > 1 {
			for i := 1; i < len(bins); i++ {
				var w, u []float64
				for r := range results[0] {
					w = append(w, results[i][r].wall.Seconds()/results[0][r].wall.Seconds())
					u = append(u, results[i][r].user.Seconds()/results[0][r].user.Seconds())
				}
				fmt.Printf("  %s / %s: median wall ratio %.2f, user CPU ratio %.2f\n", filepath.Base(bins[i]), filepath.Base(bins[0]),
					benchio.Median(w), benchio.Median(u))
			}
		}
	}
	return nil
}

func quantize(bin, model, out, preset string) (result, error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return result{}, err
	}
	cmd := exec.Command(bin, "quantize", "--model", model, "--preset", preset, "--format", "ort-nbits", "-o", out)
	start := time.Now()
	b, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("%v: %w\n%s", cmd.Args, err, b)
	}
	res := result{wall: wall, user: cmd.ProcessState.UserTime(),
		rssMiB: float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024}
	res.sqnr, err = weightSQNR(model, out)
	return res, err
}

// weightSQNR pairs each MatMulNBits node of the quantized model with the
// MatMul of the same name in the float model and accumulates the error of
// its dequantized weight, one weight at a time.
func weightSQNR(floatPath, quantPath string) (float64, error) {
	fm, err := onnxgraph.Load(floatPath)
	if err != nil {
		return 0, err
	}
	qm, err := onnxgraph.Load(quantPath)
	if err != nil {
		return 0, err
	}
	var sig, noise float64
	count := 0
	for _, n := range qm.Graph.Nodes {
		if n.OpType != "MatMulNBits" {
			continue
		}
		src := fm.Graph.Node(n.Name)
		if src == nil || len(src.Inputs) < 2 || src.Inputs[1].Const == nil {
			return 0, fmt.Errorf("%s has no float MatMul weight of the same name", n)
		}
		w, err := tensor.FromProto(src.Inputs[1].Const, fm)
		if err != nil {
			return 0, err
		}
		wf, err := w.AsFloat32()
		if err != nil {
			return 0, err
		}
		consts := make([]*tensor.Tensor, 4)
		for i := 1; i < min(4, len(n.Inputs)); i++ {
			if v := n.Inputs[i]; v != nil && v.Const != nil {
				if consts[i], err = tensor.FromProto(v.Const, qm); err != nil {
					return 0, err
				}
			}
		}
		k, nn := int(n.Attr("K").GetI()), int(n.Attr("N").GetI())
		dq, err := runtime.DequantizeNBits(k, nn, int(n.Attr("bits").GetI()), int(n.Attr("block_size").GetI()), consts[1], consts[2], consts[3])
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n, err)
		}
		if len(dq) != len(wf) {
			return 0, fmt.Errorf("%s: %d dequantized values for a weight of %d", n, len(dq), len(wf))
		}
		for i, x := range wf {
			d := float64(x) - float64(dq[i])
			sig += float64(x) * float64(x)
			noise += d * d
		}
		count++
	}
	if count == 0 {
		return 0, fmt.Errorf("%s has no MatMulNBits node", quantPath)
	}
	return 10 * math.Log10(sig/noise), nil
}

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
// With -gptq it runs the w4-accurate preset (GPTQ) instead, on 32
// sequences of 128 token ids (seeded, written as an .npy of int64), and
// prints besides wall, user and peak RSS the per-layer reconstruction
// error GPTQ reached against round-to-nearest, from the report: how many
// layers GPTQ touched, on how many its weighted error ‖X(W − Ŵ)‖² is
// below round-to-nearest's, and the worst ratio of the two. With -awq it
// runs AWQ the same way: the w4-accurate preset with AWQ in place of GPTQ
// (the config written next to the model), the layer errors AWQ's.
//
//	go run ./bench/llm -coreaiq /tmp/coreaiq -sizes 168m -external -gptq
//	go run ./bench/llm -coreaiq /tmp/coreaiq -sizes 168m -external -awq
//
//	go build -o /tmp/coreaiq ./cmd/coreaiq
//	go run ./bench/llm -coreaiq /tmp/coreaiq -sizes 168m,1.26b -external
//	go run ./bench/llm -coreaiq /tmp/new,/tmp/old -sizes 168m -repeat 3
//
// Run it from the repository root (it runs llamagen with `go run`).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
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
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// The -gptq and -awq calibration data: sequences × tokens of ids.
const (
	gptqSequences = 32
	gptqTokens    = 128
)

func main() {
	bins := flag.String("coreaiq", "coreaiq", "coreaiq binaries to compare, comma-separated")
	sizes := flag.String("sizes", "168m", "decoder sizes (llamagen -size), comma-separated")
	fp16 := flag.Bool("fp16", false, "float16 decoders")
	external := flag.Bool("external", false, "write the decoders with external data")
	preset := flag.String("preset", "w4", "preset")
	repeat := flag.Int("repeat", 1, "runs per binary")
	work := flag.String("work", "", "folder for the models (default: a temporary one, removed at the end)")
	gptq := flag.Bool("gptq", false, fmt.Sprintf("GPTQ (preset w4-accurate) on %d sequences of %d token ids, with the per-layer error against round-to-nearest", gptqSequences, gptqTokens))
	awq := flag.Bool("awq", false, fmt.Sprintf("AWQ (preset w4-accurate with AWQ in place of GPTQ) on %d sequences of %d token ids, with the per-layer error against round-to-nearest", gptqSequences, gptqTokens))
	flag.Parse()
	algorithm := ""
	switch {
	case *gptq && *awq:
		fmt.Fprintln(os.Stderr, "llm: -gptq and -awq exclude each other")
		os.Exit(2)
	case *gptq:
		algorithm, *preset = "gptq", "w4-accurate"
	case *awq:
		algorithm, *preset = "awq", "w4-accurate"
	}
	if err := run(strings.Split(*bins, ","), strings.Split(*sizes, ","), *fp16, *external, *preset, *repeat, *work, algorithm); err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		os.Exit(1)
	}
}

type result struct {
	wall, user time.Duration
	rssMiB     float64
	sqnr       float64
	layers     layerErrors
}

// layerErrors sums up an algorithm's layer reports: layers touched,
// layers whose error is below round-to-nearest's, and the worst error
// ratio.
type layerErrors struct {
	algorithm        string
	layers, improved int
	worst            float64
}

func (e layerErrors) String() string {
	if e.layers == 0 {
		return ""
	}
	name := strings.ToUpper(e.algorithm)
	return fmt.Sprintf("  %s layers %d, error below round-to-nearest on %d, worst error ratio %s/RTN %.3f", name, e.layers, e.improved, name, e.worst)
}

func run(bins, sizes []string, fp16, external bool, preset string, repeat int, work string, algorithm string) error {
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
		var data, config string
		if algorithm != "" {
			data = filepath.Join(dir, "calib_input_ids.npy")
			if err := writeTokenIDs(data, model); err != nil {
				return err
			}
			fmt.Printf("  calibration: %d sequences x %d token ids\n", gptqSequences, gptqTokens)
		}
		if algorithm == "awq" {
			config = filepath.Join(dir, "w4-awq.yaml")
			if err := writeAWQConfig(config, preset); err != nil {
				return err
			}
		}
		results := make([][]result, len(bins))
		for r := range repeat {
			for i, bin := range bins {
				res, err := quantize(bin, model, filepath.Join(dir, fmt.Sprintf("out%d", i), "llama.w4.onnx"), preset, config, data, algorithm)
				if err != nil {
					return err
				}
				results[i] = append(results[i], res)
				fmt.Printf("  %-24s run %d: wall %7.2fs  user %7.2fs  peak RSS %7.1f MiB  weight SQNR %.3f dB%s\n",
					filepath.Base(bin), r+1, res.wall.Seconds(), res.user.Seconds(), res.rssMiB, res.sqnr, res.layers)
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

// quantize runs bin on model with the config file, else the preset, and
// reads the layer reports of algorithm ("" for none) from its report.
func quantize(bin, model, out, preset, config, data, algorithm string) (result, error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return result{}, err
	}
	report := out + ".report.json"
	args := []string{"quantize", "--model", model, "--preset", preset, "--format", "ort-nbits", "-o", out, "--report", report}
	if config != "" {
		args = []string{"quantize", "--config", config, "--model", model, "--format", "ort-nbits", "-o", out, "--report", report}
	}
	if data != "" {
		args = append(args, "--data", data)
	}
	cmd := exec.Command(bin, args...)
	start := time.Now()
	b, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("%v: %w\n%s", cmd.Args, err, b)
	}
	res := result{wall: wall, user: cmd.ProcessState.UserTime(),
		rssMiB: float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024}
	res.sqnr, err = weightSQNR(model, out)
	if err != nil {
		return res, err
	}
	if algorithm != "" {
		res.layers, err = algorithmLayers(report, algorithm)
	}
	return res, err
}

// writeAWQConfig writes the preset's config (configs/presets, read from
// the repository root) with AWQ in place of its algorithms.
func writeAWQConfig(path, preset string) error {
	b, err := os.ReadFile(filepath.Join("configs", "presets", preset+".yaml"))
	if err != nil {
		return err
	}
	text := string(b)
	i := strings.Index(text, "\nalgorithms:\n")
	if i < 0 {
		return fmt.Errorf("preset %s has no algorithms section to replace", preset)
	}
	return os.WriteFile(path, []byte(text[:i+1]+"algorithms:\n  awq: true\n"), 0o644)
}

// writeTokenIDs writes the -gptq and -awq calibration data for model: ids drawn
// uniformly below the vocabulary size (the last dimension of the
// logits), from a fixed seed.
func writeTokenIDs(path, model string) error {
	m, err := onnxgraph.Load(model)
	if err != nil {
		return err
	}
	if len(m.Graph.Outputs) == 0 {
		return fmt.Errorf("%s has no output", model)
	}
	dims, ok := m.Graph.Outputs[0].Shape()
	if !ok || len(dims) == 0 || dims[len(dims)-1].Size <= 0 {
		return fmt.Errorf("%s: output %q has no fixed vocabulary size", model, m.Graph.Outputs[0].Name)
	}
	vocab := int(dims[len(dims)-1].Size)
	rng := rand.New(rand.NewPCG(2026, 128))
	ids := make([]int64, gptqSequences*gptqTokens)
	for i := range ids {
		ids[i] = int64(rng.IntN(vocab))
	}
	return npy.WriteNPYFile(path, tensor.FromInt64(ids, gptqSequences, gptqTokens))
}

// reportDB is a report's figure in dB: a number, or "inf" / "-inf".
type reportDB float64

func (d *reportDB) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"inf"`:
		*d = reportDB(math.Inf(1))
		return nil
	case `"-inf"`:
		*d = reportDB(math.Inf(-1))
		return nil
	}
	var f float64
	err := json.Unmarshal(b, &f)
	*d = reportDB(f)
	return err
}

// algorithmLayers reads an algorithm's layer reports of a quantize report:
// the local SQNR of round-to-nearest (before) and of the result (after),
// both against the same signal, so the error ratio is
// 10^((before − after)/10).
func algorithmLayers(path, algorithm string) (layerErrors, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return layerErrors{}, err
	}
	var rep struct {
		Algorithms []struct {
			Algorithm string    `json:"algorithm"`
			Before    *reportDB `json:"local_sqnr_before_db"`
			After     *reportDB `json:"local_sqnr_after_db"`
			Skipped   string    `json:"skipped"`
		} `json:"algorithms"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return layerErrors{}, fmt.Errorf("%s: %w", path, err)
	}
	e := layerErrors{algorithm: algorithm}
	for _, a := range rep.Algorithms {
		if a.Algorithm != algorithm || a.Skipped != "" || a.Before == nil || a.After == nil {
			continue
		}
		e.layers++
		ratio := math.Pow(10, float64(*a.Before-*a.After)/10)
		if ratio < 1 {
			e.improved++
		}
		e.worst = max(e.worst, ratio)
	}
	return e, nil
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

// Command palettize compares k-means palettization with blocked int4 on
// shared models: for each model, the file size, the bits per weight over
// the weights of Conv, ConvTranspose, Gemm, MatMul and embedding Gathers
// (LUTs, scales and the weights left in float at 32 bits included), and
// the output SQNR against the float model on the evaluation samples
// (built-in engine), for plain and data-aware palettization at each
// n_bits and for the w4 preset (int4, blocks of 32, float32 scales: 5
// bits per weight). Bits are counted as stored: indices of up to 4 bits
// take 4 (uint4), wider ones 8 (uint8).
//
//	go run ./bench/palettize -models resnet18,mobilenetv2,bert_encoder -bits 2,4,6 -group-size 8
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/bench/internal/benchio"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func main() {
	shared := flag.String("shared", benchio.DefaultModels(), "shared model folder")
	models := flag.String("models", "resnet18,mobilenetv2,digits_resnet,bert_encoder,gpt_decoder", "model folders")
	bits := flag.String("bits", "2,4,6", "n_bits of the palettizations")
	group := flag.Int("group-size", 8, "channels per LUT (per_grouped_channel; 0: per tensor)")
	samples := flag.Int("samples", 16, "calibration samples for the data-aware mode")
	evalN := flag.Int("eval", 16, "evaluation samples")
	threads := flag.Int("threads", 0, "threads (0: one per CPU)")
	flag.Parse()
	fmt.Printf("%-14s %-26s %12s %9s %11s\n", "model", "weights", "file bytes", "bits/w", "output SQNR")
	for _, name := range strings.Split(*models, ",") {
		if err := bench(filepath.Join(*shared, name), name, *bits, *group, *samples, *evalN, *threads); err != nil {
			fmt.Fprintf(os.Stderr, "palettize: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}

type method struct {
	name    string
	quant   *config.QuantizerConfig
	palette *config.QuantizerConfig
	aware   bool
}

func bench(dir, name, bitList string, group, samples, evalN, threads int) error {
	m, err := onnxgraph.Load(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return err
	}
	rs, err := runtime.Open("go", m, runtime.Options{Threads: threads})
	if err != nil {
		return err
	}
	inputs := rs.Inputs()
	rs.Close()
	files := func(prefix string) []string {
		var out []string
		for _, in := range inputs {
			out = append(out, in.Name+"="+benchio.DataFile(dir, prefix, in.Name))
		}
		return out
	}
	calib, err := calibrate.Open(inputs, files("calib"), nil)
	if err != nil {
		return err
	}
	defer calib.Close()
	eval, err := calibrate.Open(inputs, files("eval"), nil)
	if err != nil {
		return err
	}
	defer eval.Close()
	w4, err := config.Preset("w4")
	if err != nil {
		return err
	}
	methods := []method{{name: "float"}, {name: "w4 preset", quant: w4}}
	for _, b := range strings.Split(bitList, ",") {
		n, err := strconv.Atoi(b)
		if err != nil {
			return err
		}
		gran := "per_tensor"
		if group > 0 {
			gran = fmt.Sprintf("per_grouped_channel, group_size: %d", group)
		}
		text := fmt.Sprintf("kmeans_palettization_config:\n  global_config: {n_bits: %d, granularity: %s}\n", n, gran)
		cfg, err := config.Parse([]byte(text), "bench.yaml")
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%d-bit LUT", n)
		if group > 0 {
			label += fmt.Sprintf(" /%dch", group)
		}
		methods = append(methods, method{name: label, quant: cfg.Quant, palette: cfg.Palette},
			method{name: label + " data-aware", quant: cfg.Quant, palette: cfg.Palette, aware: true})
	}
	floatSize := proto.Size(m.Proto)
	set, err := weightSet(m)
	if err != nil {
		return err
	}
	for _, me := range methods {
		out, bpw, size := m, 32.0, floatSize
		if me.quant != nil {
			u := &passes.Unit{Model: m, Config: me.quant, Palette: me.palette, Write: finalize.Options{Threads: threads}}
			if me.aware {
				u.Calibrate = passes.EngineCalibrator("go", runtime.Options{Threads: threads}, calib,
					calibrate.Options{Samples: samples, BatchSize: fixedBatch(m, 4)}, nil)
			}
			if _, err := passes.Run(context.Background(), u, passes.RunOptions{}); err != nil {
				return fmt.Errorf("%s: %w", me.name, err)
			}
			out, size = u.Result.Model, proto.Size(u.Result.Model.Proto)
			bpw = bitsPerWeight(set, u.Result)
		}
		sq, err := outputSQNR(m, out, eval, evalN, threads)
		if err != nil {
			return fmt.Errorf("%s: %w", me.name, err)
		}
		fmt.Printf("%-14s %-26s %12d %9.3f %8s dB\n", name, me.name, size, bpw, sq)
	}
	return nil
}

// weightSet is the element count of each weight palettization can take
// (every Conv, ConvTranspose, Gemm, MatMul and embedding weight).
func weightSet(m *onnxgraph.Model) (map[string]int, error) {
	cfg, err := config.Parse([]byte("kmeans_palettization_config:\n  global_config: {weight_threshold: 0, cluster_dim: 1}\n"), "all.yaml")
	if err != nil {
		return nil, err
	}
	res, err := config.ResolvePalettization(cfg.Palette, m.Graph)
	if err != nil {
		return nil, err
	}
	set := map[string]int{}
	for _, w := range res.Palettized() {
		set[w.Value] = tensor.NumElements(w.Shape)
	}
	return set, nil
}

// bitsPerWeight is the stored bits over the set's elements: a palettized
// weight's bits per weight (LUTs included), a quantized weight's codes and
// 32-bit scales (and zero points at their width), 32 bits for the rest.
func bitsPerWeight(set map[string]int, r *finalize.Result) float64 {
	bits := map[string]float64{}
	for _, p := range r.Palettes {
		bits[p.Value] = p.Report.BitsPerWeight * float64(set[p.Value])
	}
	for _, t := range r.Tensors {
		if n, ok := set[t.Value]; ok && t.Role == plan.Weight && t.Spec != nil {
			b := float64(t.Spec.DType.Bits()*n) + 32*float64(len(t.Params.Scales))
			if t.Spec.QScheme.String() == "asymmetric" {
				b += float64(t.Spec.DType.Bits() * len(t.Params.ZeroPoints))
			}
			bits[t.Value] = b
		}
	}
	var total, elems float64
	for v, n := range set {
		b, ok := bits[v]
		if !ok {
			b = 32 * float64(n)
		}
		total += b
		elems += float64(n)
	}
	return total / elems
}

// outputSQNR runs both models on the first n evaluation samples and
// returns the lowest SQNR over the float outputs.
func outputSQNR(ref, cand *onnxgraph.Model, eval calibrate.Source, n, threads int) (compare.DB, error) {
	rs, err := runtime.Open("go", ref, runtime.Options{Threads: threads})
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	cs, err := runtime.Open("go", cand, runtime.Options{Threads: threads})
	if err != nil {
		return 0, err
	}
	defer cs.Close()
	batch, total := fixedBatch(ref, 4), min(n, eval.Samples())
	stats := map[string]*compare.Stats{}
	for s := 0; s < total; s += batch {
		in, err := eval.Batch(s, min(s+batch, total))
		if err != nil {
			return 0, err
		}
		a, err := rs.Run(context.Background(), in, runtime.RunOptions{})
		if err != nil {
			return 0, err
		}
		b, err := cs.Run(context.Background(), in, runtime.RunOptions{})
		if err != nil {
			return 0, err
		}
		for name, x := range a {
			xf, err := x.AsFloat32()
			if err != nil || x.DType != tensor.Float {
				continue
			}
			yf, err := b[name].AsFloat32()
			if err != nil {
				return 0, err
			}
			if stats[name] == nil {
				stats[name] = &compare.Stats{}
			}
			if err := stats[name].Add(xf, yf); err != nil {
				return 0, err
			}
		}
	}
	names := make([]string, 0, len(stats))
	for k := range stats {
		names = append(names, k)
	}
	sort.Strings(names)
	worst := compare.DB(math.Inf(1))
	for _, k := range names {
		worst = min(worst, stats[k].SQNR())
	}
	return worst, nil
}

// fixedBatch is the batch size the model's inputs fix on axis 0, or def.
func fixedBatch(m *onnxgraph.Model, def int) int {
	for _, v := range m.Graph.Inputs {
		if dims, ok := v.Shape(); ok && len(dims) > 0 && dims[0].Size > 0 && !v.IsConst() {
			return int(dims[0].Size)
		}
	}
	return def
}

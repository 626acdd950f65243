package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// sharedData returns the --data flags (NAME=FILE.npy, one per model input,
// in name order) for a shared model's calib_ or eval_ files.
func sharedData(t *testing.T, dir, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, prefix+"_*.npy"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var flags []string
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), prefix+"_"), ".npy")
		if name == "labels" {
			continue
		}
		flags = append(flags, "--data", name+"="+f)
	}
	if len(flags) == 0 {
		t.Fatalf("%s: no %s_*.npy files", dir, prefix)
	}
	return flags
}

// dB reads an SQNR of the JSON report: a number, or "inf"/"-inf".
type dB float64

func (d *dB) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("SQNR %s: %w", b, err)
		}
		*d = dB(f)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*d = dB(f)
	return nil
}

// compareJSON is the part of `compare --format json` the tests read.
type compareJSON struct {
	Samples int `json:"samples"`
	Outputs []struct {
		Name          string   `json:"name"`
		Shape         []int    `json:"shape"`
		SQNR          dB       `json:"sqnr_db"`
		Cosine        float64  `json:"cosine"`
		Top1Agreement *float64 `json:"top1_agreement"`
		CandAccuracy  *float64 `json:"candidate_accuracy"`
	} `json:"outputs"`
	Layers []struct {
		Tensor    string `json:"tensor"`
		OpType    string `json:"op_type"`
		DType     string `json:"dtype"`
		Rule      string `json:"rule"`
		SQNR      dB     `json:"sqnr_db"`
		LocalSQNR dB     `json:"local_sqnr_db"`
		NonFinite int64  `json:"non_finite"`
	} `json:"layers"`
	Unpaired []struct {
		Value, Reason string
	} `json:"unpaired"`
	WeightDequantizers int `json:"weight_dequantizers"`
}

// TestCompareSharedModels runs `coreaiq quantize` and then `coreaiq compare
// --per-layer` on every shared model: w8a8 on all of them, w4 on the small
// ones too (the larger models only run w8a8 to keep the test short). It
// checks that every output is compared with a finite SQNR above a floor
// that only a broken quantization or comparison misses, that every
// quantized activation of a w8a8 model has a per-layer entry with its rule,
// worst first, that weight-only models list no activations, and that the
// HTML report is written.
func TestCompareSharedModels(t *testing.T) {
	shared := testutil.SharedModels(t)
	type quant struct {
		preset string
		// floor is the SQNR in dB every output must reach.
		floor float64
	}
	w8a8 := quant{preset: "w8a8", floor: 8}
	w4 := quant{preset: "w4", floor: 10}
	cases := []struct {
		model string
		quant []quant
		// batch is the calibration and comparison batch size (0: not
		// given, the model's fixed batch or the default); samples the
		// number of calibration and of evaluation samples.
		batch, samples int
		labels         bool
	}{
		{"digits_lenet", []quant{w8a8, w4}, 8, 32, true},
		{"digits_mlp", []quant{w8a8, w4}, 8, 32, true},
		{"digits_resnet", []quant{w8a8, w4}, 8, 32, true},
		{"mnist-cntk-op8", []quant{w8a8, w4}, 0, 16, true}, // batch: the model's fixed 1
		// SqueezeNet 1.0 (opset 7, raised through the version adapters)
		// ends in a Softmax over 1000 classes: small errors in the logits
		// move the probabilities a lot, so the SQNR of its output is low
		// (here, 4 calibration samples: w8a8 1.4 dB, w4 6.1 dB; w8a8 on
		// all 16 calibration samples and 16 evaluation samples: 3.6 dB,
		// 62% top-1 and 94% top-5 agreement). A broken quantization is at
		// or below 0 dB.
		{"squeezenet1.0-fp32", []quant{{preset: "w8a8", floor: 0.5}, {preset: "w4", floor: 3}}, 2, 4, false},
		{"resnet18", []quant{w8a8}, 2, 4, false},
		{"mobilenetv2", []quant{w8a8}, 2, 4, false},
		{"bert_encoder", []quant{w8a8}, 2, 4, false},
		{"gpt_decoder", []quant{w8a8}, 2, 4, false},
		{"lstm_lm", []quant{w8a8}, 2, 4, false},
	}
	for _, c := range cases {
		dir := filepath.Join(shared, c.model)
		model := filepath.Join(dir, "model.onnx")
		for _, q := range c.quant {
			t.Run(c.model+"/"+q.preset, func(t *testing.T) {
				tmp := t.TempDir()
				out := filepath.Join(tmp, "q.onnx")
				var batch []string
				if c.batch > 0 {
					batch = []string{"--batch-size", fmt.Sprint(c.batch)}
				}
				args := append([]string{"quantize", "--model", model, "-o", out, "--samples", fmt.Sprint(c.samples),
					"--preset", q.preset, "--log-level", "error"}, batch...)
				if code, _, stderr := runCLI(t, append(args, sharedData(t, dir, "calib")...)...); code != 0 {
					t.Fatalf("quantize: exit %d\n%s", code, stderr)
				}
				refModel, err := onnxgraph.Load(model)
				if err != nil {
					t.Fatal(err)
				}
				candModel, err := onnxgraph.Load(out)
				if err != nil {
					t.Fatal(err)
				}
				activations := 0
				for _, n := range candModel.Graph.Nodes {
					if n.OpType == "QuantizeLinear" && !n.Inputs[0].IsConst() {
						activations++
					}
				}

				html := filepath.Join(tmp, "report.html")
				args = append([]string{"compare", model, out, "--samples", fmt.Sprint(c.samples),
					"--per-layer", "--format", "json", "--html", html}, batch...)
				if c.labels {
					args = append(args, "--labels", filepath.Join(dir, "eval_labels.npy"))
				}
				code, stdout, stderr := runCLI(t, append(args, sharedData(t, dir, "eval")...)...)
				if code != 0 {
					t.Fatalf("compare: exit %d\n%s", code, stderr)
				}
				var r compareJSON
				if err := json.Unmarshal([]byte(stdout), &r); err != nil {
					t.Fatalf("compare --format json: %v\n%s", err, stdout)
				}
				if r.Samples != c.samples {
					t.Errorf("%d samples compared, want %d", r.Samples, c.samples)
				}
				if len(r.Outputs) != len(refModel.Graph.Outputs) {
					t.Errorf("%d outputs compared, the model has %d", len(r.Outputs), len(refModel.Graph.Outputs))
				}
				for _, o := range r.Outputs {
					s := float64(o.SQNR)
					if math.IsNaN(s) || math.IsInf(s, 0) || s < q.floor {
						t.Errorf("output %q %v: SQNR %v dB, want a finite value of at least %v dB", o.Name, o.Shape, s, q.floor)
					}
					// [batch, classes] and [batch, classes, 1, 1] get top-1 agreement.
					classifier := len(o.Shape) >= 2 && o.Shape[1] >= 2
					for _, d := range o.Shape[min(2, len(o.Shape)):] {
						classifier = classifier && d == 1
					}
					if classifier != (o.Top1Agreement != nil) {
						t.Errorf("output %q %v: top-1 agreement %v", o.Name, o.Shape, o.Top1Agreement)
					}
					if c.labels && o.CandAccuracy == nil {
						t.Errorf("output %q: no accuracy against the labels", o.Name)
					}
					t.Logf("%s: SQNR %.2f dB, cosine %.6f", o.Name, s, o.Cosine)
				}
				if len(r.Unpaired) > 0 {
					t.Errorf("quantized values without a per-layer entry: %+v", r.Unpaired)
				}
				if len(r.Layers) != activations {
					t.Errorf("%d per-layer entries, the candidate quantizes %d activations", len(r.Layers), activations)
				}
				if q.preset == "w4" && (activations != 0 || r.WeightDequantizers == 0) {
					t.Errorf("weight-only model: %d quantized activations, %d weight dequantizers", activations, r.WeightDequantizers)
				}
				for i, l := range r.Layers {
					// Masks of −Inf (bert_encoder, gpt_decoder) saturate in
					// QuantizeLinear; the layer's SQNR covers the finite values.
					if l.Rule == "" || l.DType == "" || math.IsNaN(float64(l.SQNR)) || math.IsInf(float64(l.SQNR), -1) || math.IsNaN(float64(l.LocalSQNR)) {
						t.Errorf("layer %q: %+v", l.Tensor, l)
					}
					if i > 0 && l.SQNR < r.Layers[i-1].SQNR {
						t.Errorf("layers are not worst first: %q (%v dB) after %q (%v dB)", l.Tensor, l.SQNR, r.Layers[i-1].Tensor, r.Layers[i-1].SQNR)
					}
				}
				masked := 0
				for _, l := range r.Layers {
					if l.NonFinite > 0 {
						masked++
					}
				}
				if len(r.Layers) > 0 {
					t.Logf("%d layers with values infinite on one side only", masked)
					t.Logf("worst layer %s (%s): %.2f dB, local %.2f dB", r.Layers[0].Tensor, r.Layers[0].OpType, float64(r.Layers[0].SQNR), float64(r.Layers[0].LocalSQNR))
				}
				page, err := os.ReadFile(html)
				if err != nil {
					t.Fatalf("--html: %v", err)
				}
				if !strings.Contains(string(page), "<html") || !strings.Contains(string(page), r.Outputs[0].Name) {
					t.Errorf("--html wrote %d bytes without the report", len(page))
				}
			})
		}
	}
}

// badActivationsConfig quantizes every activation to int4 (16 levels):
// a deliberately bad quantization that the quality gates must catch.
const badActivationsConfig = `quantization_spec:
  activation: &activation
    dtype: int4
    qscheme: symmetric
    granularity: { type: per_tensor }
  weight: &weight
    dtype: int8
    qscheme: symmetric
    granularity: { type: per_channel }
quantization_config:
  global_config:
    op_input_spec:
      "*": *activation
    op_output_spec:
      "*": *activation
    op_state_spec:
      weight: *weight
`

// TestGateCatchesBadQuantization is the CI use of the gates on a real
// model: int4 activations everywhere make `compare --min-sqnr 20` and
// `quantize --eval-samples N --min-sqnr 20` exit 3, while the default w8a8
// quantization of the same model passes the same gate.
func TestGateCatchesBadQuantization(t *testing.T) {
	dir := filepath.Join(testutil.SharedModels(t), "digits_resnet")
	model := filepath.Join(dir, "model.onnx")
	calib := "input=" + filepath.Join(dir, "calib_input.npy")
	eval := "input=" + filepath.Join(dir, "eval_input.npy")
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "int4-activations.yaml")
	if err := os.WriteFile(bad, []byte(badActivationsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		quant  []string // how to quantize
		code   int      // exit code of compare and of quantize with the held-out gate
		stderr string
	}{
		{"int4 activations", []string{"--config", bad}, 3, "below the minimum of 20.00 dB"},
		{"w8a8", []string{"--preset", "w8a8"}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(tmp, strings.ReplaceAll(c.name, " ", "_")+".onnx")
			args := append([]string{"quantize", "--model", model, "--data", calib, "--samples", "64", "-o", out, "--log-level", "error"}, c.quant...)
			if code, _, stderr := runCLI(t, args...); code != 0 {
				t.Fatalf("quantize: exit %d\n%s", code, stderr)
			}
			code, stdout, stderr := runCLI(t, "compare", model, out, "--data", eval, "--samples", "64", "--min-sqnr", "20")
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Errorf("compare --min-sqnr 20: exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, c.code, c.stderr, stdout, stderr)
			}
			if c.code == 3 && !strings.Contains(stdout, "FAILED") {
				t.Errorf("compare: the table does not show the failed gate:\n%s", stdout)
			}
			t.Logf("compare:\n%s", stdout)

			gated := filepath.Join(tmp, "gated.onnx")
			args = append([]string{"quantize", "--model", model, "--data", calib, "--samples", "160", "--eval-samples", "32",
				"--min-sqnr", "20", "-o", gated, "--log-level", "error"}, c.quant...)
			code, _, stderr = runCLI(t, args...)
			if code != c.code || !strings.Contains(stderr, c.stderr) || !strings.Contains(stderr, "evaluation on 32 held-out samples") {
				t.Errorf("quantize --eval-samples 32 --min-sqnr 20: exit %d, want %d with %q\n%s", code, c.code, c.stderr, stderr)
			}
		})
	}
}

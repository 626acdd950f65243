package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
)

// sharedSQNR quantizes a shared model with a preset (and extra quantize
// flags) on all its calibration samples (default batch size) and returns
// the SQNR of each output on all its evaluation samples, as the README's
// table was measured.
func sharedSQNR(t *testing.T, dir, preset string, extra ...string) map[string]float64 {
	t.Helper()
	return sharedSQNRWith(t, dir, append([]string{"--preset", preset}, extra...)...)
}

// sharedSQNRWith is sharedSQNR with the quantize flags given whole (a
// --config in place of the preset).
func sharedSQNRWith(t *testing.T, dir string, flags ...string) map[string]float64 {
	t.Helper()
	model := filepath.Join(dir, "model.onnx")
	out := filepath.Join(t.TempDir(), "q.onnx")
	args := append([]string{"quantize", "--model", model, "-o", out, "--log-level", "error"}, sharedData(t, dir, "calib")...)
	args = append(args, flags...)
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("quantize %q: exit %d\n%s", flags, code, stderr)
	}
	code, stdout, stderr := runCLI(t, append([]string{"compare", model, out, "--format", "json"}, sharedData(t, dir, "eval")...)...)
	if code != 0 {
		t.Fatalf("compare: exit %d\n%s", code, stderr)
	}
	var r compareJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, o := range r.Outputs {
		got[o.Name] = float64(o.SQNR)
	}
	return got
}

// TestAccuratePresetShared checks on the shared models that --preset
// accurate (uint8 asymmetric percentile activations, MSE weight ranges,
// cross-layer equalization, bias correction and SmoothQuant) gains over
// w8a8 where the README's table says it does. Figures with each model's
// own calib_*.npy and eval_*.npy files, built-in engine, w8a8 → accurate:
// squeezenet1.0-fp32 19.21 → 21.85 dB (19.55 before its fire modules'
// squeeze Convs were equalized with both expand Convs,
// TestEqualizeSeveralReaders; 4.41 → 5.16 without the logit headroom,
// TestLogitHeadroomShared; in ONNX Runtime 19.30 → 22.44),
// mobilenetv2 16.92 → 19.55,
// shufflenet-v2 11.58 → 18.76, resnet18 16.14 → 19.13, yolox-nano 6.90 →
// 15.15, ppocrv3-det 3.98 → 14.46 (9.19 and 12.77 without equalizing
// through their SiLUs and HardSwishes, TestGatedEqualizationShared),
// bert_encoder 27.99 / 36.34 → 28.70 /
// 37.66, bert_encoder-op13 28.03 / 34.30 → 28.70 / 37.66, gpt_decoder
// 22.87 → 25.64, digits_resnet 26.95 → 38.52, digits_lenet 24.83 → 38.99,
// mnist-cntk-op8 18.36 → 39.17, digits_mlp 24.63 → 38.42. lstm_lm is the
// exception (38.91 → 38.36): percentile clips the lower tail of its first
// LSTM's output, which its evaluation samples reach far more often than
// its calibration samples (README "Getting accuracy back"); its bound
// keeps that loss from growing unnoticed.
func TestAccuratePresetShared(t *testing.T) {
	cases := []struct {
		model string
		// gain is the least improvement in dB over w8a8 on every output
		// (negative: the most it may lose).
		gain float64
	}{
		// Its classifier's input keeping its maximum (not clipped at the
		// 99.999th percentile) moved it from 19.85 to 19.55 dB here, to
		// 21.07 from 19.55 in ONNX Runtime and to 20.97 from 20.26 on 76
		// crops of the shared photos (docs/RATIONALE.md); equalizing the
		// fire modules, to 21.85.
		{"squeezenet1.0-fp32", 2},
		{"mobilenetv2", 2},
		{"shufflenet-v2", 6},
		{"resnet18", 2.5},
		{"yolox-nano", 5},
		{"ppocrv3-det", 8},
		{"bert_encoder", 0.5},
		{"bert_encoder-op13", 0.5},
		{"gpt_decoder", 2},
		{"digits_resnet", 10},
		{"digits_lenet", 10},
		{"mnist-cntk-op8", 10},
		{"digits_mlp", 10},
		{"lstm_lm", -0.6},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			checkGain(t, c.model, c.gain, "w8a8", "accurate")
		})
	}
}

// TestAccurateDecomposedEncoder checks that the opset-13 BERT encoder,
// whose LayerNorm and GELU are written out node by node, comes within
// 1 dB of the opset-17 encoder under --preset accurate on every output:
// the patterns quantize the written-out forms at their boundaries
// (28.70 / 37.66 dB on both, same data as above).
func TestAccurateDecomposedEncoder(t *testing.T) {
	shared := testutil.SharedModels(t)
	if testing.Short() {
		t.Skip("two quantizations and comparisons of the BERT encoders")
	}
	fused := sharedSQNR(t, filepath.Join(shared, "bert_encoder"), "accurate")
	decomposed := sharedSQNR(t, filepath.Join(shared, "bert_encoder-op13"), "accurate")
	for name, f := range fused {
		d, ok := decomposed[name]
		if !ok {
			t.Fatalf("output %q missing from bert_encoder-op13's comparison", name)
		}
		t.Logf("%s: bert_encoder %.2f dB, bert_encoder-op13 %.2f dB", name, f, d)
		if d < f-1 {
			t.Errorf("output %q: bert_encoder-op13 %.2f dB, more than 1 dB below bert_encoder's %.2f dB", name, d, f)
		}
	}
}

// TestW4AccuratePresetShared checks on the shared transformer models that
// --preset w4-accurate gains at least 3 dB over w4 (the same int4 blocks
// of 32) on every output. Figures (same data and engine as above):
// gpt_decoder 11.60 → 23.69 dB; bert_encoder last_hidden_state
// 17.24 → 42.17, logits 24.13 → 45.42; bert_encoder-op13 18.91 → 42.17,
// 25.95 → 45.40; lstm_lm 25.85 → 40.42.
func TestW4AccuratePresetShared(t *testing.T) {
	for _, model := range []string{"gpt_decoder", "bert_encoder", "bert_encoder-op13", "lstm_lm"} {
		t.Run(model, func(t *testing.T) {
			checkGain(t, model, 3, "w4", "w4-accurate")
		})
	}
}

// TestGPTQConvShared checks GPTQ on the Conv weights of the shared CNNs:
// int8 per-channel weights alone (--preset w8, activations in float, so
// the output's error is the weights') gain at least 3 dB with
// --algorithms gptq. Figures (same data and engine as above), w8 → w8 +
// gptq: resnet18 23.12 → 31.57 dB, mobilenetv2 24.14 → 31.60,
// squeezenet1.0-fp32 25.11 → 33.83, shufflenet-v2 21.29 → 28.41,
// yolox-nano 19.74 → 33.11, ppocrv3-det 13.06 → 26.44, digits_lenet
// 44.16 → 59.04, digits_resnet 39.30 → 49.11, mnist-cntk-op8
// 42.92 → 51.07.
func TestGPTQConvShared(t *testing.T) {
	for _, model := range []string{"resnet18", "mobilenetv2", "squeezenet1.0-fp32", "shufflenet-v2", "yolox-nano", "ppocrv3-det", "digits_lenet", "digits_resnet", "mnist-cntk-op8"} {
		t.Run(model, func(t *testing.T) {
			checkGain(t, model, 3, "w8", "w8", "--algorithms", "gptq")
		})
	}
}

// TestAlgorithmsShared checks single algorithms on the shared models
// against w8a8 (same data and engine as above): adaround on digits_lenet
// 24.83 → 25.15 dB, smoothquant on gpt_decoder 22.87 → 24.42 dB.
func TestAlgorithmsShared(t *testing.T) {
	cases := []struct {
		model, algorithm string
		gain             float64
	}{
		{"digits_lenet", "adaround", 0.2},
		{"gpt_decoder", "smoothquant", 1},
	}
	for _, c := range cases {
		t.Run(c.model+"/"+c.algorithm, func(t *testing.T) {
			checkGain(t, c.model, c.gain, "w8a8", "w8a8", "--algorithms", c.algorithm)
		})
	}
}

// checkGain quantizes a shared model with the base preset and with the
// candidate preset and flags, and checks that every output of the
// candidate gains at least gain dB.
func checkGain(t *testing.T, model string, gain float64, base, preset string, extra ...string) {
	t.Helper()
	shared := testutil.SharedModels(t)
	if testing.Short() && model != "digits_resnet" && model != "digits_lenet" {
		t.Skipf("%s: two quantizations and comparisons of a large model", model)
	}
	dir := filepath.Join(shared, model)
	b := sharedSQNR(t, dir, base)
	c := sharedSQNR(t, dir, preset, extra...)
	for name, bv := range b {
		cv, ok := c[name]
		if !ok {
			t.Fatalf("output %q missing from the candidate's comparison", name)
		}
		t.Logf("%s: %s %.2f dB, candidate %.2f dB", name, base, bv, cv)
		if cv < bv+gain {
			t.Errorf("output %q: %.2f dB, want at least %s's %.2f dB %+.1f", name, cv, base, bv, gain)
		}
	}
}

// TestLogitHeadroomShared checks the logit headroom where the shared
// models need it: squeezenet1.0's evaluation sample 14 scores its top
// class above every calibration sample's maximum (pool10 [0, 26.11]), so
// without headroom the top logits clip to one code and the prediction
// flips. Figures (all calibration and evaluation samples, built-in
// engine), with → without: w8a8 19.21 → 4.41 dB, accurate 19.55 → 5.16.
func TestLogitHeadroomShared(t *testing.T) {
	shared := testutil.SharedModels(t)
	if testing.Short() {
		t.Skip("four quantizations and comparisons of squeezenet1.0")
	}
	dir := filepath.Join(shared, "squeezenet1.0-fp32")
	for _, preset := range []string{"w8a8", "accurate"} {
		with := sharedSQNR(t, dir, preset)
		without := sharedSQNR(t, dir, preset, "--logit-headroom=false")
		for name, w := range with {
			t.Logf("%s, %s: %.2f dB with headroom, %.2f without", preset, name, w, without[name])
			if w < without[name]+10 {
				t.Errorf("%s, output %q: %.2f dB with headroom, want at least 10 dB above %.2f without", preset, name, w, without[name])
			}
		}
	}
}

// TestGatedEqualizationShared checks on the shared models whose
// convolutions are followed by gated activations (yolox-nano: SiLU written
// as Sigmoid · x; ppocrv3-det: HardSwish written as Add, Clip, Div, Mul)
// that --preset accurate, which equalizes through them, beats the same
// preset with `cross_layer_equalization: {gated: false}`. Figures (each
// model's own calibration and evaluation files, built-in engine), without
// → with: yolox-nano 9.19 → 15.15 dB, ppocrv3-det 12.77 → 14.46.
func TestGatedEqualizationShared(t *testing.T) {
	shared := testutil.SharedModels(t)
	if testing.Short() {
		t.Skip("two quantizations and comparisons of each of two detectors")
	}
	text, err := config.PresetYAML("accurate")
	if err != nil {
		t.Fatal(err)
	}
	preset := string(text)
	off := strings.Replace(preset, "cross_layer_equalization: true", "cross_layer_equalization: {gated: false}", 1)
	if off == preset {
		t.Fatal("the accurate preset no longer reads cross_layer_equalization: true")
	}
	cfg := filepath.Join(t.TempDir(), "no-gated.yaml")
	if err := os.WriteFile(cfg, []byte(off), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model string
		gain  float64
	}{{"yolox-nano", 4}, {"ppocrv3-det", 1}} {
		t.Run(tc.model, func(t *testing.T) {
			dir := filepath.Join(shared, tc.model)
			without := sharedSQNRWith(t, dir, "--config", cfg)
			with := sharedSQNR(t, dir, "accurate")
			for name, w := range with {
				t.Logf("%s: %.2f dB equalized through the gates, %.2f without", name, w, without[name])
				if w < without[name]+tc.gain {
					t.Errorf("output %q: %.2f dB, want at least %.2f + %.1f dB", name, w, without[name], tc.gain)
				}
			}
		})
	}
}

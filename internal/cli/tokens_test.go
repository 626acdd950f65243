package cli

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels/llama"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestTokenIDCalibration quantizes the tiny Llama-shaped decoder
// (llama.Tiny, vocabulary 96) with calibration data of int64 token ids
// (12 sequences of 16 ids from a fixed seed), as a user calibrates a
// decoder: w8a8 activations calibrated on the ids keep the logits above
// 25 dB, and GPTQ fed by the ids' activations gives logits closer to
// float than 4-bit round-to-nearest (18.1 against 17.4 dB measured).
func TestTokenIDCalibration(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "llama.onnx")
	if err := llama.Write(llama.Tiny(), model, false); err != nil {
		t.Fatal(err)
	}
	ids := tensor.New(tensor.Int64, 12, 16)
	rng := rand.New(rand.NewPCG(21, 34))
	for i := range ids.Int64s() {
		ids.Int64s()[i] = int64(rng.IntN(llama.Tiny().Vocab))
	}
	data := "input_ids=" + writeNPY(t, dir, "ids.npy", ids)
	sqnr := func(preset string) float64 {
		t.Helper()
		out := filepath.Join(dir, preset+".onnx")
		if code, _, stderr := runCLI(t, "quantize", "--model", model, "--preset", preset, "--data", data, "-o", out); code != 0 {
			t.Fatalf("quantize --preset %s: exit %d: %s", preset, code, stderr)
		}
		code, stdout, stderr := runCLI(t, "compare", model, out, "--data", data, "--format", "json")
		if code != 0 {
			t.Fatalf("compare %s: exit %d: %s", preset, code, stderr)
		}
		var rep struct {
			Outputs []struct {
				SQNR float64 `json:"sqnr_db"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Outputs) != 1 {
			t.Fatalf("compare output %q: %v", stdout, err)
		}
		return rep.Outputs[0].SQNR
	}
	w8a8 := sqnr("w8a8")
	if w8a8 < 25 {
		t.Errorf("w8a8 calibrated on token ids: logits at %.2f dB, want at least 25", w8a8)
	}
	rtn, gptq := sqnr("w4"), sqnr("w4-accurate")
	if gptq <= rtn {
		t.Errorf("GPTQ on the token ids' activations: logits at %.2f dB, not above round-to-nearest's %.2f dB", gptq, rtn)
	}
	t.Logf("logits SQNR: w8a8 %.2f dB, w4 %.2f dB, w4-accurate %.2f dB", w8a8, rtn, gptq)
}

package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels/llama"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestTiedLMHeadOwnPrecision: the tiny Llama-shaped decoder with lm_head
// tied to the embedding (a MatMul reading the table through a Transpose,
// as torch exports tied weights), its other weights left in float, the
// config's module names giving the embedding Gather and lm_head weights
// of their own. When the two specs differ the lm_head gets a weight of
// its own, "/lm_head/Transpose_output_0", each is quantized as asked and
// the output holds two vocabulary tables; when they agree the table stays
// one tensor read by both. Each is written in QDQ and in ONNX Runtime's
// MatMulNBits form (from inline weights and from external data), runs in
// the built-in engine (and in ONNX Runtime when built with -tags ort), and
// its logits on 12 seeded sequences of 16 token
// ids stay above the SQNR the head's precision allows (measured: 23.6 dB
// with the head in 4-bit blocks of 16, 46.2 dB with it in 8-bit per
// channel and the embedding in float, 43.2 dB with both in 8-bit).
func TestTiedLMHeadOwnPrecision(t *testing.T) {
	const specs = `quantization_spec:
  w4: &w4 {dtype: int4, qscheme: symmetric, granularity: {type: per_block, block_size: 16}, qparam_calculator: static}
  w8: &w8 {dtype: int8, qscheme: symmetric, granularity: per_channel}
`
	entry := func(choice string) string {
		if choice == "float" {
			return "null"
		}
		return "{op_input_spec: null, op_output_spec: null, op_state_spec: {weight: *" + choice + "}}"
	}
	want := map[string]string{"float": "", "w8": "int8 symmetric per_channel", "w4": "int4 symmetric per_block"}
	cases := []struct {
		embed, head string
		external    bool
		// tables is the number of vocabulary tables in the output.
		tables  int
		minSQNR float64
	}{
		{"w8", "w4", false, 2, 20},
		{"w8", "w4", true, 2, 20},
		{"float", "w8", false, 2, 40},
		{"w8", "w8", false, 1, 40},
		{"w8", "w8", true, 1, 40},
	}
	dir := t.TempDir()
	cfg := llama.Tiny()
	cfg.Tied = true
	ids := tensor.New(tensor.Int64, 12, 16)
	rng := rand.New(rand.NewPCG(3, 9))
	for i := range ids.Int64s() {
		ids.Int64s()[i] = int64(rng.IntN(cfg.Vocab))
	}
	data := "input_ids=" + writeNPY(t, dir, "ids.npy", ids)
	models := map[bool]string{}
	for _, external := range []bool{false, true} {
		models[external] = filepath.Join(dir, fmt.Sprintf("external=%v", external), "llama.onnx")
		if err := os.MkdirAll(filepath.Dir(models[external]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := llama.Write(cfg, models[external], external); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		for _, format := range []string{"qdq", "ort-nbits"} {
			name := fmt.Sprintf("embed=%s/head=%s/external=%v/%s", c.embed, c.head, c.external, format)
			t.Run(name, func(t *testing.T) {
				text := specs + "quantization_config:\n  global_config: null\n" +
					"  module_name_configs:\n    model.embed_tokens: " + entry(c.embed) + "\n    lm_head: " + entry(c.head) + "\n"
				conf := filepath.Join(dir, "q.yaml")
				if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				model := models[c.external]
				out, rep := filepath.Join(dir, "q.onnx"), filepath.Join(dir, "q.json")
				code, _, stderr := runCLI(t, "quantize", "--config", conf, "--model", model, "--format", format, "-o", out, "--report", rep)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				var r struct {
					Tensors []struct {
						Value string   `json:"value"`
						Spec  string   `json:"spec"`
						Nodes []string `json:"nodes"`
					} `json:"tensors"`
					Notes []string `json:"notes"`
				}
				b, err := os.ReadFile(rep)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &r); err != nil {
					t.Fatal(err)
				}
				got := map[string]string{} // node → spec of its weight
				values := map[string]string{}
				for _, tt := range r.Tensors {
					for _, n := range tt.Nodes {
						got[n], values[n] = tt.Spec, tt.Value
					}
				}
				untied := c.tables == 2
				if g := got["/model/embed_tokens/Gather"]; !strings.HasPrefix(g, want[c.embed]) || (c.embed == "float") != (g == "") {
					t.Errorf("embedding Gather: weight %q, want %s", g, c.embed)
				}
				if untied {
					if g := got["/lm_head/MatMul"]; !strings.HasPrefix(g, want[c.head]) || g == "" {
						t.Errorf("lm_head: weight %q, want %s", g, c.head)
					}
					if v := values["/lm_head/MatMul"]; v != "/lm_head/Transpose_output_0" {
						t.Errorf("lm_head's weight is %q, want its own, /lm_head/Transpose_output_0", v)
					}
				} else if got["/lm_head/MatMul"] != "" {
					t.Errorf("kept tied, yet lm_head has a weight of its own: %q", got["/lm_head/MatMul"])
				}
				note := "kept tied"
				if untied {
					note = "untied"
				}
				if !slicesContain(r.Notes, `embedding table "model.embed_tokens.weight"`, note) {
					t.Errorf("no note saying the table is %s: %q", note, r.Notes)
				}
				if n := vocabTables(t, out, cfg); n != c.tables {
					t.Errorf("%d vocabulary tables in the output, want %d", n, c.tables)
				}
				for _, engine := range runtime.Engines() {
					code, stdout, stderr := runCLI(t, "compare", model, out, "--data", data, "--engine", engine, "--format", "json")
					if code != 0 {
						t.Fatalf("compare --engine %s: exit %d: %s", engine, code, stderr)
					}
					var cmp struct {
						Outputs []struct {
							SQNR float64 `json:"sqnr_db"`
						} `json:"outputs"`
					}
					if err := json.Unmarshal([]byte(stdout), &cmp); err != nil || len(cmp.Outputs) != 1 {
						t.Fatalf("compare --engine %s output %q: %v", engine, stdout, err)
					}
					if s := cmp.Outputs[0].SQNR; s < c.minSQNR {
						t.Errorf("engine %s: logits at %.2f dB, want at least %g", engine, s, c.minSQNR)
					}
					t.Logf("engine %s: logits %.2f dB", engine, cmp.Outputs[0].SQNR)
				}
			})
		}
	}
}

// slicesContain reports whether one of notes contains every part.
func slicesContain(notes []string, parts ...string) bool {
	for _, n := range notes {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(n, p)
		}
		if all {
			return true
		}
	}
	return false
}

// vocabTables counts the initializers of the model at path holding
// vocabulary × hidden values, whatever their element type and packing.
func vocabTables(t *testing.T, path string, cfg llama.Config) int {
	t.Helper()
	m, err := onnxgraph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, init := range m.Proto.GetGraph().GetInitializer() {
		size := int64(1)
		for _, d := range init.GetDims() {
			size *= d
		}
		switch {
		case size == int64(cfg.Vocab*cfg.Hidden):
			n++
		case init.GetDataType() == int32(tensor.Uint8) && len(init.GetDims()) == 3 && init.GetDims()[0] == int64(cfg.Vocab) && 2*size == int64(cfg.Vocab*cfg.Hidden):
			n++ // MatMulNBits' packed 4-bit weight, [N, blocks, bytes per block]
		}
	}
	return n
}

//go:build ort

package cli

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestSearchInt16InOrt checks that the models the search writes with a
// point raised to int16 (opset 21 int16 QuantizeLinear and
// DequantizeLinear) run in ONNX Runtime 1.23 at every optimization level
// with the outputs of the built-in engine, and that the search itself
// runs with --engine ort: A16W8 (outlierInputModel, w8a8, x raised to
// int16: one int16 QuantizeLinear) and W16 (outlierWeightModel, the
// default config, fc.weight raised to int16: a DequantizeLinear of an
// int16 initializer).
func TestSearchInt16InOrt(t *testing.T) {
	lib, err := ort.Default()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	outlier := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	outlierWeight := writeModel(t, dir, "outlier_weight.onnx", outlierWeightModel())
	weightData := t.TempDir() // its x.npy is not outlierData's
	tests := []struct {
		name   string
		args   []string
		kept   string
		inputs []string
		// int16Q and int16W are the int16 QuantizeLinear nodes and int16
		// weight initializers the model must hold.
		int16Q, int16W int
	}{
		{name: "a16w8", args: append([]string{"--model", outlier, "--preset", "w8a8", "--target-sqnr", "15"}, outlierData(t, dir)...),
			kept: "x to int16 kept", inputs: []string{"x", "z"}, int16Q: 1},
		{name: "w16", args: []string{"--model", outlierWeight, "--data", outlierWeightData(t, weightData, 0), "--target-sqnr", "30"},
			kept: "1 of 3 points (33.3%) above their configured precision: 0 of 2 activations, 1 of 1 weights", inputs: []string{"x"}, int16W: 1},
	}
	for _, tt := range tests {
		for _, engine := range []string{"go", "ort"} {
			t.Run(tt.name+"/"+engine, func(t *testing.T) {
				out := filepath.Join(dir, tt.name+"-"+engine+".onnx")
				code, _, stderr := runCLI(t, append([]string{"quantize", "--engine", engine, "-o", out}, tt.args...)...)
				if code != 0 || !strings.Contains(stderr, tt.kept) {
					t.Fatalf("exit %d, want 0 with %q:\n%s", code, tt.kept, stderr)
				}
				m, err := onnxgraph.Load(out)
				if err != nil {
					t.Fatal(err)
				}
				int16Q, int16W := 0, 0
				for _, n := range m.Graph.Nodes {
					if n.OpType == "QuantizeLinear" && len(n.Inputs) > 2 && n.Inputs[2] != nil && n.Inputs[2].DType() == tensor.Int16 {
						int16Q++
					}
					if n.OpType == "DequantizeLinear" && n.Inputs[0].Const != nil && n.Inputs[0].DType() == tensor.Int16 {
						int16W++
					}
				}
				if int16Q != tt.int16Q || int16W != tt.int16W || m.Opset("") != 21 {
					t.Fatalf("%d int16 QuantizeLinear nodes and %d int16 weights at opset %d, want %d and %d at opset 21",
						int16Q, int16W, m.Opset(""), tt.int16Q, tt.int16W)
				}
				checkOrtAgrees(t, lib, m, tt.inputs)
			})
		}
	}
}

// checkOrtAgrees runs m on 16 samples of the named inputs, uniform in
// [-1, 1) from a fixed seed, in the built-in engine and in ONNX Runtime at
// every optimization level, and wants each output to agree to 60 dB.
func checkOrtAgrees(t *testing.T, lib *ort.Library, m *onnxgraph.Model, inputs []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	in := map[string]*tensor.Tensor{}
	for _, name := range inputs {
		v := tensor.New(tensor.Float, 16, 8)
		for i := range v.Float32s() {
			v.Float32s()[i] = rng.Float32()*2 - 1
		}
		in[name] = v
	}
	goSess, err := runtime.Open("go", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	want, err := goSess.Run(context.Background(), in, runtime.RunOptions{})
	goSess.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []ort.Optimization{ort.OptimizeAll, ort.OptimizeBasic} {
		s, err := lib.Open(m, ort.SessionOptions{IntraOpThreads: 1, Optimization: level})
		if err != nil {
			t.Fatalf("optimization %s: %v", level, err)
		}
		got, err := s.Run(context.Background(), in, runtime.RunOptions{})
		s.Close()
		if err != nil {
			t.Fatalf("optimization %s: %v", level, err)
		}
		for o := range want {
			var st compare.Stats
			w, _ := want[o].AsFloat32()
			g, _ := got[o].AsFloat32()
			if err := st.Add(w, g); err != nil {
				t.Fatal(err)
			}
			if q := st.SQNR(); q < 60 {
				t.Errorf("optimization %s, output %s: ONNX Runtime and the built-in engine agree to %s dB, want 60", level, o, q)
			}
		}
	}
}

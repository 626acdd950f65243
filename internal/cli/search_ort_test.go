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

// TestSearchInt16InOrt checks that the A16W8 model the search writes
// (outlierInputModel, w8a8, x raised to int16: an int16 QuantizeLinear and
// DequantizeLinear at opset 21) runs in ONNX Runtime 1.23 at every
// optimization level with the outputs of the built-in engine, and that
// the search itself runs with --engine ort.
func TestSearchInt16InOrt(t *testing.T) {
	lib, err := ort.Default()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "outlier.onnx", outlierInputModel())
	data := outlierData(t, dir)
	for _, engine := range []string{"go", "ort"} {
		t.Run(engine, func(t *testing.T) {
			out := filepath.Join(dir, engine+".onnx")
			code, _, stderr := runCLI(t, append([]string{"quantize", "--model", model, "--preset", "w8a8", "--engine", engine,
				"--target-sqnr", "15", "-o", out}, data...)...)
			if code != 0 || !strings.Contains(stderr, "x to int16 kept") {
				t.Fatalf("exit %d, want 0 with x raised to int16:\n%s", code, stderr)
			}
			m, err := onnxgraph.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			int16Q := 0
			for _, n := range m.Graph.Nodes {
				if n.OpType == "QuantizeLinear" && len(n.Inputs) > 2 && n.Inputs[2] != nil && n.Inputs[2].DType() == tensor.Int16 {
					int16Q++
				}
			}
			if int16Q != 1 || m.Opset("") != 21 {
				t.Fatalf("%d int16 QuantizeLinear nodes at opset %d, want 1 at opset 21", int16Q, m.Opset(""))
			}
			rng := rand.New(rand.NewPCG(1, 1))
			in := map[string]*tensor.Tensor{}
			for _, name := range []string{"x", "z"} {
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
				for _, o := range []string{"y1", "y2"} {
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
		})
	}
}

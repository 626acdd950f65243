//go:build ort

package cli

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestLowFloatModelsInOrt: a float16 and a bfloat16 model (Conv, Relu,
// Concat of two branches, as SqueezeNet's fire modules are) quantize with
// every 8-bit preset into models that ONNX Runtime 1.23 loads and runs,
// with finite outputs. ONNX Runtime fuses Q/DQ around Concat into
// QLinearConcat, which takes float scales only.
func TestLowFloatModelsInOrt(t *testing.T) {
	lib, err := ort.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		for _, preset := range []string{"w8a8", "ort-x86", "w8"} {
			t.Run(dt.String()+"/"+preset, func(t *testing.T) {
				dir := t.TempDir()
				model := writeModel(t, dir, "m.onnx", lowFloatFire(dt))
				x := lowFloatData(dt, 8)
				data := writeTestSet(t, dir, x)
				out := filepath.Join(dir, "q.onnx")
				if code, _, stderr := runCLI(t, "quantize", "--model", model, "--data", data, "--preset", preset, "-o", out, "--log-level", "error"); code != 0 {
					t.Fatalf("quantize: exit %d\n%s", code, stderr)
				}
				m, err := onnxgraph.Load(out)
				if err != nil {
					t.Fatal(err)
				}
				goSess, err := runtime.Open("go", m, runtime.Options{Threads: 1})
				if err != nil {
					t.Fatalf("built-in engine: %v", err)
				}
				_, err = goSess.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, runtime.RunOptions{})
				goSess.Close()
				if err != nil {
					t.Fatalf("built-in engine: %v", err)
				}
				// What ONNX Runtime cannot run in float (its CPU provider
				// has no bfloat16 Conv) it cannot run quantized either.
				float, err := onnxgraph.Load(model)
				if err != nil {
					t.Fatal(err)
				}
				if s, err := lib.Open(float, ort.SessionOptions{IntraOpThreads: 1}); err != nil {
					t.Skipf("ONNX Runtime refuses the float model too: %v", err)
				} else {
					s.Close()
				}
				for _, level := range []ort.Optimization{ort.OptimizeAll, ort.OptimizeBasic} {
					s, err := lib.Open(m, ort.SessionOptions{IntraOpThreads: 1, Optimization: level})
					if err != nil {
						t.Fatalf("optimization %s: %v", level, err)
					}
					got, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, runtime.RunOptions{})
					s.Close()
					if err != nil {
						t.Fatalf("optimization %s: %v", level, err)
					}
					y, err := got["y"].AsFloat32()
					if err != nil || got["y"].DType != dt {
						t.Fatalf("output y: %v %v", got["y"], err)
					}
					for i, v := range y {
						if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
							t.Fatalf("y[%d] = %v", i, v)
						}
					}
				}
			})
		}
	}
}

// lowFloatFire is x[N,4,6,6] → Conv 1×1 → Relu, Conv 3×3 → Relu, Concat
// on channels → y, every tensor in dt.
func lowFloatFire(dt tensor.DType) *testmodels.Builder {
	b := testmodels.New("fire_"+dt.String(), 13)
	b.Input("x", dt, "N", 4, 6, 6).Output("y", dt, "N", 8, 6, 6)
	r := rand.New(rand.NewPCG(1, 2))
	weight := func(name string, dims ...int64) {
		n := int(dims[0] * dims[1] * dims[2] * dims[3])
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(r.NormFloat64() * 0.3)
		}
		t, err := tensor.Cast(tensor.FromFloat32(w, int(dims[0]), int(dims[1]), int(dims[2]), int(dims[3])), dt)
		if err != nil {
			panic(err)
		}
		p, err := tensor.ToProto(t, name)
		if err != nil {
			panic(err)
		}
		b.Model.Graph.Initializer = append(b.Model.Graph.Initializer, p)
	}
	weight("w1", 4, 4, 1, 1)
	weight("w3", 4, 4, 3, 3)
	b.Node("Conv", "c1", []string{"x", "w1"}, []string{"a"})
	b.Node("Relu", "r1", []string{"a"}, []string{"ra"})
	b.Node("Conv", "c3", []string{"x", "w3"}, []string{"b"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Relu", "r3", []string{"b"}, []string{"rb"})
	b.Node("Concat", "cat", []string{"ra", "rb"}, []string{"y"}, testmodels.AttrInt("axis", 1))
	return b
}

func lowFloatData(dt tensor.DType, n int) *tensor.Tensor {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, n*4*6*6)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	t, err := tensor.Cast(tensor.FromFloat32(x, n, 4, 6, 6), dt)
	if err != nil {
		panic(err)
	}
	return t
}

//go:build ort

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

func TestOrtEngineRegistered(t *testing.T) {
	if !slices.Contains(runtime.Engines(), "ort") {
		t.Fatalf("engines %v lack ort", runtime.Engines())
	}
	m, err := onnxgraph.FromProto(testmodels.MLP().Model, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open("ort", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Engine() != "ort" {
		t.Errorf("Engine() = %q", s.Engine())
	}
	res, err := s.Run(context.Background(), map[string]*tensor.Tensor{"input": tensor.New(tensor.Float, 2, 16)}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if y := res["logits"]; y == nil || !slices.Equal(y.Shape, []int{2, 4}) {
		t.Errorf("logits = %v", y)
	}
}

// TestOrtMissingLibrary: without a library the engine fails with an error
// that names ONNXRUNTIME_LIB and the fetch cache, and the CLI exits 1.
func TestOrtMissingLibrary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ort.LibraryEnv, "")
	t.Setenv(ort.CacheEnv, dir)
	m, err := onnxgraph.FromProto(testmodels.MLP().Model, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = runtime.Open("ort", m, runtime.Options{})
	if !errors.Is(err, ort.ErrLibraryNotFound) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"ONNXRUNTIME_LIB", filepath.Join(dir, ort.Version), "scripts/fetch-ort.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if code := exitCode(err); code != ExitFailure {
		t.Errorf("exit code %d, want %d", code, ExitFailure)
	}
}

// TestRunOrt runs a shared model with `coreaiq run --engine ort`: the
// written outputs are what ONNX Runtime 1.23.2 computed for the reference.
func TestRunOrt(t *testing.T) {
	dir := filepath.Join(testutil.SharedModels(t), "digits_lenet")
	out := t.TempDir()
	code, _, stderr := runCLI(t, "run", filepath.Join(dir, "model.onnx"), "--engine", "ort", "--threads", "1",
		"--input", "input="+filepath.Join(dir, "ref", "input_input.npy"), "--output-dir", out, "--repeat", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Engine string `json:"engine"`
		Runs   int    `json:"runs"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &rep); err != nil || rep.Engine != "ort" || rep.Runs != 2 {
		t.Errorf("latency line %q: %+v, %v", stderr, rep, err)
	}
	got, err := npy.ReadNPYFile(filepath.Join(out, "logits.npy"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := npy.ReadNPYFile(filepath.Join(dir, "ref", "out", "logits.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Shape, want.Shape) || !slices.Equal(got.Float32s(), want.Float32s()) {
		t.Errorf("logits %v differ from the reference %v", got, want)
	}
}

// TestRunOrtErrors: exit codes of `run --engine ort`.
func TestRunOrtErrors(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	good := writeNPY(t, dir, "x.npy", tensor.New(tensor.Float, 2, 16))
	bad := writeNPY(t, dir, "bad.npy", tensor.New(tensor.Float, 2, 15))
	t.Run("input that does not fit", func(t *testing.T) {
		code, _, stderr := runCLI(t, "run", model, "--engine", "ort", "--input", "input="+bad, "--output-dir", filepath.Join(dir, "o1"))
		if code != ExitUsage || !strings.Contains(stderr, `input "input": expected float32[N 16], given float32[2 15]`) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("model ONNX Runtime refuses", func(t *testing.T) {
		b := testmodels.New("unknown-op", 17)
		b.Input("input", tensor.Float, "N", 16).Output("y", tensor.Float, "N", 16)
		b.Node("NoSuchOp", "n", []string{"input"}, []string{"y"})
		refused := writeModel(t, dir, "refused.onnx", b)
		code, _, stderr := runCLI(t, "run", refused, "--engine", "ort", "--input", "input="+good, "--output-dir", filepath.Join(dir, "o3"))
		if code != ExitFailure || strings.Count(stderr, refused) != 1 {
			t.Errorf("exit %d, stderr %q: want exit %d naming %s once", code, stderr, ExitFailure, refused)
		}
	})
	t.Run("no library", func(t *testing.T) {
		cache := t.TempDir()
		t.Setenv(ort.LibraryEnv, "")
		t.Setenv(ort.CacheEnv, cache)
		code, _, stderr := runCLI(t, "run", model, "--engine", "ort", "--input", "input="+good, "--output-dir", filepath.Join(dir, "o2"))
		if code != ExitFailure || !strings.Contains(stderr, "ONNXRUNTIME_LIB") || !strings.Contains(stderr, cache) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

// TestQuantizedModelsInOrt is the oracle for quantized models: a model
// quantized by `coreaiq quantize` loads in ONNX Runtime 1.23 and computes
// what the built-in engine's QDQ simulation computes. Calibration runs on
// the engine named in the case, so the ort tap path is exercised too.
func TestQuantizedModelsInOrt(t *testing.T) {
	shared := filepath.Join(testutil.SharedModels(t), "digits_lenet")
	evalX, err := npy.ReadNPYFile(filepath.Join(shared, "eval_input.npy"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	evalX.Shape[0] = n
	evalX.Data = evalX.Float32s()[:n*28*28]
	inputs := map[string]*tensor.Tensor{"input": evalX}
	cases := []struct {
		preset, engine string
	}{
		{"w8a8", "go"},
		{"w8a8", "ort"},
		{"ort-x86", "go"},
		// ONNX Runtime's QDQ fusions and its Relu→QuantizeLinear rule
		// mishandle float8: the engine opens such models with those
		// optimizers off (pkg/runtime/ort, float8Optimizers).
		{"fp8", "ort"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.preset+"/calibrated-with-"+c.engine, func(t *testing.T) {
			out := filepath.Join(dir, c.preset+"_"+c.engine+".onnx")
			code, _, stderr := runCLI(t, "quantize", "--model", filepath.Join(shared, "model.onnx"), "--data", "input="+filepath.Join(shared, "calib_input.npy"),
				"--samples", "64", "--preset", c.preset, "--engine", c.engine, "--threads", "1", "-o", out, "--log-level", "error")
			if code != 0 {
				t.Fatalf("quantize: exit %d: %s", code, stderr)
			}
			m, err := onnxgraph.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			goSess, err := runtime.Open("go", m, runtime.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer goSess.Close()
			want, err := goSess.Run(context.Background(), inputs, runtime.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lib, err := ort.Default()
			if err != nil {
				t.Fatal(err)
			}
			for _, level := range []ort.Optimization{ort.OptimizeAll, ort.OptimizeBasic} {
				s, err := lib.Open(m, ort.SessionOptions{IntraOpThreads: 1, Optimization: level})
				if err != nil {
					t.Fatalf("optimization %s: %v", level, err)
				}
				got, err := s.Run(context.Background(), inputs, runtime.RunOptions{})
				s.Close()
				if err != nil {
					t.Fatalf("optimization %s: %v", level, err)
				}
				g, w := got["logits"].Float32s(), want["logits"].Float32s()
				var diff, scale float64
				for i := range w {
					diff = max(diff, math.Abs(float64(g[i]-w[i])))
					scale = max(scale, math.Abs(float64(w[i])))
				}
				// One quantization step flipped by float rounding is
				// allowed; anything more is a disagreement on the model.
				if diff > 1e-2*scale {
					t.Errorf("optimization %s: logits differ from the built-in engine by %g (max |logit| %g)", level, diff, scale)
				}
				t.Logf("optimization %s: max abs difference %g, max |logit| %g", level, diff, scale)
			}
		})
	}
}

// TestOldOpsetModelsInOrt: every preset on the shared models of old
// opsets (SqueezeNet 1.0 at opset 7, raised through the version adapters;
// mnist-cntk-op8 at opset 8 with its fixed batch of 1) writes a model that
// ONNX Runtime 1.23 loads and runs on the reference inputs, with finite
// outputs of the reference shape. mxfp4 is written with --fp4-as-fp8,
// since ONNX Runtime 1.23 cannot load float4 initializers.
func TestOldOpsetModelsInOrt(t *testing.T) {
	shared := testutil.SharedModels(t)
	lib, err := ort.Default()
	if err != nil {
		t.Fatal(err)
	}
	models := []struct{ dir, input string }{{"squeezenet1.0-fp32", "data_0"}, {"mnist-cntk-op8", "Input3"}}
	for _, md := range models {
		dir := filepath.Join(shared, md.dir)
		x, err := npy.ReadNPYFile(filepath.Join(dir, "ref", "input_"+md.input+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		per := tensor.NumElements(x.Shape[1:])
		x = tensor.FromFloat32(slices.Clone(x.Float32s()[:per]), append([]int{1}, x.Shape[1:]...)...)
		for _, preset := range config.PresetNames() {
			t.Run(md.dir+"/"+preset, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "q.onnx")
				args := []string{"quantize", "--model", filepath.Join(dir, "model.onnx"), "--preset", preset, "--samples", "4",
					"-o", out, "--log-level", "error", "--data", md.input + "=" + filepath.Join(dir, "calib_"+md.input+".npy")}
				if preset == "mxfp4" {
					args = append(args, "--fp4-as-fp8")
				}
				if code, _, stderr := runCLI(t, args...); code != 0 {
					t.Fatalf("quantize: exit %d\n%s", code, stderr)
				}
				m, err := onnxgraph.Load(out)
				if err != nil {
					t.Fatal(err)
				}
				s, err := lib.Open(m, ort.SessionOptions{IntraOpThreads: 1, Optimization: ort.OptimizeAll})
				if err != nil {
					t.Fatalf("opset %d: %v", m.Opset(""), err)
				}
				defer s.Close()
				got, err := s.Run(context.Background(), map[string]*tensor.Tensor{md.input: x}, runtime.RunOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range m.Graph.Outputs {
					y := got[o.Name]
					if y == nil || y.Shape[0] != 1 {
						t.Fatalf("output %q: %v", o.Name, y)
					}
					for i, v := range y.Float32s() {
						if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
							t.Fatalf("output %q[%d] = %v", o.Name, i, v)
						}
					}
				}
				t.Logf("opset %d: runs in ONNX Runtime", m.Opset(""))
			})
		}
	}
}

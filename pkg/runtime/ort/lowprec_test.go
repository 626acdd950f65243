//go:build ort

package ort

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// fp8Codes encodes values as float8 e4m3fn codes.
func fp8Codes(dt tensor.DType, values []float32, dims ...int) *tensor.Tensor {
	x := tensor.New(dt, dims...)
	codes := x.Data.([]uint8)
	for i, v := range values {
		codes[i] = tensor.Float32ToFloat8E4M3FN(v, true)
	}
	return x
}

// float8CNN is a model of the shape `coreaiq quantize --preset fp8`
// writes: float8 e4m3fn activations (QuantizeLinear→DequantizeLinear) and
// weights (float8 initializers → DequantizeLinear) around Conv → Relu and
// Gemm, opset 19. The Conv output has negative values, so the Relu matters.
func float8CNN(t *testing.T) *testmodels.Builder {
	rng := rand.New(rand.NewPCG(8, 19))
	b := testmodels.New("float8_cnn", 19)
	b.Input("x", tensor.Float, "N", 1, 6, 6).Output("y", tensor.Float, "N", 5)
	zero := func() *tensor.Tensor { return fp8Codes(tensor.Float8E4M3FN, []float32{0}) }
	initializer(t, b, "z", zero())
	for _, s := range []struct {
		name  string
		scale float32
	}{{"xs", 2.0 / 448}, {"ws", 1.0 / 448}, {"rs", 3.0 / 448}, {"w2s", 0.5 / 448}, {"ys", 32.0 / 448}} {
		initializer(t, b, s.name, tensor.FromFloat32([]float32{s.scale}))
	}
	// Weights in [-1, 1) and [-0.5, 0.5), stored as float8 codes of w/scale.
	w := make([]float32, 4*9)
	for i := range w {
		w[i] = (rng.Float32()*2 - 1) * 448
	}
	initializer(t, b, "w_q", fp8Codes(tensor.Float8E4M3FN, w, 4, 1, 3, 3))
	w2 := make([]float32, 64*5)
	for i := range w2 {
		w2[i] = (rng.Float32()*2 - 1) * 448
	}
	initializer(t, b, "w2_q", fp8Codes(tensor.Float8E4M3FN, w2, 64, 5))
	b.Node("QuantizeLinear", "x_q", []string{"x", "xs", "z"}, []string{"xq"})
	b.Node("DequantizeLinear", "x_dq", []string{"xq", "xs", "z"}, []string{"xd"})
	b.Node("DequantizeLinear", "w_dq", []string{"w_q", "ws", "z"}, []string{"wd"})
	b.Node("Conv", "conv", []string{"xd", "wd"}, []string{"c"})
	b.Node("Relu", "relu", []string{"c"}, []string{"r"})
	b.Node("QuantizeLinear", "r_q", []string{"r", "rs", "z"}, []string{"rq"})
	b.Node("DequantizeLinear", "r_dq", []string{"rq", "rs", "z"}, []string{"rd"})
	b.Node("Flatten", "flatten", []string{"rd"}, []string{"f"})
	b.Node("DequantizeLinear", "w2_dq", []string{"w2_q", "w2s", "z"}, []string{"w2d"})
	b.Node("Gemm", "gemm", []string{"f", "w2d"}, []string{"g"})
	b.Node("QuantizeLinear", "y_q", []string{"g", "ys", "z"}, []string{"yq"})
	b.Node("DequantizeLinear", "y_dq", []string{"yq", "ys", "z"}, []string{"y"})
	return b
}

// TestFloat8Model checks that Open runs a float8 QDQ model in ONNX Runtime
// with the built-in engine's results, and pins the two ONNX Runtime 1.23
// behaviours that make the special session options necessary, so that a
// release that fixes them shows up here.
func TestFloat8Model(t *testing.T) {
	l := testLibrary(t)
	m := modelOf(t, float8CNN(t))
	inputs := randomInputs(t, m, 8)
	ctx := context.Background()

	goSess, err := runtime.Open("go", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer goSess.Close()
	want, err := goSess.Run(ctx, inputs, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The model must not be trivial: some Conv outputs are negative, so a
	// dropped Relu changes the result.
	negative := false
	tap := func(_ string, x *tensor.Tensor) { // x is valid during the call only
		negative = slices.ContainsFunc(x.Float32s(), func(v float32) bool { return v < -0.1 })
	}
	if _, err := goSess.Run(ctx, inputs, runtime.RunOptions{TapValues: []string{"c"}, Tap: tap}); err != nil {
		t.Fatal(err)
	}
	if !negative {
		t.Fatal("the Conv output has no negative values; the test model does not exercise the Relu")
	}

	raw := modelBytes(t, float8CNN(t))
	t.Run("every optimization: QLinearConv has no float8 kernel", func(t *testing.T) {
		s, err := l.NewSessionFromBytes(raw, SessionOptions{IntraOpThreads: 1})
		if err == nil {
			s.Close()
			t.Fatal("ONNX Runtime now loads float8 QDQ models with every optimization: float8Options may be unnecessary")
		}
		if !strings.Contains(err.Error(), "float8e4m3fn") || !strings.Contains(err.Error(), "QLinearConv") {
			t.Fatalf("error %v, want the float8 QLinearConv type error", err)
		}
	})
	t.Run("disable_quant_qdq alone: the Relu is dropped", func(t *testing.T) {
		s, err := l.NewSessionFromBytes(raw, SessionOptions{IntraOpThreads: 1, Config: []ConfigEntry{{disableQuantQDQKey, "1"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err := s.Run(ctx, inputs, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, scale := maxAbsDiff(asFloat64(got["y"]), asFloat64(want["y"]))
		t.Logf("max abs difference %g, max |y| %g", d, scale)
		if d < 0.1*scale {
			t.Errorf("ONNX Runtime with session.disable_quant_qdq=1 now agrees with the built-in engine (max abs difference %g, max |y| %g): ReluQuantRewrite may have been fixed for float8", d, scale)
		}
	})
	for _, level := range []Optimization{OptimizeAll, OptimizeExtended, OptimizeBasic, OptimizeNone} {
		t.Run("Open/"+level.String(), func(t *testing.T) {
			e, err := l.Open(m, SessionOptions{IntraOpThreads: 1, Optimization: level})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			got, err := e.Run(ctx, inputs, runtime.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d, scale := maxAbsDiff(asFloat64(got["y"]), asFloat64(want["y"]))
			// Both engines compute the same float32 products in different
			// orders; a sum that lands on the other side of a float8
			// rounding boundary moves the result by one code.
			if d > 0.07*scale {
				t.Errorf("max abs difference %g from the built-in engine, max |y| %g", d, scale)
			}
			t.Logf("max abs difference %g, max |y| %g", d, scale)
		})
	}
}

func TestHasFloat8QDQ(t *testing.T) {
	withZP := func(dt tensor.DType) *testmodels.Builder {
		b := testmodels.New("q", 21)
		b.Input("x", tensor.Float, 4).Output("y", tensor.Float, 4)
		b.Init("s", nil, []float32{0.1})
		z := tensor.New(dt)
		tp, err := tensor.ToProto(z, "z")
		if err != nil {
			t.Fatal(err)
		}
		b.Model.Graph.Initializer = append(b.Model.Graph.Initializer, tp)
		b.Node("QuantizeLinear", "q", []string{"x", "s", "z"}, []string{"xq"})
		b.Node("DequantizeLinear", "dq", []string{"xq", "s", "z"}, []string{"y"})
		return b
	}
	outputDType := testmodels.New("q", 21)
	outputDType.Input("x", tensor.Float, 4).Output("y", tensor.Float, 4)
	outputDType.Init("s", nil, []float32{0.1})
	outputDType.Node("QuantizeLinear", "q", []string{"x", "s"}, []string{"xq"}, testmodels.AttrInt("output_dtype", int64(tensor.Float8E5M2)))
	outputDType.Node("DequantizeLinear", "dq", []string{"xq", "s"}, []string{"y"})
	cases := []struct {
		name string
		b    *testmodels.Builder
		want bool
	}{
		{"int8 zero point", withZP(tensor.Int8), false},
		{"uint8 zero point", withZP(tensor.Uint8), false},
		{"int4 zero point", withZP(tensor.Int4), false},
		{"float8 e4m3fn zero point", withZP(tensor.Float8E4M3FN), true},
		{"float8 e5m2fnuz zero point", withZP(tensor.Float8E5M2FNUZ), true},
		{"float8 output_dtype", outputDType, true},
		{"float8 weights", float8CNN(t), true},
		{"float model", testmodels.CNN(), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := hasFloat8QDQ(modelOf(t, c.b)); got != c.want {
				t.Errorf("hasFloat8QDQ = %v, want %v", got, c.want)
			}
		})
	}
}

func TestFloat8Options(t *testing.T) {
	all := strings.Join(float8Optimizers, ";")
	cases := []struct {
		name string
		in   []ConfigEntry
		want []ConfigEntry
	}{
		{"none set", nil, []ConfigEntry{{disableOptimizersKey, all}, {disableQuantQDQKey, "1"}}},
		{"merged with the caller's list", []ConfigEntry{{"session.x", "1"}, {disableOptimizersKey, "ConstantFolding;ReluQuantRewrite"}},
			[]ConfigEntry{{"session.x", "1"}, {disableOptimizersKey, "ConstantFolding;ReluQuantRewrite;QDQSelectorActionTransformer;ClipQuantRewrite"}, {disableQuantQDQKey, "1"}}},
		{"caller's disable_quant_qdq kept", []ConfigEntry{{disableQuantQDQKey, "0"}}, []ConfigEntry{{disableQuantQDQKey, "0"}, {disableOptimizersKey, all}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.in)
			got := float8Options(SessionOptions{Config: in}).Config
			if !slices.Equal(got, c.want) {
				t.Errorf("config %v, want %v", got, c.want)
			}
			if !slices.Equal(in, c.in) {
				t.Errorf("the caller's config was modified: %v", in)
			}
		})
	}
}

// TestFloat4Refused: ONNX Runtime 1.23 cannot load float4 initializers and
// says only "not implemented"; Open names the float4 tensors and the way
// out. When a release accepts them, this test fails and the message can go.
func TestFloat4Refused(t *testing.T) {
	l := testLibrary(t)
	b := testmodels.New("fp4", 23)
	b.Input("x", tensor.Float, "N", 4).Output("y", tensor.Float, "N", 2)
	w := tensor.New(tensor.Float4E2M1, 4, 2)
	for i := range w.Data.([]uint8) {
		w.Data.([]uint8)[i] = uint8(i % 8)
	}
	initializer(t, b, "w_q", w)
	initializer(t, b, "w_s", tensor.FromFloat32([]float32{0.5}))
	b.Node("DequantizeLinear", "w_dq", []string{"w_q", "w_s"}, []string{"wd"})
	b.Node("MatMul", "mm", []string{"x", "wd"}, []string{"y"})
	m := modelOf(t, b)
	if got := float4Tensors(m); !slices.Equal(got, []string{"w_q"}) {
		t.Fatalf("float4Tensors = %v", got)
	}
	e, err := l.Open(m, SessionOptions{IntraOpThreads: 1})
	if err == nil {
		e.Close()
		t.Fatal("ONNX Runtime now loads float4 weights: the float4 error message is obsolete")
	}
	for _, want := range []string{"cannot load float4", `"w_q"`, "--fp4-as-fp8", "not implemented"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// The model is valid: the built-in engine runs it.
	gs, err := runtime.Open("go", m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	x := tensor.FromFloat32([]float32{1, 0, 0, 0})
	x.Shape = []int{1, 4}
	out, err := gs.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, runtime.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Row 0 of w is codes 0 and 1: 0 and 0.5 in e2m1, times the scale.
	if y := out["y"].Float32s(); len(y) != 2 || y[0] != 0 || math.Abs(float64(y[1])-0.25) > 1e-7 {
		t.Errorf("built-in engine y = %v, want [0 0.25]", y)
	}
}

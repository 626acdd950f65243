package runtime

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func session(t *testing.T, b *testmodels.Builder) *GoSession {
	t.Helper()
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewGoSession(m, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func addInit(t *testing.T, b *testmodels.Builder, name string, x *tensor.Tensor) {
	t.Helper()
	tp, err := tensor.ToProto(x, name)
	if err != nil {
		t.Fatal(err)
	}
	b.Model.Graph.Initializer = append(b.Model.Graph.Initializer, tp)
}

func TestUnsupportedReportedBeforeRunning(t *testing.T) {
	b := testmodels.New("bad", 17)
	b.Input("x", tensor.Float, 4).Output("a", tensor.Float, 4).Output("c", tensor.Float, 4).Output("d", tensor.Float, 4)
	b.Node("FancyOp", "n1", []string{"x"}, []string{"a"})
	b.Node("Relu", "ok", []string{"x"}, []string{"b"})
	b.Node("Gelu", "n2", []string{"b"}, []string{"c"}, testmodels.AttrString("approximate", "cubic"))
	n := b.Node("Relu", "n3", []string{"x"}, []string{"d"})
	dom := "com.microsoft"
	n.Domain = &dom
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewGoSession(m, Options{})
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want *UnsupportedError", err)
	}
	want := []Unsupported{
		{Node: "n1", OpType: "FancyOp", Opset: 17, Feature: "op type FancyOp is not supported"},
		{Node: "n2", OpType: "Gelu", Opset: 17, Feature: "opset 17 is not supported (supported: 20 to 25)"},
		{Node: "n3", OpType: "Relu", Domain: "com.microsoft", Feature: `domain "com.microsoft" is not supported`},
	}
	if !slices.Equal(ue.Items, want) {
		t.Errorf("items = %+v\nwant    %+v", ue.Items, want)
	}
	if msg := err.Error(); !strings.Contains(msg, "--engine ort") || !strings.Contains(msg, `node "n1": FancyOp (domain ai.onnx, opset 17)`) {
		t.Errorf("message %q", msg)
	}
}

func TestUnsupportedAttribute(t *testing.T) {
	b := testmodels.New("bad", 20)
	b.Input("x", tensor.Float, 4).Output("y", tensor.Float, 4)
	b.Node("Gelu", "g", []string{"x"}, []string{"y"}, testmodels.AttrString("approximate", "cubic"))
	m, _ := onnxgraph.LoadBytes(b.Bytes(), "")
	_, err := NewGoSession(m, Options{})
	if err == nil || !strings.Contains(err.Error(), `node "g": Gelu (domain ai.onnx, opset 20): approximate="cubic" is not supported`) {
		t.Errorf("err = %v", err)
	}
}

func TestTapAndLiveness(t *testing.T) {
	s := session(t, testmodels.MLP())
	x := tensor.New(tensor.Float, 2, 16)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i) / 10
	}
	var seen []string
	outs, err := s.Run(context.Background(), map[string]*tensor.Tensor{"input": x}, RunOptions{Tap: func(name string, t *tensor.Tensor) {
		seen = append(seen, name+":"+t.String())
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"input:float32[2 16]", "/fc1/Gemm_output_0:float32[2 32]", "/relu/Relu_output_0:float32[2 32]", "logits:float32[2 4]"}
	if !slices.Equal(seen, want) {
		t.Errorf("tap saw %v, want %v", seen, want)
	}
	if outs["logits"] == nil {
		t.Fatal("no logits")
	}
	// Only the listed values reach the tap.
	seen = nil
	if _, err := s.Run(context.Background(), map[string]*tensor.Tensor{"input": x}, RunOptions{
		Tap: func(name string, _ *tensor.Tensor) { seen = append(seen, name) }, TapValues: []string{"/relu/Relu_output_0"}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"/relu/Relu_output_0"}) {
		t.Errorf("filtered tap saw %v", seen)
	}
	// Each intermediate is released right after its last reader.
	var freed [][]string
	for _, st := range s.prog.steps {
		var names []string
		for _, sl := range st.free {
			names = append(names, s.prog.names[sl])
		}
		freed = append(freed, names)
	}
	wantFreed := [][]string{{"input"}, {"/fc1/Gemm_output_0"}, {"/relu/Relu_output_0"}}
	if len(freed) != 3 || !slices.Equal(freed[0], wantFreed[0]) || !slices.Equal(freed[1], wantFreed[1]) || !slices.Equal(freed[2], wantFreed[2]) {
		t.Errorf("freed per step = %v, want %v", freed, wantFreed)
	}
}

func TestCancel(t *testing.T) {
	s := session(t, testmodels.MLP())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Run(ctx, map[string]*tensor.Tensor{"input": tensor.New(tensor.Float, 1, 16)}, RunOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestConstantFolding(t *testing.T) {
	// Shape(W) → Gather(0) → Reshape's target comes from initializers only,
	// so it folds; the Reshape of the input remains.
	b := testmodels.New("fold", 17)
	b.Input("x", tensor.Float, 2, 3).Output("y", tensor.Float, 6)
	b.Init("w", []int64{6, 1}, []float32{1, 2, 3, 4, 5, 6})
	b.InitInt64("zero", []int64{}, []int64{0})
	b.Node("Shape", "shape", []string{"w"}, []string{"s"})
	b.Node("Gather", "gather", []string{"s", "zero"}, []string{"n"})
	b.Node("Unsqueeze", "unsq", []string{"n", "zero"}, []string{"target"})
	b.Node("Reshape", "reshape", []string{"x", "target"}, []string{"y"})
	s := session(t, b)
	if len(s.prog.steps) != 1 || s.prog.steps[0].node.Name != "reshape" {
		var names []string
		for _, st := range s.prog.steps {
			names = append(names, st.node.Name)
		}
		t.Errorf("steps %v, want only reshape", names)
	}
	out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out["y"].Shape, []int{6}) {
		t.Errorf("y shape %v", out["y"].Shape)
	}
}

func TestInputChecks(t *testing.T) {
	s := session(t, testmodels.MLP())
	tests := []struct {
		in   map[string]*tensor.Tensor
		want string
	}{
		{map[string]*tensor.Tensor{}, `input "input" is missing`},
		{map[string]*tensor.Tensor{"input": tensor.New(tensor.Float, 2, 16), "other": tensor.New(tensor.Float, 1)}, `input "other" is not an input`},
		{map[string]*tensor.Tensor{"input": tensor.New(tensor.Float, 2, 8)}, `input "input": expected shape [N 16], given shape [2 8]`},
		{map[string]*tensor.Tensor{"input": tensor.New(tensor.Float, 16)}, `expected shape [N 16], given shape [16]`},
		{map[string]*tensor.Tensor{"input": tensor.New(tensor.Float16, 2, 16)}, `input "input": expected element type float32, given float16`},
		{map[string]*tensor.Tensor{"input": {DType: tensor.Float, Shape: []int{2, 16}, Data: make([]float32, 3)}}, `holds 3 elements, want 32`},
	}
	for _, tt := range tests {
		_, err := s.Run(context.Background(), tt.in, RunOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
}

func TestFloat16Model(t *testing.T) {
	b := testmodels.New("half", 17)
	b.Input("x", tensor.Float16, 3).Output("y", tensor.Float16, 3)
	addInit(t, b, "w", mustCast(t, tensor.FromFloat32([]float32{0.5, 2, -1}, 3), tensor.Float16))
	b.Node("Mul", "mul", []string{"x", "w"}, []string{"y"})
	s := session(t, b)
	x := mustCast(t, tensor.FromFloat32([]float32{1, 1.5, 3}, 3), tensor.Float16)
	out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	y := out["y"]
	if y.DType != tensor.Float16 {
		t.Fatalf("y is %s, want float16", y.DType)
	}
	f, _ := y.AsFloat32()
	if !slices.Equal(f, []float32{0.5, 3, -3}) {
		t.Errorf("y = %v", f)
	}
}

func mustCast(t *testing.T, x *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	t.Helper()
	c, err := tensor.Cast(x, dt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// qdqModel builds x → QuantizeLinear → DequantizeLinear at an opset, with
// axis and block_size attributes when non-zero.
func qdqModel(t *testing.T, opset int64, shape []int, scale, zp *tensor.Tensor, axis, block int64) *testmodels.Builder {
	t.Helper()
	dims := make([]any, len(shape))
	for i, d := range shape {
		dims[i] = d
	}
	b := testmodels.New("qdq", opset)
	b.Input("x", tensor.Float, dims...).Output("q", zp.DType, dims...).Output("y", tensor.Float, dims...)
	addInit(t, b, "scale", scale)
	addInit(t, b, "zp", zp)
	var attrs []*onnxpb.AttributeProto
	if axis != 0 {
		attrs = append(attrs, testmodels.AttrInt("axis", axis))
	}
	if block != 0 {
		attrs = append(attrs, testmodels.AttrInt("block_size", block))
	}
	b.Node("QuantizeLinear", "quant", []string{"x", "scale", "zp"}, []string{"q"}, attrs...)
	b.Node("DequantizeLinear", "dequant", []string{"q", "scale", "zp"}, []string{"y"}, attrs...)
	return b
}

func TestQuantizeDequantize(t *testing.T) {
	x := []float32{-3.3, -0.25, 0, 0.26, 1.5, 2.5, 7.9, 100}
	tests := []struct {
		name   string
		opset  int64
		shape  []int
		scale  []float32
		sshape []int
		zp     []int64
		zt     tensor.DType
		axis   int64
		block  int64
		// scaleOf gives element i's scale index.
		scaleOf func(i int) int
	}{
		{"uint8 per-tensor opset 10", 10, []int{8}, []float32{0.1}, nil, []int64{128}, tensor.Uint8, 0, 0, func(int) int { return 0 }},
		{"int8 per-axis opset 13", 13, []int{2, 4}, []float32{0.05, 0.1, 0.2, 0.5}, []int{4}, []int64{0, -3, 5, 1}, tensor.Int8, 1, 0, func(i int) int { return i % 4 }},
		{"int4 blocked opset 21", 21, []int{2, 4}, []float32{0.5, 1, 0.25, 2}, []int{2, 2}, []int64{0, 1, -2, 3}, tensor.Int4, 1, 2, func(i int) int { return (i/4)*2 + (i%4)/2 }},
		{"uint4 blocked axis 0 opset 21", 21, []int{4, 2}, []float32{0.5, 1, 0.25, 2}, []int{2, 2}, []int64{0, 1, 2, 3}, tensor.Uint4, -2, 2, func(i int) int { return (i/2/2)*2 + i%2 }},
		{"int16 opset 21", 21, []int{8}, []float32{0.001}, nil, []int64{-7}, tensor.Int16, 0, 0, func(int) int { return 0 }},
		{"int2 opset 25", 25, []int{8}, []float32{1}, nil, []int64{0}, tensor.Int2, 0, 0, func(int) int { return 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scale := tensor.FromFloat32(tt.scale, tt.sshape...)
			zp, err := tensor.Cast(tensor.FromInt64(tt.zp, tt.sshape...), tt.zt)
			if err != nil {
				t.Fatal(err)
			}
			s := session(t, qdqModel(t, tt.opset, tt.shape, scale, zp, tt.axis, tt.block))
			out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": tensor.FromFloat32(x, tt.shape...)}, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lo, hi, _ := quant.IntRange(tt.zt)
			q := asInt64(out["q"])
			y := out["y"].Float32s()
			for i, v := range x {
				k := tt.scaleOf(i)
				wantQ := int64(math.Min(math.Max(math.RoundToEven(float64(v/tt.scale[k]))+float64(tt.zp[k]), float64(lo)), float64(hi)))
				if q[i] != wantQ {
					t.Errorf("q[%d] = %d, want %d", i, q[i], wantQ)
				}
				if wantY := float32(wantQ-tt.zp[k]) * tt.scale[k]; y[i] != wantY {
					t.Errorf("y[%d] = %g, want %g", i, y[i], wantY)
				}
			}
			if out["q"].DType != tt.zt {
				t.Errorf("q is %s, want %s", out["q"].DType, tt.zt)
			}
		})
	}
}

func TestQuantizeNarrowFloat(t *testing.T) {
	x := []float32{-1000, -3.3, 0.01, 0.26, 1.5, 300, 500}
	for _, tc := range []struct {
		opset int64
		dt    tensor.DType
	}{{19, tensor.Float8E4M3FN}, {19, tensor.Float8E5M2}, {23, tensor.Float4E2M1}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			scale := tensor.FromFloat32([]float32{0.5})
			zp := tensor.New(tc.dt)
			s := session(t, qdqModel(t, tc.opset, []int{len(x)}, scale, zp, 0, 0))
			out, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": tensor.FromFloat32(x, len(x))}, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			scaled := make([]float32, len(x))
			for i, v := range x {
				scaled[i] = v / 0.5
			}
			wantQ, err := tensor.Cast(tensor.FromFloat32(scaled, len(x)), tc.dt)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out["q"].Data.([]uint8), wantQ.Data.([]uint8)) {
				t.Errorf("q = %v, want %v", out["q"].Data, wantQ.Data)
			}
			dec, _ := wantQ.AsFloat32()
			for i, v := range out["y"].Float32s() {
				if v != dec[i]*0.5 {
					t.Errorf("y[%d] = %g, want %g", i, v, dec[i]*0.5)
				}
			}
		})
	}
}

package runtime

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// convBNInits adds the initializers of the models' first Conv (w1, b1: 4
// to 8 channels, 3×3) and of the BatchNormalization after it.
func convBNInits(b *testmodels.Builder) {
	b.RandomInit("w1", 0.5, 8, 4, 3, 3)
	b.RandomInit("b1", 0.5, 8)
	b.RandomInit("scale", 1, 8)
	b.RandomInit("shift", 1, 8)
	b.RandomInit("mean", 0.5, 8)
	b.Init("var", []int64{8}, []float32{0.5, 1, 2, 0.1, 3, 0.7, 1.5, 0.9})
}

// convBNReluModel is Conv → BatchNormalization → Relu → Conv (depthwise)
// → Relu, the pattern fusion targets.
func convBNReluModel(group int64) *testmodels.Builder {
	b := testmodels.New("convbn", 17)
	b.Input("x", tensor.Float, 2, 4, 9, 11)
	b.Output("y", tensor.Float, 2, 8, 5, 6)
	convBNInits(b)
	b.RandomInit("w2", 0.5, 8, 8/group, 3, 3)
	b.RandomInit("b2", 0.5, 8)
	b.Node("Conv", "conv1", []string{"x", "w1", "b1"}, []string{"c1"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("BatchNormalization", "bn1", []string{"c1", "scale", "shift", "mean", "var"}, []string{"n1"})
	b.Node("Relu", "relu1", []string{"n1"}, []string{"r1"})
	b.Node("Conv", "conv2", []string{"r1", "w2", "b2"}, []string{"c2"}, testmodels.AttrInts("pads", 1, 1, 1, 1),
		testmodels.AttrInts("strides", 2, 2), testmodels.AttrInt("group", group))
	b.Node("Relu", "relu2", []string{"c2"}, []string{"y"})
	return b
}

// residualModel is a ResNet block's end: a 1×1 Conv of x (the skip
// path), then Conv → BatchNormalization → Add(skip) → Relu. With
// skipFirst the Add's operands are swapped; with skipLate the skip Conv
// comes after the Add's other operand in the node order, so the Add fuses
// into the skip Conv instead; with broadcast the skip path has one
// channel and the Add broadcasts (not fusible in the epilogue: the fused
// step must fall back to the nodes); with pooled the skip path is one
// value per channel (a window over the whole image), broadcast over the
// positions.
func residualModel(skipFirst, skipLate, broadcast, pooled bool) *testmodels.Builder {
	b := testmodels.New("residual", 17)
	b.Input("x", tensor.Float, 2, 4, 9, 11)
	b.Output("y", tensor.Float, 2, 8, 9, 11)
	skipCh := int64(8)
	if broadcast {
		skipCh = 1
	}
	if pooled {
		b.RandomInit("ws", 0.5, skipCh, 4, 9, 11)
	} else {
		b.RandomInit("ws", 0.5, skipCh, 4, 1, 1)
	}
	convBNInits(b)
	skip := func() { b.Node("Conv", "skip", []string{"x", "ws"}, []string{"s"}) }
	if !skipLate {
		skip()
	}
	b.Node("Conv", "conv1", []string{"x", "w1", "b1"}, []string{"c1"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("BatchNormalization", "bn1", []string{"c1", "scale", "shift", "mean", "var"}, []string{"n1"})
	if skipLate {
		skip()
	}
	add := []string{"n1", "s"}
	if skipFirst {
		add = []string{"s", "n1"}
	}
	b.Node("Add", "add", add, []string{"a"})
	b.Node("Relu", "relu", []string{"a"}, []string{"y"})
	return b
}

// TestConvFusion checks that fused Conv+BatchNormalization(+Add)+Relu
// computes bit for bit what the unfused nodes compute, and that taps of
// the fused-away values see exactly what the unfused engine computes.
func TestConvFusion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model *testmodels.Builder
		steps int
		taps  []string
	}{
		{"group=1", convBNReluModel(1), 2, []string{"c1", "n1", "r1", "c2", "y"}},
		{"group=8", convBNReluModel(8), 2, []string{"c1", "n1", "r1", "c2", "y"}},
		{"residual", residualModel(false, false, false, false), 2, []string{"s", "c1", "n1", "a", "y"}},
		{"residual-first", residualModel(true, false, false, false), 2, []string{"s", "c1", "n1", "a", "y"}},
		// conv1+bn1, then skip+Add+Relu with n1 as the residual.
		{"residual-late", residualModel(false, true, false, false), 2, []string{"s", "c1", "n1", "a", "y"}},
		{"residual-broadcast", residualModel(false, false, true, false), 2, []string{"s", "c1", "n1", "a", "y"}},
		{"residual-pooled", residualModel(false, false, false, true), 2, []string{"s", "c1", "n1", "a", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := onnxgraph.LoadBytes(tc.model.Bytes(), "")
			if err != nil {
				t.Fatal(err)
			}
			fused, err := NewGoSession(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(fused.prog.steps) != tc.steps {
				t.Fatalf("%d steps, want %d", len(fused.prog.steps), tc.steps)
			}
			c := &compiler{model: m, threads: 2, noFuse: true}
			prog, err := c.compileGraph(m.Graph, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			plain := &GoSession{model: m, prog: prog, threads: 2, inputs: fused.inputs, outputs: fused.outputs}
			r := rand.New(rand.NewPCG(1, 2))
			x := tensor.New(tensor.Float, 2, 4, 9, 11)
			for i := range x.Float32s() {
				x.Float32s()[i] = r.Float32()*4 - 2
			}
			in := map[string]*tensor.Tensor{"x": x}
			collect := func(s *GoSession, values []string) map[string][]float32 {
				got := map[string][]float32{}
				outs, err := s.Run(context.Background(), in, RunOptions{TapValues: values, Tap: func(name string, t *tensor.Tensor) {
					got[name] = append([]float32(nil), t.Float32s()...)
				}})
				if err != nil {
					t.Fatal(err)
				}
				got["out"] = outs["y"].Float32s()
				return got
			}
			want := collect(plain, nil)
			gotFast := collect(fused, []string{"y"})
			for i, v := range gotFast["out"] {
				if math.Float32bits(v) != math.Float32bits(want["out"][i]) {
					t.Fatalf("fused y[%d] = %g, unfused engine gives %g", i, v, want["out"][i])
				}
			}
			tapped := collect(fused, nil)
			for _, name := range tc.taps {
				g, w := tapped[name], want[name]
				if len(g) == 0 || len(g) != len(w) {
					t.Fatalf("tap %s: %d values, want %d", name, len(g), len(w))
				}
				for i := range g {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
						t.Fatalf("tap %s[%d] = %g, unfused engine gives %g", name, i, g[i], w[i])
					}
				}
			}
		})
	}
}

// siluModel is Sigmoid → Mul of its input (first or second operand),
// then a Sigmoid whose output is also read by an Add (no SiLU: the three
// nodes run as one element-wise chain).
func siluModel(sigmoidFirst bool) *testmodels.Builder {
	b := testmodels.New("silu", 17)
	b.Input("x", tensor.Float, 2, 3, 7, 5)
	b.Output("y", tensor.Float, 2, 3, 7, 5)
	mul := []string{"x", "s"}
	if sigmoidFirst {
		mul = []string{"s", "x"}
	}
	b.Node("Sigmoid", "sig", []string{"x"}, []string{"s"})
	b.Node("Mul", "mul", mul, []string{"m"})
	b.Node("Sigmoid", "sig2", []string{"m"}, []string{"s2"})
	b.Node("Mul", "mul2", []string{"m", "s2"}, []string{"m2"})
	b.Node("Add", "add", []string{"m2", "s2"}, []string{"y"})
	return b
}

// TestSiLUFusion checks that a Sigmoid multiplied by its input runs as
// one step computing bit for bit what the two nodes compute, with a tap
// of the Sigmoid's output seeing what the unfused engine computes.
func TestSiLUFusion(t *testing.T) {
	for _, sigmoidFirst := range []bool{false, true} {
		m, err := onnxgraph.LoadBytes(siluModel(sigmoidFirst).Bytes(), "")
		if err != nil {
			t.Fatal(err)
		}
		fused, err := NewGoSession(m, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(fused.prog.steps) != 2 || fused.prog.steps[1].fused != "+Mul+Add" {
			t.Fatalf("%d steps, want 2 (sig+mul, sig2+mul2+add)", len(fused.prog.steps))
		}
		c := &compiler{model: m, threads: 2, noFuse: true}
		prog, err := c.compileGraph(m.Graph, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		plain := &GoSession{model: m, prog: prog, threads: 2, inputs: fused.inputs, outputs: fused.outputs}
		x := randomInput(4, 2, 3, 7, 5)
		x.Float32s()[0], x.Float32s()[1] = float32(math.NaN()), float32(math.Inf(-1))
		in := map[string]*tensor.Tensor{"x": x}
		collect := func(s *GoSession, values []string) map[string][]float32 {
			got := map[string][]float32{}
			outs, err := s.Run(context.Background(), in, RunOptions{TapValues: values, Tap: func(name string, t *tensor.Tensor) {
				got[name] = append([]float32(nil), t.Float32s()...)
			}})
			if err != nil {
				t.Fatal(err)
			}
			got["out"] = outs["y"].Float32s()
			return got
		}
		want := collect(plain, nil)
		for _, taps := range [][]string{{"y"}, nil} {
			got := collect(fused, taps)
			names := []string{"out"}
			if taps == nil {
				names = append(names, "s", "m", "s2")
			}
			for _, name := range names {
				g, w := got[name], want[name]
				if len(g) == 0 || len(g) != len(w) {
					t.Fatalf("sigmoid first %v, taps %v: %s has %d values, want %d", sigmoidFirst, taps, name, len(g), len(w))
				}
				for i := range g {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) && !(g[i] != g[i] && w[i] != w[i]) {
						t.Fatalf("sigmoid first %v, taps %v: %s[%d] = %g, unfused engine gives %g", sigmoidFirst, taps, name, i, g[i], w[i])
					}
				}
			}
		}
	}
}

// hardSwishModel is x·clip(x + 3, 0, 6)/6 decomposed into Add, Clip, Mul
// and a Div (or a Mul by 1/6) in the operand orders given, then the same
// chain again on its output with the Clip's output also read by the final
// Add, which keeps that one unfused. Opset 7 writes the Clip's bounds as
// attributes; from opset 11 they are initializers, or Constant nodes
// after the Add when the shift is the Add's second operand.
func hardSwishModel(opset int64, shiftFirst, clipFirst bool, tail string) *testmodels.Builder {
	b := testmodels.New("hardswish", opset)
	b.Input("x", tensor.Float, 2, 3, 7, 5)
	b.Output("y", tensor.Float, 2, 3, 7, 5)
	b.Init("three", []int64{1}, []float32{3})
	b.Init("zero", nil, []float32{0})
	b.Init("six", nil, []float32{6})
	b.Init("sixth", []int64{1, 1, 1}, []float32{1.0 / 6})
	chain := func(x, h string) {
		add := []string{x, "three"}
		if shiftFirst {
			add = []string{"three", x}
		}
		b.Node("Add", "add_"+h, add, []string{"t_" + h})
		switch {
		case opset < 11:
			b.Node("Clip", "clip_"+h, []string{"t_" + h}, []string{"c_" + h}, testmodels.AttrFloat("min", 0), testmodels.AttrFloat("max", 6))
		case shiftFirst:
			b.Node("Clip", "clip_"+h, []string{"t_" + h, "zero", "six"}, []string{"c_" + h})
		default:
			// Bounds from Constant nodes after the Add, as Paddle writes them.
			b.Node("Constant", "lo_"+h, nil, []string{"lo_" + h}, testmodels.AttrTensor("value", testmodels.Float32Tensor("", nil, []float32{0})))
			b.Node("Constant", "hi_"+h, nil, []string{"hi_" + h}, testmodels.AttrTensor("value", testmodels.Float32Tensor("", nil, []float32{6})))
			b.Node("Clip", "clip_"+h, []string{"t_" + h, "lo_" + h, "hi_" + h}, []string{"c_" + h})
		}
		mul := []string{x, "c_" + h}
		if clipFirst {
			mul = []string{"c_" + h, x}
		}
		b.Node("Mul", "mul_"+h, mul, []string{"m_" + h})
		switch tail {
		case "Div":
			b.Node("Div", "tail_"+h, []string{"m_" + h, "six"}, []string{h})
		case "Mul":
			b.Node("Mul", "tail_"+h, []string{"m_" + h, "sixth"}, []string{h})
		default:
			b.Node("Mul", "tail_"+h, []string{"sixth", "m_" + h}, []string{h})
		}
	}
	chain("x", "h1")
	chain("h1", "h2")
	b.Node("Add", "out", []string{"h2", "c_h2"}, []string{"y"})
	return b
}

// TestHardSwishFusion checks that a decomposed HardSwish runs as one step
// computing bit for bit what its four nodes compute, for the Clip's bounds
// as inputs and as attributes, both operand orders and a Div or Mul tail;
// that a chain whose Clip output is read elsewhere is left to its nodes;
// and that taps of the inner values see what the unfused engine computes.
func TestHardSwishFusion(t *testing.T) {
	for _, tc := range []struct {
		opset                 int64
		shiftFirst, clipFirst bool
		tail                  string
	}{
		{11, false, false, "Div"}, {11, true, true, "Mul"}, {13, false, true, "MulFirst"}, {7, true, false, "Div"},
	} {
		m, err := onnxgraph.LoadBytes(hardSwishModel(tc.opset, tc.shiftFirst, tc.clipFirst, tc.tail).Bytes(), "")
		if err != nil {
			t.Fatal(err)
		}
		fused, err := NewGoSession(m, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(fused.prog.steps) != 6 {
			t.Fatalf("%+v: %d steps, want 6 (fused h1, four nodes of h2, out)", tc, len(fused.prog.steps))
		}
		c := &compiler{model: m, threads: 2, noFuse: true}
		prog, err := c.compileGraph(m.Graph, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		plain := &GoSession{model: m, prog: prog, threads: 2, inputs: fused.inputs, outputs: fused.outputs}
		x := randomInput(4, 2, 3, 7, 5)
		xs := x.Float32s()
		for i := range xs {
			xs[i] *= 8 // across both clip bounds
		}
		xs[0], xs[1], xs[2], xs[3] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.Copysign(0, -1))
		xs[4], xs[5] = -3, 3
		in := map[string]*tensor.Tensor{"x": x}
		collect := func(s *GoSession, values []string) map[string][]float32 {
			got := map[string][]float32{}
			outs, err := s.Run(context.Background(), in, RunOptions{TapValues: values, Tap: func(name string, t *tensor.Tensor) {
				got[name] = append([]float32(nil), t.Float32s()...)
			}})
			if err != nil {
				t.Fatal(err)
			}
			got["out"] = outs["y"].Float32s()
			return got
		}
		want := collect(plain, nil)
		for _, taps := range [][]string{{"y"}, {"h1"}, nil} {
			got := collect(fused, taps)
			names := []string{"out"}
			if taps == nil {
				names = append(names, "t_h1", "c_h1", "m_h1", "h1")
			}
			for _, name := range names {
				g, w := got[name], want[name]
				if len(g) == 0 || len(g) != len(w) {
					t.Fatalf("%+v, taps %v: %s has %d values, want %d", tc, taps, name, len(g), len(w))
				}
				for i := range g {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) && !(g[i] != g[i] && w[i] != w[i]) {
						t.Fatalf("%+v, taps %v: %s[%d] = %g, unfused engine gives %g", tc, taps, name, i, g[i], w[i])
					}
				}
			}
		}
	}
}

// roundTripModel is x → QuantizeLinear → DequantizeLinear three times:
// uint8 per tensor, int8 per channel (axis 1) after a Relu, int16 per
// tensor; and a fourth QuantizeLinear whose codes are also a graph
// output, which must stay a step of its own.
func roundTripModel() *testmodels.Builder {
	b := testmodels.New("roundtrip", 21)
	b.Input("x", tensor.Float, 2, 4, 5, 6).Output("y", tensor.Float, 2, 4, 5, 6).Output("y2", tensor.Float, 2, 4, 5, 6).Output("c4", tensor.Uint8, 2, 4, 5, 6)
	zp := func(name string, dt tensor.DType, raw []byte, dims ...int64) {
		b.Model.Graph.Initializer = append(b.Model.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(dt)), RawData: raw})
	}
	b.Init("s1", nil, []float32{0.05})
	zp("z1", tensor.Uint8, []byte{128})
	b.Init("s2", []int64{4}, []float32{0.01, 0.02, 0.03, 0.05})
	zp("z2", tensor.Int8, []byte{0, 3, 0xfd, 0}, 4)
	b.Init("s3", nil, []float32{0.0001})
	zp("z3", tensor.Int16, []byte{0x10, 0x00})
	b.Node("QuantizeLinear", "q1", []string{"x", "s1", "z1"}, []string{"c1"})
	b.Node("DequantizeLinear", "dq1", []string{"c1", "s1", "z1"}, []string{"d1"})
	b.Node("Relu", "relu", []string{"d1"}, []string{"r"})
	b.Node("QuantizeLinear", "q2", []string{"r", "s2", "z2"}, []string{"c2"})
	b.Node("DequantizeLinear", "dq2", []string{"c2", "s2", "z2"}, []string{"y"})
	b.Node("QuantizeLinear", "q3", []string{"x", "s3", "z3"}, []string{"c3"})
	b.Node("DequantizeLinear", "dq3", []string{"c3", "s3", "z3"}, []string{"y2"})
	b.Node("QuantizeLinear", "q4", []string{"x", "s1", "z1"}, []string{"c4"})
	return b
}

// TestRoundTripFusion checks that a QuantizeLinear read only by its
// DequantizeLinear runs as one step giving bit for bit what the two nodes
// give (NaN, ±Inf, ties and saturating values among the inputs), that a
// tap of the codes sees what the unfused engine computes, and that codes
// the graph outputs are computed.
func TestRoundTripFusion(t *testing.T) {
	m, err := onnxgraph.LoadBytes(roundTripModel().Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	fused, err := NewGoSession(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range fused.prog.steps {
		if st.fused == "+DequantizeLinear" {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d fused round trips, want 3", n)
	}
	c := &compiler{model: m, threads: 2, noFuse: true}
	prog, err := c.compileGraph(m.Graph, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := &GoSession{model: m, prog: prog, threads: 2, inputs: fused.inputs, outputs: fused.outputs}
	x := randomInput(8, 2, 4, 5, 6)
	xs := x.Float32s()
	for i := range xs {
		xs[i] *= 10
	}
	xs[0], xs[1], xs[2], xs[3], xs[4] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0.025, -0.075
	in := map[string]*tensor.Tensor{"x": x}
	bits := func(t *tensor.Tensor) []byte { return slices.Clone(tensor.ByteView(t.Data)) }
	run := func(s *GoSession, taps []string) map[string][]byte {
		got := map[string][]byte{}
		outs, err := s.Run(context.Background(), in, RunOptions{TapValues: taps, Tap: func(name string, t *tensor.Tensor) { got[name] = bits(t) }})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []string{"y", "y2", "c4"} {
			got[o] = bits(outs[o])
		}
		return got
	}
	want := run(plain, []string{"c2", "d1"})
	for _, taps := range [][]string{{"y"}, {"c2", "d1"}} {
		got := run(fused, taps)
		for _, name := range append([]string{"y", "y2", "c4"}, taps...) {
			if name == "y" && len(taps) == 1 {
				continue
			}
			if !bytes.Equal(got[name], want[name]) {
				t.Errorf("taps %v: %s differs from the unfused engine's", taps, name)
			}
		}
	}
}

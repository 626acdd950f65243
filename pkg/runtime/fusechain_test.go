package runtime

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// geluModel is a bias Add of a row constant of length cols, then GELU
// as PyTorch exports it before opset 20: Div by √2, Erf, Add 1, Mul by
// the input, Mul by ½, with the constants of the later nodes written as
// Constant nodes between them; then a Tanh whose output the graph
// returns, which ends the chain, and a chain of a Sub and a Mul that read
// it, the Mul by another row constant.
func geluModel(cols int) *testmodels.Builder {
	b := testmodels.New("gelu", 17)
	b.Input("x", tensor.Float, 3, 5, cols)
	b.Output("y", tensor.Float, 3, 5, cols)
	b.Output("t", tensor.Float, 3, 5, cols)
	b.RandomInit("bias", 1, int64(cols))
	b.RandomInit("gamma", 1, 1, int64(cols))
	b.Init("sqrt2", nil, []float32{1.4142135})
	b.Node("Add", "addb", []string{"bias", "x"}, []string{"xb"})
	b.Node("Div", "div", []string{"xb", "sqrt2"}, []string{"d"})
	b.Node("Erf", "erf", []string{"d"}, []string{"e"})
	b.Node("Constant", "one", nil, []string{"c1"}, testmodels.AttrFloat("value_float", 1))
	b.Node("Add", "add", []string{"e", "c1"}, []string{"a"})
	b.Node("Mul", "mul", []string{"xb", "a"}, []string{"m"})
	b.Node("Constant", "half", nil, []string{"c2"}, testmodels.AttrFloat("value_float", 0.5))
	b.Node("Mul", "mul2", []string{"m", "c2"}, []string{"g"})
	b.Node("Tanh", "tanh", []string{"g"}, []string{"t"})
	b.Node("Sub", "sub", []string{"c2", "t"}, []string{"s"})
	b.Node("Mul", "mul3", []string{"gamma", "s"}, []string{"y"})
	return b
}

// TestEWChainFusion checks that element-wise chains run as single steps
// that compute bit for bit what their nodes compute one by one, on two
// threads and through blocks of every kind (a tail shorter than a vector
// included, rows shorter and longer than a block), and that a run tapping
// the intermediates sees what the unfused engine computes.
func TestEWChainFusion(t *testing.T) {
	for _, cols := range []int{37, 1500} {
		t.Run(fmt.Sprint(cols), func(t *testing.T) { testEWChainFusion(t, cols) })
	}
}

func testEWChainFusion(t *testing.T, cols int) {
	m, err := onnxgraph.LoadBytes(geluModel(cols).Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	fused, err := NewGoSession(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range fused.prog.steps {
		got = append(got, st.node.Name+st.fused)
	}
	if want := []string{"addb+Div+Erf+Add+Mul+Mul+Tanh", "sub+Mul"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("steps %v, want %v", got, want)
	}
	c := &compiler{model: m, threads: 2, noFuse: true}
	prog, err := c.compileGraph(m.Graph, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := &GoSession{model: m, prog: prog, threads: 2, inputs: fused.inputs, outputs: fused.outputs}
	x := randomInput(5, 3, 5, cols)
	xs := x.Float32s()
	xs[0], xs[1], xs[2], xs[3] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.Copysign(0, -1))
	for i := range xs[4:] {
		xs[4+i] *= 4
	}
	in := map[string]*tensor.Tensor{"x": x}
	collect := func(s *GoSession, taps []string) map[string][]float32 {
		vals := map[string][]float32{}
		outs, err := s.Run(context.Background(), in, RunOptions{TapValues: taps, Tap: func(name string, t *tensor.Tensor) {
			vals[name] = append([]float32(nil), t.Float32s()...)
		}})
		if err != nil {
			t.Fatal(err)
		}
		vals["out y"], vals["out t"] = outs["y"].Float32s(), outs["t"].Float32s()
		return vals
	}
	want := collect(plain, nil)
	for _, taps := range [][]string{{"y"}, nil} {
		vals := collect(fused, taps)
		names := []string{"out y", "out t"}
		if taps == nil {
			names = append(names, "xb", "d", "e", "a", "m", "g", "s")
		}
		for _, name := range names {
			g, w := vals[name], want[name]
			if len(g) == 0 || len(g) != len(w) {
				t.Fatalf("taps %v: %s has %d values, want %d", taps, name, len(g), len(w))
			}
			for i := range g {
				if math.Float32bits(g[i]) != math.Float32bits(w[i]) && !(g[i] != g[i] && w[i] != w[i]) {
					t.Fatalf("taps %v: %s[%d] = %g, unfused engine gives %g", taps, name, i, g[i], w[i])
				}
			}
		}
	}
}

package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func randomInput(seed uint64, shape ...int) *tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 7))
	x := tensor.New(tensor.Float, shape...)
	for i := range x.Float32s() {
		x.Float32s()[i] = r.Float32()*4 - 2
	}
	return x
}

// TestProfile runs convBNReluModel three times with a profile, tapping
// one value in the last run, and checks the counts, the fused steps'
// kernels, the taps' row and the trace events.
func TestProfile(t *testing.T) {
	m, err := onnxgraph.LoadBytes(convBNReluModel(8).Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	prof := NewProfile()
	s, err := NewGoSession(m, Options{Threads: 1, Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*tensor.Tensor{"x": randomInput(1, 2, 4, 9, 11)}
	for i := range 3 {
		var opts RunOptions
		if i == 2 {
			opts = RunOptions{TapValues: []string{"y"}, Tap: func(string, *tensor.Tensor) {}}
		}
		if _, err := s.Run(context.Background(), in, opts); err != nil {
			t.Fatal(err)
		}
	}
	if prof.Runs() != 3 {
		t.Errorf("Runs() = %d, want 3", prof.Runs())
	}
	kernelsOf := map[string]string{}
	for _, n := range prof.Nodes() {
		kernelsOf[n.Node] = n.Kernel
		want := 3
		if n.Node == tapsNode {
			want = 2 // the two steps of the tapped run
		}
		if n.Count != want {
			t.Errorf("node %s ran %d times, want %d", n.Node, n.Count, want)
		}
	}
	// conv1 is fused with bn1 and relu1 and runs as SgemmConv; conv2
	// (one channel per group) with relu2, as the depthwise loop.
	for node, want := range map[string]string{"conv1": "+BatchNormalization+Relu 3×3 ", "conv2": "+Relu 3×3/2×2 depthwise"} {
		if got := kernelsOf[node]; !strings.HasPrefix(got, want) {
			t.Errorf("node %s: kernel %q, want it to start with %q", node, got, want)
		}
	}
	if len(kernelsOf) != 3 {
		t.Errorf("profiled nodes %v, want conv1, conv2 and %s", kernelsOf, tapsNode)
	}
	ops := prof.OpTypes()
	if len(ops) != 2 || ops[0].OpType != "Conv" && ops[1].OpType != "Conv" || ops[0].Nodes+ops[1].Nodes != 3 {
		t.Errorf("op types %+v, want Conv (2 nodes) and %s", ops, tapsNode)
	}
	var table bytes.Buffer
	if err := prof.WriteTable(&table, 1); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(table.String()), "\n"); len(lines) != 1+3+1+2 || !strings.HasPrefix(lines[0], "profile: 3 runs") {
		t.Errorf("table:\n%s", table.String())
	}
	var trace bytes.Buffer
	if err := prof.WriteTrace(&trace); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			TS, Dur       float64
			TID           int
			Args          map[string]string
		}
	}
	if err := json.Unmarshal(trace.Bytes(), &doc); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	if len(doc.TraceEvents) != 8 {
		t.Fatalf("%d trace events, want 8 (3 runs of 2 steps and the last run's 2 taps)", len(doc.TraceEvents))
	}
	for i, e := range doc.TraceEvents {
		if e.Ph != "X" || e.TID != 1 || e.Dur < 0 || i > 0 && e.TS < doc.TraceEvents[i-1].TS {
			t.Errorf("event %d: %+v", i, e)
		}
		if e.Name == "conv1" && !strings.HasPrefix(e.Args["kernel"], "+BatchNormalization+Relu") {
			t.Errorf("event %d: %+v has no kernel", i, e)
		}
	}
}

// TestProfileTraceBound checks that MaxEvents bounds the trace but not
// the table.
func TestProfileTraceBound(t *testing.T) {
	m, err := onnxgraph.LoadBytes(convBNReluModel(1).Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	prof := NewProfile()
	prof.MaxEvents = 3
	s, err := NewGoSession(m, Options{Threads: 1, Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*tensor.Tensor{"x": randomInput(2, 2, 4, 9, 11)}
	for range 2 {
		if _, err := s.Run(context.Background(), in, RunOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var trace bytes.Buffer
	if err := prof.WriteTrace(&trace); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []json.RawMessage
		OtherData   map[string]string
	}
	if err := json.Unmarshal(trace.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.TraceEvents) != 3 || doc.OtherData["dropped_events"] != "1" {
		t.Errorf("%d events, other data %v; want 3 events and 1 dropped", len(doc.TraceEvents), doc.OtherData)
	}
	for _, n := range prof.Nodes() {
		if n.Count != 2 {
			t.Errorf("node %s ran %d times, want 2", n.Node, n.Count)
		}
	}
}

// TestConvWays checks that every SgemmConv way a session asks for
// through Options.ConvWay gives the cheapest way's results bit for bit,
// and that the plan a Conv keeps is the way asked for where it can be.
func TestConvWays(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model func() []byte
		conv  string
	}{
		{"conv-bn-relu", func() []byte { return convBNReluModel(1).Bytes() }, "conv1"},
		{"residual", func() []byte { return residualModel(false, false, false, false).Bytes() }, "conv1"},
	} {
		m, err := onnxgraph.LoadBytes(tc.model(), "")
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*tensor.Tensor{"x": randomInput(3, 2, 4, 9, 11)}
		var want []float32
		for _, way := range []kernels.ConvWay{kernels.ConvAuto, kernels.ConvPacked, kernels.ConvPadded, kernels.ConvShifted, kernels.ConvRows} {
			t.Run(tc.name+"/"+way.String(), func(t *testing.T) {
				prof := NewProfile()
				s, err := NewGoSession(m, Options{Threads: 2, ConvWay: way, Profile: prof})
				if err != nil {
					t.Fatal(err)
				}
				outs, err := s.Run(context.Background(), in, RunOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got := outs["y"].Float32s()
				if want == nil {
					want = got
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("y[%d] = %g, the cheapest way gives %g", i, got[i], want[i])
					}
				}
				if way == kernels.ConvAuto || way == kernels.ConvRows {
					return // rows need the AVX-512 kernels
				}
				for _, n := range prof.Nodes() {
					if n.Node == tc.conv && !strings.Contains(n.Kernel, way.String()) {
						t.Errorf("%s computed by %q, want %s", n.Node, n.Kernel, way)
					}
				}
			})
		}
	}
}

// TestKernelChoicesAtCompile checks that a Conv whose input declares its
// shape has its way chosen when the session is compiled, and that the
// runs compute it that way; a Conv reading an undeclared value is chosen
// at its first run.
func TestKernelChoicesAtCompile(t *testing.T) {
	m, err := onnxgraph.LoadBytes(convBNReluModel(1).Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	prof := NewProfile()
	s, err := NewGoSession(m, Options{Threads: 1, Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	choices := s.KernelChoices()
	if len(choices) != 1 || !strings.HasPrefix(choices["conv1"], "+BatchNormalization+Relu 3×3 ") {
		t.Fatalf("compile-time choices %v, want conv1's alone", choices)
	}
	if _, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": randomInput(8, 2, 4, 9, 11)}, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range prof.Nodes() {
		if n.Node == "conv1" && n.Kernel != choices["conv1"] {
			t.Errorf("conv1 ran as %q, chosen at compile time as %q", n.Kernel, choices["conv1"])
		}
		if n.Node == "conv2" && n.Kernel == "" {
			t.Errorf("conv2 ran with no kernel named")
		}
	}
}

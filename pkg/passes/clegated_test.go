package passes

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// gatedModel is Conv → SiLU (Sigmoid · x) → {depthwise Conv, 1×1 Conv},
// the depthwise Conv → HardSwish written out (Add 3, Clip(0, 6), Div 6,
// Mul) → 1×1 Conv, and the two branches added: two gated pairs, the first
// with two readers. The first Conv's output channels span 4^-2 to 4^1, as
// BatchNorm folding leaves them.
func gatedModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	b := testmodels.New("gated", 17)
	b.Input("x", tensor.Float, "n", 3, 8, 8).Output("y", tensor.Float, "n", 4, 8, 8)
	scaledConv(b, rng, "w1", 8, 3, 3)
	scaledConv(b, rng, "w2", 8, 1, 3)
	scaledConv(b, rng, "w2b", 4, 8, 1)
	scaledConv(b, rng, "w3", 4, 8, 1)
	b.Init("three", []int64{}, []float32{3}).Init("zero", []int64{}, []float32{0}).Init("six", []int64{}, []float32{6})
	pads := testmodels.AttrInts("pads", 1, 1, 1, 1)
	b.Node("Conv", "conv1", []string{"x", "w1", "w1_b"}, []string{"c1"}, pads)
	b.Node("Sigmoid", "sig1", []string{"c1"}, []string{"s1"})
	b.Node("Mul", "silu1", []string{"c1", "s1"}, []string{"a1"})
	b.Node("Conv", "dw", []string{"a1", "w2", "w2_b"}, []string{"c2"}, pads, testmodels.AttrInt("group", 8))
	b.Node("Conv", "side", []string{"a1", "w2b", "w2b_b"}, []string{"c2b"})
	b.Node("Add", "hs_add", []string{"c2", "three"}, []string{"h_a"})
	b.Node("Clip", "hs_clip", []string{"h_a", "zero", "six"}, []string{"h_c"})
	b.Node("Div", "hs_div", []string{"h_c", "six"}, []string{"h_d"})
	b.Node("Mul", "hswish", []string{"c2", "h_d"}, []string{"a2"})
	b.Node("Conv", "conv3", []string{"a2", "w3", "w3_b"}, []string{"c3"})
	b.Node("Add", "sum", []string{"c3", "c2b"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGatedEqualization checks cross-layer equalization through gated
// activations: the float function is kept (within 1e-5 of the output's
// magnitude), each equalized pair's gate reads a Mul by the channels'
// scales, prepare quantizes the rescaled SiLU and HardSwish at their
// boundaries only, the pairs whose estimated gain falls short of
// gated_min_gain (or that have no calibration data to estimate it on) are
// left alone with the reason, and the quantized output gets closer to the
// float one.
func TestGatedEqualization(t *testing.T) {
	src := newSampleSource(3, 8, 3, 8, 8)
	ref := runX(t, gatedModel(t), src)
	tests := []struct {
		name   string
		config string
		data   bool
		// equalized are the first Convs whose pair is equalized.
		equalized []string
		// skipped names a word of the reason the others are left alone.
		skipped string
	}{
		{"gated", "cross_layer_equalization: {gated_min_gain: 0.5}", true, []string{"conv1", "dw"}, ""},
		{"gain too small", "cross_layer_equalization: {gated_min_gain: 200}", true, nil, "gated_min_gain"},
		{"no data", "cross_layer_equalization: true", false, nil, "calibration data"},
		{"off", "cross_layer_equalization: {gated: false}", true, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var data *sampleSource
			if tc.data {
				data = src
			}
			u := quantizeWith(t, gatedModel(t), "w8a8", algorithms(t, "algorithms:\n  "+tc.config+"\n"), data)
			sameOutput(t, "equalization", ref, runX(t, u.Model, src))
			var rescales []string
			for _, n := range u.Model.Graph.Nodes {
				if strings.HasSuffix(n.Name, "_gate_rescale") {
					rescales = append(rescales, n.Name)
					for _, c := range n.Outputs[0].Consumers {
						if c.OpType != "Sigmoid" && c.OpType != "Add" {
							t.Errorf("%s is read by %s, want the gate", n.Name, c)
						}
						if u.Plan.Tensor(n.Outputs[0].Name) != nil {
							t.Errorf("%s's output is quantized inside the gated pattern", n.Name)
						}
					}
				}
			}
			if len(rescales) != len(tc.equalized) {
				t.Errorf("gate rescales %q, want one for each of %q", rescales, tc.equalized)
			}
			for _, first := range tc.equalized {
				if !strings.Contains(strings.Join(u.Plan.Notes, "\n"), "_rescaled at \""+first+"_gate_rescale\"") {
					t.Errorf("no rescaled gated pattern noted at %s's rescale (notes %q)", first, u.Plan.Notes)
				}
			}
			var skipped int
			for _, l := range u.Layers {
				if l.Algorithm == crossLayerEqualizationName && strings.Contains(l.Skipped, "gated activation") {
					skipped++
					if !strings.Contains(l.Skipped, tc.skipped) {
						t.Errorf("%s skipped for %q, want a reason naming %q", l.Node, l.Skipped, tc.skipped)
					}
				}
			}
			if want := 2 - len(tc.equalized); tc.skipped != "" && skipped != want {
				t.Errorf("%d gated pairs reported skipped, want %d", skipped, want)
			}
		})
	}
	// The quantized output: equalizing the gated pairs brings it closer to
	// the float model's on the calibration data.
	out := func(config string) float64 {
		u := quantizeOnSource(t, gatedModel(t), "w8a8", algorithms(t, "algorithms:\n  "+config+"\n"), PrepareOptions{}, src)
		return sqnr(ref, runX(t, u.Result.Model, src))
	}
	off, on := out("cross_layer_equalization: {gated: false}"), out("cross_layer_equalization: {gated_min_gain: 0.5}")
	if on < off+1 {
		t.Errorf("output SQNR %.2f dB with the gated pairs equalized, %.2f dB without: want at least 1 dB more", on, off)
	}
	t.Logf("output SQNR: %.2f dB without the gated pairs, %.2f dB with", off, on)
}

func mustPreset(t *testing.T, name string) *config.QuantizerConfig {
	t.Helper()
	c, err := config.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// quantizeOnSource quantizes m with a preset and algorithms, calibrating
// (min/max) on all the samples of src, which the algorithms read too.
func quantizeOnSource(t *testing.T, m *onnxgraph.Model, preset string, alg *config.Algorithms, opts PrepareOptions, src *sampleSource) *Unit {
	t.Helper()
	u := &Unit{Model: m, Config: mustPreset(t, preset), Algorithms: alg, Prepare: opts,
		Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: src, BatchSize: 4},
		Calibrate: func(_ context.Context, m *onnxgraph.Model, plan *Plan) (Stats, error) {
			in, _ := src.Batch(0, src.n)
			return observeOn(t, m, plan, []map[string]*tensor.Tensor{in}), nil
		}}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u
}

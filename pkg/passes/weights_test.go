package passes

import (
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func int4Spec(q spec.QScheme) *spec.QuantizationSpec {
	return &spec.QuantizationSpec{DType: spec.Int4, QScheme: q, ScaleDType: spec.Float32}
}

// roundTripError quantizes g with the qparams of [lo, hi] and returns the
// largest absolute error.
func roundTripError(t *testing.T, g []float32, lo, hi float32, s *spec.QuantizationSpec) float64 {
	t.Helper()
	sc, zp, err := s.QParams([]float32{lo}, []float32{hi})
	if err != nil {
		t.Fatal(err)
	}
	qmin, qmax, _ := s.QuantRange()
	worst := 0.0
	for _, x := range g {
		q := quant.Dequantize(quant.Int(x, sc[0], int64(zp[0]), qmin, qmax), int64(zp[0]), sc[0])
		worst = max(worst, math.Abs(float64(x-q)))
	}
	return worst
}

// TestMSERangeFitsGridEnds: the symmetric int4 formula (absmax/7.5) maps a
// positive extreme to 7.5 steps, clamped to 7; the search must find the
// scale that represents a block's extreme exactly when that is best, which
// for a block of one weight means no error at all.
func TestMSERangeFitsGridEnds(t *testing.T) {
	cases := []struct {
		name string
		g    []float32
		q    spec.QScheme
		tol  float64 // largest round-trip error allowed
	}{
		{"one positive weight", []float32{0.3}, spec.Symmetric, 1e-7},
		{"one negative weight", []float32{-0.3}, spec.Symmetric, 1e-7},
		{"grid multiples", []float32{0.7, -0.8, 0.1, 0.3}, spec.Symmetric, 1e-6},
		{"restricted range", []float32{0.7, -0.7, 0.2}, spec.SymmetricWithClipping, 1e-6},
		{"asymmetric one weight", []float32{0.3}, spec.Asymmetric, 1e-7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := int4Spec(c.q)
			lo, hi := c.g[0], c.g[0]
			for _, x := range c.g {
				lo, hi = min(lo, x), max(hi, x)
			}
			l, h := mseRange(c.g, lo, hi, s)
			if e := roundTripError(t, c.g, l, h, s); e > c.tol {
				t.Errorf("range [%g, %g]: round-trip error %g, want ≤ %g", l, h, e, c.tol)
			}
		})
	}
	// The formula's own range loses 1/15 of a lone positive weight: the
	// case the search exists for.
	if e := roundTripError(t, []float32{0.3}, 0.3, 0.3, int4Spec(spec.Symmetric)); e < 0.019 {
		t.Errorf("formula range: error %g, expected the clamped 7/7.5 of the value", e)
	}
}

// TestMSERangeNeverWorse: the chosen range's squared error is at most the
// formula range's, on random blocks.
func TestMSERangeNeverWorse(t *testing.T) {
	seed := uint64(7)
	next := func() float32 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return float32(int64(seed>>33)%2001-1000) / 1000
	}
	for _, q := range []spec.QScheme{spec.Symmetric, spec.SymmetricWithClipping, spec.Asymmetric} {
		s := int4Spec(q)
		for b := range 50 {
			g := make([]float32, 1+b%32)
			lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
			for i := range g {
				g[i] = next() * next() * 3
				lo, hi = min(lo, g[i]), max(hi, g[i])
			}
			sc0, zp0, _ := s.QParams([]float32{lo}, []float32{hi})
			l, h := mseRange(g, lo, hi, s)
			sc, zp, _ := s.QParams([]float32{l}, []float32{h})
			if e, e0 := quantError(g, sc[0], zp[0], s), quantError(g, sc0[0], zp0[0], s); e > e0 {
				t.Errorf("%s block %d: searched error %g > formula error %g", q, b, e, e0)
			}
		}
	}
}

// TestPerBlockConvLayout: a per-block weight whose block covers every
// input channel is quantized per output channel (coreai-opt's block spans
// the kernel), not with one ONNX block per kernel position; a wider Conv
// keeps ONNX blocks along the input channels.
func TestPerBlockConvLayout(t *testing.T) {
	b := testmodels.New("convs", 17)
	b.Input("x", tensor.Float, 1, 1, 8, 8).Output("y", tensor.Float, 1, 4, 4, 4)
	w1 := make([]float32, 40*1*3*3)
	w2 := make([]float32, 4*40*3*3)
	for i := range w1 {
		w1[i] = float32(i%7) - 3
	}
	for i := range w2 {
		w2[i] = float32(i%5) - 2
	}
	b.Init("w1", []int64{40, 1, 3, 3}, w1).Init("w2", []int64{4, 40, 3, 3}, w2)
	b.Node("Conv", "conv1", []string{"x", "w1"}, []string{"h"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Conv", "conv2", []string{"h", "w2"}, []string{"y"}, testmodels.AttrInts("strides", 2, 2), testmodels.AttrInts("pads", 1, 1, 1, 1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Preset("w4")
	if err != nil {
		t.Fatal(err)
	}
	res, err := config.Resolve(cfg, m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(m, res, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value       string
		axis, block int
		scales      int
	}{{"w1", 0, 0, 40}, {"w2", 1, 32, 4 * 2 * 3 * 3}} {
		tp := plan.Tensor(c.value)
		if tp == nil {
			t.Fatalf("%s not planned", c.value)
		}
		if tp.Axis != c.axis || tp.BlockSize != c.block || len(tp.Params.Scales) != c.scales {
			t.Errorf("%s: axis %d block %d scales %d, want axis %d block %d scales %d",
				c.value, tp.Axis, tp.BlockSize, len(tp.Params.Scales), c.axis, c.block, c.scales)
		}
	}
}

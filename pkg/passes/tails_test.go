package passes

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestNarrowToTails checks the range of a SiLU's input, a Conv output
// reaching far below where the SiLU's quantized output leaves 0 (its bias
// pushes half the channels down by 30): the qparams pass raises its lower
// end to the floor, the grid still reaching it, and a note says so; every
// input below keeps the SiLU's output at the code of 0 once quantized on
// the narrowed grid; the upper end stays; running the pass again changes
// nothing; and --silu-floor=false or --patterns none keep the
// calculator's range.
func TestNarrowToTails(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	b := testmodels.New("tails", 17)
	b.Input("x", tensor.Float, "n", 3, 8, 8).Output("y", tensor.Float, "n", 4, 8, 8)
	w1 := make([]float32, 8*3*9)
	for i := range w1 {
		w1[i] = float32(rng.NormFloat64())
	}
	bias := make([]float32, 8)
	for i := range bias {
		bias[i] = float32(-30 * (i % 2))
	}
	b.Init("w1", []int64{8, 3, 3, 3}, w1).Init("b1", []int64{8}, bias)
	scaledConv(b, rng, "w2", 4, 8, 1)
	b.Node("Conv", "conv1", []string{"x", "w1", "b1"}, []string{"c1"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Sigmoid", "sig", []string{"c1"}, []string{"s1"})
	b.Node("Mul", "silu", []string{"c1", "s1"}, []string{"a1"})
	b.Node("Conv", "conv2", []string{"a1", "w2", "w2_b"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	src := newSampleSource(6, 8, 3, 8, 8)
	run := func(opts PrepareOptions) *Unit {
		return quantizeOnSource(t, m, "accurate", nil, opts, src)
	}
	// --silu-floor=false, and --patterns none (the Sigmoid's output then
	// quantized too), keep the calculator's range.
	for _, opts := range []PrepareOptions{{NoSiLUFloor: true}, {Patterns: PatternsNone}} {
		if c1 := run(opts).Plan.Tensor("c1"); c1.SiLUFloor || strings.Contains(c1.Intrinsic, "SiLU input") {
			t.Errorf("%+v: c1 marked or narrowed (%q)", opts, c1.Intrinsic)
		}
	}
	u := run(PrepareOptions{})
	x, y := u.Plan.Tensor("c1"), u.Plan.Root(u.Plan.Tensor("a1"))
	if !strings.Contains(strings.Join(u.Plan.Notes, "\n"), `"c1" from`) {
		t.Fatalf("no note of c1's narrowed range in %q", u.Plan.Notes)
	}
	if !strings.Contains(u.Plan.Tensor("c1").Intrinsic, "SiLU input: quantized from") {
		t.Errorf("c1's rule does not say why its range starts where it does: %q", u.Plan.Tensor("c1").Intrinsic)
	}
	qmin, qmax := x.Spec.DType.Range()
	s, zp := float64(x.Params.Scales[0]), float64(x.Params.ZeroPoints[0])
	lo, hi := (float64(qmin)-zp)*s, (float64(qmax)-zp)*s
	ys, yzp := float64(y.Params.Scales[0]), float64(y.Params.ZeroPoints[0])
	floor, _ := siluFloor(ys / 4)
	if lo > floor || lo < floor-s {
		t.Errorf("c1's grid starts at %g, want within a step (%g) below the floor %g", lo, s, floor)
	}
	if obs := x.Params.Observed; obs == nil || obs.Min > -20 || float64(obs.Max) > hi+s {
		t.Errorf("observed %+v: want the calibrated minimum below −20 and the grid's top %g kept", obs, hi)
	}
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	zero := math.Round(0/ys + yzp)
	for v := float64(x.Params.Observed.Min); v <= floor; v += 0.01 {
		q := math.Max(float64(qmin), math.Min(float64(qmax), math.Round(v/s+zp)))
		code := math.Round(silu((q-zp)*s)/ys + yzp)
		if code != zero {
			t.Fatalf("input %g: the SiLU's output rounds to code %g on the narrowed grid, want the code of 0 (%g)", v, code, zero)
		}
	}
	before := *x.Params
	if note := narrowToTails(u.Model, u.Plan); note != "" || x.Params.Scales[0] != before.Scales[0] || x.Params.ZeroPoints[0] != before.ZeroPoints[0] {
		t.Errorf("a second pass changed the plan (note %q, scale %g → %g)", note, before.Scales[0], x.Params.Scales[0])
	}
}

// siluFloor is the SiLU's floor for a tolerance, from the op table.
func siluFloor(tol float64) (float64, bool) {
	return gatedTails["silu"].Floor(tol)
}

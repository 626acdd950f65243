//go:build ort

package passes

import (
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// TestORTFusedGatedActivations runs a Conv → SiLU → Conv → HardSwish
// chain quantized under --patterns all, whose Conv outputs have no Q/DQ
// (TestFusedGatedActivations), in ONNX Runtime with every optimization:
// it loads, runs the Convs on their dequantized inputs, and agrees with
// the built-in engine.
func TestORTFusedGatedActivations(t *testing.T) {
	lib := ortLibrary(t)
	b := newPatternBuilder("fused_gate_chain")
	b.RandomInit("w1", 0.5, 4, 4, 1)
	b.Node("Conv", "conv1", []string{"x", "w1"}, []string{"c1"})
	b.n("Sigmoid", "s", "c1")
	b.n("Mul", "h", "c1", "s")
	b.RandomInit("w2", 0.5, 4, 4, 1)
	b.Node("Conv", "conv2", []string{"h", "w2"}, []string{"c2"})
	b.n("HardSwish", "y", "c2")
	m := b.model(t, "y")
	u := quantize(t, m, "w8a8", PrepareOptions{Patterns: PatternsAll})
	for _, v := range []string{"c1", "c2"} {
		if u.Plan.Tensor(v) != nil {
			t.Fatalf("%q is quantized under --patterns all", v)
		}
	}
	in := randomInputs(m, 5)
	so := ort.SessionOptions{IntraOpThreads: 1, InterOpThreads: 1, Optimization: ort.OptimizeAll}
	got, err1 := runORT(t, lib, u.Result.Model, in, so)["y"].AsFloat32()
	own, err2 := enginetest.Run(t, u.Result.Model, in)["y"].AsFloat32()
	for _, err := range []error{err1, err2} {
		if err != nil {
			t.Fatal(err)
		}
	}
	worst := 0.0
	for i := range own {
		worst = max(worst, math.Abs(float64(got[i]-own[i])))
	}
	t.Logf("ONNX Runtime against the built-in engine: %.2g", worst)
	if worst > 1e-5 {
		t.Errorf("ONNX Runtime and the built-in engine differ by %.2g", worst)
	}
}

//go:build ort

package passes

import (
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// TestORTMixedConcat runs the detector head with its Concat left in float
// in ONNX Runtime: the model loads with every optimization, and its
// probabilities (rows 4..9) agree with the built-in engine's within
// 1e-5 and with the float model's within 0.02, as TestMixedConcatStaysFloat
// measures with the built-in engine.
func TestORTMixedConcat(t *testing.T) {
	lib := ortLibrary(t)
	m := detectorHead(t, 640)
	for _, preset := range []string{"w8a8", "ort-x86"} {
		u := quantize(t, m, preset, PrepareOptions{})
		in := randomInputs(m, 9)
		so := ort.SessionOptions{IntraOpThreads: 1, InterOpThreads: 1, Optimization: ort.OptimizeAll}
		got, err1 := runORT(t, lib, u.Result.Model, in, so)["out"].AsFloat32()
		own, err2 := enginetest.Run(t, u.Result.Model, in)["out"].AsFloat32()
		ref, err3 := enginetest.Run(t, m, in)["out"].AsFloat32()
		for _, err := range []error{err1, err2, err3} {
			if err != nil {
				t.Fatal(err)
			}
		}
		engines, toFloat := 0.0, 0.0
		for i := 4 * 16; i < len(ref); i++ {
			engines = max(engines, math.Abs(float64(got[i]-own[i])))
			toFloat = max(toFloat, math.Abs(float64(got[i]-ref[i])))
		}
		t.Logf("%s: probabilities, ONNX Runtime against the built-in engine %.2g, against float %.4f", preset, engines, toFloat)
		if engines > 1e-5 || toFloat > 0.02 {
			t.Errorf("%s: probabilities differ from the built-in engine's by %.2g and from float by %.4f", preset, engines, toFloat)
		}
	}
}

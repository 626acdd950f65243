//go:build ort

package passes

import (
	"context"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/runtime"
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
		got, err := runORT(t, lib, u.Result.Model, in, ort.SessionOptions{IntraOpThreads: 1, InterOpThreads: 1, Optimization: ort.OptimizeAll})["out"].AsFloat32()
		if err != nil {
			t.Fatal(err)
		}
		s, err := runtime.NewGoSession(u.Result.Model, runtime.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		outs, err := s.Run(context.Background(), in, runtime.RunOptions{})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		own, _ := outs["out"].AsFloat32()
		fs, err := runtime.NewGoSession(m, runtime.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		fouts, err := fs.Run(context.Background(), in, runtime.RunOptions{})
		fs.Close()
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := fouts["out"].AsFloat32()
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

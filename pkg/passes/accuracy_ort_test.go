//go:build ort

package passes

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// accuracyORT is the top-1 accuracy of m in ONNX Runtime (default
// optimizations, so the fused integer kernels) on the evaluation set.
func accuracyORT(t *testing.T, lib *ort.Library, m *onnxgraph.Model, eval map[string]*tensor.Tensor, labels *tensor.Tensor) float64 {
	t.Helper()
	e, err := lib.Open(m, ort.SessionOptions{})
	if err != nil {
		t.Fatalf("onnxruntime: %v", err)
	}
	defer e.Close()
	lab, err := labels.AsFloat32()
	if err != nil {
		t.Fatal(err)
	}
	n, correct := len(lab), 0
	const batch = 50
	for start := 0; start < n; start += batch {
		end := min(start+batch, n)
		out, err := e.Run(t.Context(), batchOf(eval, start, end), runtimeRunOptions())
		if err != nil {
			t.Fatalf("onnxruntime: %v", err)
		}
		if len(out) != 1 {
			t.Fatalf("%d outputs, want the logits only", len(out))
		}
		for _, y := range out {
			f, err := y.AsFloat32()
			if err != nil {
				t.Fatal(err)
			}
			classes := len(f) / (end - start)
			for i := range end - start {
				best := 0
				for c := range classes {
					if f[i*classes+c] > f[i*classes+best] {
						best = c
					}
				}
				if best == int(lab[start+i]) {
					correct++
				}
			}
		}
	}
	return 100 * float64(correct) / float64(n)
}

// TestDigitsAccuracyORT measures the test accuracy of the trained digits
// models in ONNX Runtime: float, w8a8 (calibrated on calib_input.npy) and
// w4 weight-only. w8a8 must stay within 0.5 points of float, w4 within 1.
func TestDigitsAccuracyORT(t *testing.T) {
	lib := ortLibrary(t)
	dir, _ := sharedModelNames(t)
	isShortSkip(t, "digits accuracy")
	for _, name := range []string{"digits_lenet", "digits_mlp", "digits_resnet"} {
		t.Run(name, func(t *testing.T) {
			s := loadShared(t, dir, name, true)
			if s.labels == nil {
				t.Fatalf("%s: no eval_labels.npy", name)
			}
			float := accuracyORT(t, lib, s.model, s.eval, s.labels)
			for _, c := range []struct {
				preset string
				drop   float64
			}{{"w8a8", 0.5}, {"w4", 1}, {"ort-x86", 0.5}} {
				u := quantizeWithData(t, s.model, c.preset, s.calib, 256, 32, finalize.Options{})
				acc := accuracyORT(t, lib, u.Result.Model, s.eval, s.labels)
				t.Logf("%s: float %.2f%%, %s %.2f%% (%+.2f points)", name, float, c.preset, acc, acc-float)
				if acc < float-c.drop {
					t.Errorf("%s %s: accuracy %.2f%% is more than %.1f points below float %.2f%%", name, c.preset, acc, c.drop, float)
				}
			}
		})
	}
}

func runtimeRunOptions() runtime.RunOptions { return runtime.RunOptions{} }

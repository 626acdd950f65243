//go:build ort

package llama

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestONNXRuntimeAgrees runs the tiny decoder (fp32 and fp16, with a KV
// cache fed an empty past) in ONNX Runtime and in the built-in engine.
func TestONNXRuntimeAgrees(t *testing.T) {
	for _, fp16 := range []bool{false, true} {
		t.Run(fmt.Sprintf("fp16=%v", fp16), func(t *testing.T) {
			c := Tiny()
			c.FP16, c.KVCache, c.Tied = fp16, true, fp16
			m := load(t, c)
			in := map[string]*tensor.Tensor{"input_ids": tensor.FromInt64(ids, 1, len(ids))}
			ft := tensor.Float
			if fp16 {
				ft = tensor.Float16
			}
			for i := range c.Layers {
				for _, kv := range []string{"key", "value"} {
					in[fmt.Sprintf("past_key_values.%d.%s", i, kv)] = tensor.New(ft, 1, c.Heads, 0, c.HeadDim())
				}
			}
			s, err := ort.Open(m, runtime.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := s.Run(context.Background(), in, runtime.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := enginetest.Run(t, m, in)
			tol := 1e-4
			if fp16 {
				tol = 2e-2
			}
			for _, name := range []string{"logits", "present.1.key"} {
				a, b := floats(t, got[name]), floats(t, want[name])
				if len(a) != len(b) {
					t.Fatalf("%s: %d values from ONNX Runtime, %d from the built-in engine", name, len(a), len(b))
				}
				for i := range a {
					if d := math.Abs(float64(a[i] - b[i])); d > tol {
						t.Fatalf("%s[%d]: ONNX Runtime %g, built-in engine %g", name, i, a[i], b[i])
					}
				}
			}
		})
	}
}

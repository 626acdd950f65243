//go:build ort

package ort

import (
	"context"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/quant/quanttest"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestQuantizeCases runs the quantization case table through ONNX
// Runtime's QuantizeLinear and the built-in engine's, comparing raw codes:
// ONNX Runtime is the oracle for the arithmetic in pkg/quant. int32 (no
// QuantizeLinear output type) and float4 (ONNX Runtime 1.23 cannot load
// it) are pinned by pkg/quant's own tests only.
func TestQuantizeCases(t *testing.T) {
	l := testLibrary(t)
	for _, c := range quanttest.Cases {
		if c.DType == tensor.Int32 || c.DType == tensor.Float4E2M1 {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			// Several rows so that vectorised loops see every value.
			const rows = 9
			b := testmodels.New("quantize", 21)
			// ONNX Runtime returns no 4-bit tensors: those codes come
			// out through a Cast to int32.
			out := c.DType
			if c.DType == tensor.Int4 || c.DType == tensor.Uint4 {
				out = tensor.Int32
			}
			b.Input("x", tensor.Float, rows, len(c.X)).Output("y", out, rows, len(c.X))
			initializer(t, b, "scale", tensor.FromFloat32([]float32{c.Scale}))
			zp := quanttest.Tensor(c.DType, c.ZeroPoint)
			if quant.IsNarrowFloat(c.DType) {
				zp = tensor.New(c.DType)
			}
			zp.Shape = []int{}
			initializer(t, b, "zp", zp)
			sat := int64(1)
			if c.NoSaturate {
				sat = 0
			}
			var attrs = testmodels.AttrInt("saturate", sat)
			if !quant.IsNarrowFloat(c.DType) {
				attrs = testmodels.AttrInt("axis", 1)
			}
			b.Node("QuantizeLinear", "q", []string{"x", "scale", "zp"}, []string{"q"}, attrs)
			if out != c.DType {
				b.Node("Cast", "cast", []string{"q"}, []string{"y"}, testmodels.AttrInt("to", int64(out)))
			} else {
				b.Node("Identity", "same", []string{"q"}, []string{"y"})
			}
			m := modelOf(t, b)
			x := tensor.New(tensor.Float, rows, len(c.X))
			for r := range rows {
				copy(x.Float32s()[r*len(c.X):], c.X)
			}
			want := slices.Concat(slices.Repeat([][]int64{c.Want}, rows)...)
			in := map[string]*tensor.Tensor{"x": x}
			for _, eng := range []string{"onnxruntime", "built-in"} {
				var s runtime.Session
				var err error
				if eng == "onnxruntime" {
					s, err = l.Open(m, SessionOptions{})
				} else {
					s, err = runtime.Open("go", m, runtime.Options{Threads: 1})
				}
				if err != nil {
					t.Fatalf("%s: %v", eng, err)
				}
				res, err := s.Run(context.Background(), in, runtime.RunOptions{})
				s.Close()
				if err != nil {
					t.Fatalf("%s: %v", eng, err)
				}
				if got := quanttest.Codes(res["y"]); !slices.Equal(got, want) {
					t.Errorf("%s: codes of %v = %#x, want %#x", eng, c.X, got[:len(c.X)], c.Want)
				}
			}
		})
	}
}

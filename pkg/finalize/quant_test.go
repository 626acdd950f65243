package finalize

import (
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/quant/quanttest"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// specDTypes maps the element types of the quantization cases to the
// spec dtypes that write them; int32 is the bias type, which no spec names.
var specDTypes = map[tensor.DType]spec.DType{
	tensor.Int8: spec.Int8, tensor.Uint8: spec.UInt8, tensor.Int16: spec.Int16, tensor.Uint16: spec.UInt16,
	tensor.Int4: spec.Int4, tensor.Uint4: spec.UInt4,
	tensor.Float8E4M3FN: spec.Float8E4M3FN, tensor.Float8E5M2: spec.Float8E5M2, tensor.Float4E2M1: spec.Float4E2M1,
}

// TestQuantizeCases runs pkg/quant's case table through the writer's
// Quantize: weights per tensor and per channel. The writer always
// saturates, so the cases that turn saturation off are left to pkg/quant.
func TestQuantizeCases(t *testing.T) {
	covered := map[tensor.DType]bool{}
	for _, c := range quanttest.Cases {
		sd, ok := specDTypes[c.DType]
		if !ok || c.NoSaturate {
			continue
		}
		covered[c.DType] = true
		t.Run(c.Name, func(t *testing.T) {
			s := &spec.QuantizationSpec{DType: sd, QScheme: spec.Asymmetric}
			for _, rows := range []int{1, 3} {
				axis := -1
				if rows > 1 {
					axis = 0
				}
				p := &plan.Params{Scales: slices.Repeat([]float32{c.Scale}, rows), ZeroPoints: slices.Repeat([]int32{int32(c.ZeroPoint)}, rows)}
				q, err := Quantize(slices.Concat(slices.Repeat([][]float32{c.X}, rows)...), []int{rows, len(c.X)}, axis, 0, s, p)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := quanttest.Codes(q), slices.Concat(slices.Repeat([][]int64{c.Want}, rows)...); !slices.Equal(got, want) {
					t.Errorf("%d rows: codes %#x, want %#x", rows, got, want)
				}
			}
		})
	}
	for dt := range specDTypes {
		if !covered[dt] {
			t.Errorf("no case for %s", dt)
		}
	}
}

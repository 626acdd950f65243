package runtime

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestResizePlanes checks that resizing the last two axes plane by plane
// gives the bits of the general separable sum, for every mode, the
// common coordinate transformations, up- and down-scaling and sizes, on
// an input with −0, infinities and NaN.
func TestResizePlanes(t *testing.T) {
	x := randomInput(5, 2, 3, 7, 9)
	xd := x.Float32s()
	xd[0], xd[10], xd[20], xd[70] = float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN()), float32(math.Inf(-1))
	x3 := &tensor.Tensor{DType: tensor.Float, Shape: []int{6, 7, 9}, Data: xd}
	scales := func(v ...float32) *tensor.Tensor {
		s := tensor.New(tensor.Float, len(v))
		copy(s.Float32s(), v)
		return s
	}
	sizes := func(v ...int64) *tensor.Tensor {
		s := tensor.New(tensor.Int64, len(v))
		copy(s.Data.([]int64), v)
		return s
	}
	type resize struct {
		x             *tensor.Tensor
		scales, sizes *tensor.Tensor
	}
	for _, rs := range []resize{
		{x, scales(1, 1, 2, 2), nil},
		{x, scales(1, 1, 0.5, 0.75), nil},
		{x, scales(1, 1, 1, 3), nil},
		{x, nil, sizes(2, 3, 13, 4)},
		{x3, scales(1, 2.5, 1.5), nil},
	} {
		for _, mode := range []string{"nearest", "linear", "cubic"} {
			for _, coord := range []string{"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"} {
				nearestModes := []string{"round_prefer_floor"}
				if mode == "nearest" {
					nearestModes = []string{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}
				}
				for _, nm := range nearestModes {
					name := fmt.Sprintf("%v/%v/%v/%s/%s/%s", rs.x.Shape, rs.scales, rs.sizes, mode, coord, nm)
					in := []*tensor.Tensor{rs.x, nil, rs.scales, rs.sizes}
					rc := &runCtx{ctx: context.Background(), threads: 2}
					spec := resizeSpec{mode: mode, coordMode: coord, nearestMode: nm, cubicA: -0.75, keepAspect: "stretch", opset: 13}
					got, err := spec.run(rc, in)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					spec.separable = true
					want, err := spec.run(rc, in)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					g, w := got[0].Float32s(), want[0].Float32s()
					if len(g) != len(w) || fmt.Sprint(got[0].Shape) != fmt.Sprint(want[0].Shape) {
						t.Fatalf("%s: shape %v, separable sum gives %v", name, got[0].Shape, want[0].Shape)
					}
					for i := range g {
						if math.Float32bits(g[i]) != math.Float32bits(w[i]) && !(g[i] != g[i] && w[i] != w[i]) {
							t.Fatalf("%s: y[%d] = %g, separable sum gives %g", name, i, g[i], w[i])
						}
					}
				}
			}
		}
	}
}

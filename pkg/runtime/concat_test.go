package runtime

import (
	"fmt"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestConcatThreads checks float Concat, whose copies are split over the
// threads, against an element-by-element reference on 1-3 threads, for
// every axis and parts large enough to split inside one copy.
func TestConcatThreads(t *testing.T) {
	for _, tc := range []struct {
		shapes [][]int
		axis   int64
	}{
		{[][]int{{2, 64, 30, 30}, {2, 96, 30, 30}}, 1},
		{[][]int{{1, 70000}, {3, 70000}, {2, 70000}}, 0},
		{[][]int{{3, 5, 9000}, {3, 5, 7}, {3, 5, 1}}, 2},
		{[][]int{{1, 1}, {1, 2}}, 1},
	} {
		var parts []*tensor.Tensor
		v := float32(0)
		for _, s := range tc.shapes {
			p := tensor.New(tensor.Float, s...)
			for i := range p.Float32s() {
				v++
				p.Float32s()[i] = v
			}
			parts = append(parts, p)
		}
		// want: out[o][a][i] walks the parts along the axis in order.
		ax := int(tc.axis)
		outer := tensor.NumElements(tc.shapes[0][:ax])
		inner := tensor.NumElements(tc.shapes[0][ax+1:])
		var want []float32
		for o := range outer {
			for _, p := range parts {
				n := p.Shape[ax] * inner
				want = append(want, p.Float32s()[o*n:(o+1)*n]...)
			}
		}
		for threads := 1; threads <= 3; threads++ {
			t.Run(fmt.Sprintf("%v/axis%d/threads%d", tc.shapes, tc.axis, threads), func(t *testing.T) {
				got, err := concat(&runCtx{threads: threads}, parts, tc.axis)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Float32s()) != len(want) {
					t.Fatalf("%d elements, want %d", len(got.Float32s()), len(want))
				}
				for i, w := range want {
					if got.Float32s()[i] != w {
						t.Fatalf("out[%d] = %g, want %g", i, got.Float32s()[i], w)
					}
				}
			})
		}
	}
}

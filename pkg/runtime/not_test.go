package runtime

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestNotKernel checks Not on lengths around its eight-byte words.
func TestNotKernel(t *testing.T) {
	for n := 0; n <= 21; n++ {
		x := make([]bool, n)
		for i := range x {
			x[i] = i%3 == 0
		}
		outs, err := notKernel(nil, []*tensor.Tensor{{DType: tensor.Bool, Shape: []int{n}, Data: x}})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range outs[0].Data.([]bool) {
			if v == x[i] {
				t.Fatalf("n=%d: Not(%v)[%d] = %v", n, x, i, v)
			}
		}
	}
}

package runtime

import (
	"context"
	"math"
	"testing"
)

// TestPerChannel checks the inference BatchNormalization's per-channel
// step, float32(x·scale[c]) + shift[c], bit for bit (any NaN for a NaN)
// against the scalar formula, on planes shorter than a vector, longer
// than a chunk and with specials in the inputs, scales and shifts.
func TestPerChannel(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, 3e38}
	for _, shape := range [][]int{{2, 3, 1, 5}, {1, 4, 9, 7}, {1, 2, 50, 50}, {3, 5}} {
		n := 1
		for _, d := range shape {
			n *= d
		}
		x := randomInput(3, shape...).Float32s()
		for i := 0; i < n; i += 7 {
			x[i] = specials[i%len(specials)]
		}
		c := shape[1]
		scale, shift := randomInput(5, c).Float32s(), randomInput(6, c).Float32s()
		scale[0], shift[c-1] = specials[2], specials[4]
		rc := &runCtx{ctx: context.Background(), threads: 2}
		y := perChannel(rc, x, shape, scale, shift).Float32s()
		sp := n / (shape[0] * c)
		for i, v := range x {
			ch := i / sp % c
			want := float32(v*scale[ch]) + shift[ch]
			if got := y[i]; math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("shape %v: y[%d] = %g, want %g", shape, i, got, want)
			}
		}
	}
}

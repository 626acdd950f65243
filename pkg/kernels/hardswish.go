package kernels

// HardSwishParams are the constants of HardSwishChain: x·relu6(x + 3)/6 is
// Shift 3, Lo 0, Hi 6, D 6 and Div.
type HardSwishParams struct {
	Shift, Lo, Hi, D float32
	// Div divides the product by D; otherwise it is multiplied by D.
	Div bool
}

// HardSwishChain computes HardSwish as exporters decompose it into an
// Add, a Clip, a Mul and a Div (or Mul), with each node's rounding, for
// i < len(dst):
//
//	x = src[i]
//	c = min(max(float32(x + Shift), Lo), Hi)   (Go's min and max, as Clip)
//	p = float32(x · c)
//	dst[i] = Div ? float32(p / D) : float32(p · D)
//
// src must be at least as long as dst and may be dst.
func HardSwishChain(dst, src []float32, p HardSwishParams) {
	src = src[:len(dst)]
	n := 0
	if clipVecOK(p.Lo, p.Hi) {
		n = hardSwishVec(dst, src, p)
	}
	hardSwishGo(dst[n:], src[n:], p)
}

// hardSwishGo is HardSwishChain in Go.
func hardSwishGo(dst, src []float32, p HardSwishParams) {
	for i, x := range src[:len(dst)] {
		c := min(max(float32(x+p.Shift), p.Lo), p.Hi)
		v := float32(x * c)
		if p.Div {
			v = float32(v / p.D)
		} else {
			v = float32(v * p.D)
		}
		dst[i] = v
	}
}

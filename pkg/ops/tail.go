package ops

import "math"

// Tail says where a smooth gated activation x·g(x) (SiLU) stops changing
// as x goes to −∞: its output tends to 0 there. A quantizer of x
// may clip where the output's own grid can no longer tell the inputs
// apart, and spend its levels on the inputs the output shows: a detector's
// pre-activations reach −90 where a SiLU whose output steps by 0.1 is 0 to
// the grid below −4.4.
type Tail struct {
	// F is the activation: below Turn it rises monotonically to 0 as x
	// falls.
	F    func(x float64) float64
	Turn float64
}

// Floor is the input below which the activation's output stays within
// tol of 0; ok is false when there is none.
func (t *Tail) Floor(tol float64) (lo float64, ok bool) {
	if !(tol > 0) || math.Abs(t.F(t.Turn)) <= tol {
		return 0, false
	}
	near, far := t.Turn, t.Turn-1
	for math.Abs(t.F(far)) > tol {
		far = t.Turn + 2*(far-t.Turn)
		if far < -1e6 {
			return 0, false
		}
	}
	for range 100 {
		mid := (near + far) / 2
		if math.Abs(t.F(mid)) > tol {
			near = mid
		} else {
			far = mid
		}
	}
	return far, true // within tol at far, and closer below it
}

// SiLU's tail: its minimum lies at x = −1.2785, below which its output
// rises monotonically to 0. GELU has the same shape (minimum at −0.7518),
// but quantizing its input from its floor moved the shared BERT encoders'
// logits by −2.3 to +0.3 dB and gained nowhere (docs/RATIONALE.md), so it
// has no tail here.
var siluTail = &Tail{F: func(x float64) float64 { return x / (1 + math.Exp(-x)) }, Turn: -1.2785}

package kernels

import "math"

// AdaRoundStep holds one iteration's constants of AdaRound's Adam step
// (AdaRoundUpdate).
type AdaRoundStep struct {
	// Stretch and Shift make the soft code's fraction h = σ(v)·Stretch +
	// Shift, clamped to [0, 1] (the rectified sigmoid).
	Stretch, Shift float32
	// RegStep is 2λβ/n, the rounding term's gradient factor, and Exponent
	// its power β − 1; RegStep 0 leaves the term out (the warm-up).
	RegStep, Exponent float32
	// Step is the learning rate over Adam's first bias correction, InvC2
	// the inverse of its second.
	Step, InvC2 float32
}

// Adam's constants.
const (
	adamB1, adamB2, adamEps = 0.9, 0.999, 1e-8
)

// AdaRoundUpdate does one Adam step of AdaRound's rounding variables v,
// with moments mom and vel, for every element whose soft fraction is
// strictly inside (0, 1) (elsewhere the clamp's gradient is zero and the
// element is left as it is). sig is σ(v); the reconstruction gradient with
// respect to the soft code is (da + g)·gs, zero where h leaves the open
// range (low, high) (the code's range minus its rounded-down value: the
// grid's edge); the rounding term adds −RegStep·|2h − 1|^Exponent·
// sign(2h − 1). All slices are as long as v. The AVX2 kernel covers whole
// vectors of eight, bit for bit as the loop below.
func AdaRoundUpdate(v, mom, vel, sig, da, g, gs, low, high []float32, p AdaRoundStep) {
	n := len(v)
	if n == 0 {
		return
	}
	_, _, _, _, _, _, _, _ = mom[n-1], vel[n-1], sig[n-1], da[n-1], g[n-1], gs[n-1], low[n-1], high[n-1]
	done := adaRoundUpdate(v, mom, vel, sig, da, g, gs, low, high, p)
	adaRoundUpdateGo(v[done:], mom[done:], vel[done:], sig[done:], da[done:], g[done:], gs[done:], low[done:], high[done:], p)
}

func adaRoundUpdateGo(v, mom, vel, sig, da, g, gs, low, high []float32, p AdaRoundStep) {
	for i := range v {
		sg := sig[i]
		h := sg*p.Stretch + p.Shift
		if !(h > 0 && h < 1) {
			continue
		}
		grad := (da[i] + g[i]) * gs[i]
		if !(h > low[i] && h < high[i]) {
			grad = 0
		}
		if p.RegStep != 0 {
			if u := 2*h - 1; u != 0 {
				r := p.RegStep * Pow32(math.Float32frombits(math.Float32bits(u)&^(1<<31)), p.Exponent)
				if u < 0 {
					r = -r
				}
				grad -= r
			}
		}
		grad *= sg * (1 - sg) * p.Stretch
		m := adamB1*mom[i] + (1-adamB1)*grad
		vv := adamB2*vel[i] + (1-adamB2)*grad*grad
		mom[i], vel[i] = m, vv
		v[i] -= p.Step * m / (float32(math.Sqrt(float64(vv*p.InvC2))) + adamEps)
	}
}

// Pow32 is x^e for x in (0, 1] and e ≥ −1 in float32, as 2^(e·log2 x)
// with the exponent taken from the bits and polynomial fits of log2 on
// [1, 2) and 2^f on [0, 1) (relative error below 1e-4 for e up to 20):
// enough for the gradient of AdaRound's rounding term, at a fraction of
// math.Pow's cost. Results below 2^−126 are 0.
func Pow32(x, e float32) float32 {
	b := math.Float32bits(x)
	ex := float32(int32(b>>23&0xff) - 127)
	m := math.Float32frombits(b&0x007fffff | 0x3f800000) // in [1, 2)
	// log2(m) on [1, 2): a degree-6 polynomial in m − 1 interpolating at
	// Chebyshev nodes (error below 2.5e-6).
	t := m - 1
	l := ex + 2.443e-06 + t*(1.442453526+t*(-0.71731278+t*(0.454508492+t*(-0.272697565+t*(0.117613084+t*-0.024568535)))))
	y := e * l
	if !(y >= -126) {
		return 0
	}
	yi := float32(math.Floor(float64(y)))
	f := y - yi
	// 2^f on [0, 1): degree 5, the same nodes (relative error 1e-7).
	q := 0.999999898 + f*(0.69315449+f*(0.240141818+f*(0.055860337+f*(0.00894959+f*0.001893754))))
	return q * math.Float32frombits(uint32(int32(yi)+127)<<23)
}

// AdaRoundDelta writes d = scale·clamp(floor + h, lo, hi) − w, the soft
// codes' distance from the float weights, h = clamp(sig·stretch + shift,
// 0, 1) being each weight's soft fraction; all slices are as long as d.
// The AVX2 kernel covers whole vectors of eight, bit for bit as the loop
// below.
func AdaRoundDelta(d, sig, floor, lo, hi, scale, w []float32, stretch, shift float32) {
	n := len(d)
	if n == 0 {
		return
	}
	_, _, _, _, _, _ = sig[n-1], floor[n-1], lo[n-1], hi[n-1], scale[n-1], w[n-1]
	done := adaRoundDelta(d, sig, floor, lo, hi, scale, w, stretch, shift)
	adaRoundDeltaGo(d[done:], sig[done:], floor[done:], lo[done:], hi[done:], scale[done:], w[done:], stretch, shift)
}

func adaRoundDeltaGo(d, sig, floor, lo, hi, scale, w []float32, stretch, shift float32) {
	for i := range d {
		h := min(max(sig[i]*stretch+shift, 0), 1)
		q := min(max(floor[i]+h, lo[i]), hi[i])
		d[i] = scale[i]*q - w[i]
	}
}

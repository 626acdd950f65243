//go:build !noasm && amd64

package kernels

//go:generate sh -c "cd ../../internal/asm/adaround && go run . -out ../../../pkg/kernels/adaround_amd64.s -stubs ../../../pkg/kernels/adaround_stubs_amd64.go -pkg kernels"

func adaRoundUpdate(v, mom, vel, sig, da, g, gs, low, high []float32, p AdaRoundStep) int {
	n := avx2Vectors(len(v))
	if n > 0 {
		reg := int32(0)
		if p.RegStep != 0 {
			reg = 1
		}
		adaRoundUpdateAVX2(v[:n], mom, vel, sig, da, g, gs, low, high, p.Stretch, p.Shift, p.RegStep, p.Exponent, p.Step, p.InvC2, reg)
	}
	return n
}

func adaRoundDelta(d, sig, floor, lo, hi, scale, w []float32, stretch, shift float32) int {
	n := avx2Vectors(len(d))
	if n > 0 {
		adaRoundDeltaAVX2(d[:n], sig, floor, lo, hi, scale, w, stretch, shift)
	}
	return n
}

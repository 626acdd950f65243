//go:build noasm || !(amd64 || arm64)

package kernels

func statsVariants() []statsVariant {
	return []statsVariant{{name: "dispatch", ok: true, minMax: minMax, accum: minMaxAccum, hist: histPow2}}
}

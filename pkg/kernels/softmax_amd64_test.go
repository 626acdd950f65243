//go:build !noasm && amd64

package kernels

import "testing"

// TestRowMaxVariants holds each assembly row maximum the CPU runs to the
// Go loop's value on the whole vectors of every row of rowMaxCases.
func TestRowMaxVariants(t *testing.T) {
	for _, v := range []struct {
		name   string
		ok     bool
		lanes  int
		kernel func(x *float32, n int) float32
	}{
		{"avx2", hasAVX2, 8, rowMaxAVX2},
		{"avx512", hasAVX512, 16, rowMaxAVX512},
	} {
		if !v.ok {
			t.Logf("%s: not run by this CPU", v.name)
			continue
		}
		for _, x := range rowMaxCases() {
			n := len(x) / v.lanes * v.lanes
			if n == 0 {
				continue
			}
			if got, want := v.kernel(&x[0], n), rowMaxGo(x[:n]); got != want {
				t.Fatalf("%s: max of %v = %g, want %g", v.name, x[:n], got, want)
			}
		}
	}
}

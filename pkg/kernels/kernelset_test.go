package kernels

import (
	"strings"
	"testing"
)

func TestChooseKernelLevel(t *testing.T) {
	amd64 := []string{SetPortable, SetAVX2, SetAVX512}
	arm64 := []string{SetPortable, SetNEON}
	cases := []struct {
		request   string
		sets      []string
		available int
		want      int
		err       string
	}{
		{"", amd64, 2, 2, ""},
		{"", amd64, 0, 0, ""},
		{"avx2", amd64, 2, 1, ""},
		{"AVX2 ", amd64, 2, 1, ""},
		{"portable", amd64, 2, 0, ""},
		{"avx512", amd64, 2, 2, ""},
		{"avx512", amd64, 1, 1, `at most "avx2"`},
		{"avx2", amd64, 0, 0, `at most "portable"`},
		{"neon", amd64, 2, 2, "unknown kernel set"},
		{"", arm64, 1, 1, ""},
		{"portable", arm64, 1, 0, ""},
		{"neon", arm64, 1, 1, ""},
		{"avx2", arm64, 1, 1, "unknown kernel set"},
	}
	for _, c := range cases {
		got, err := chooseKernelLevel(c.request, c.sets, c.available)
		if got != c.want {
			t.Errorf("chooseKernelLevel(%q, %d) = %d, want %d", c.request, c.available, got, c.want)
		}
		if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("chooseKernelLevel(%q, %d): error %v, want one containing %q", c.request, c.available, err, c.err)
		}
	}
}

// TestActiveSetMatchesFamilies checks that the named set and the assembly
// families the kernels test agree, whatever the environment asked for.
func TestActiveSetMatchesFamilies(t *testing.T) {
	if KernelSetError() != nil {
		t.Fatalf("%s: %v", KernelsEnv, KernelSetError())
	}
	want := map[string]string{SetAVX512: "avx512", SetAVX2: "avx2", SetNEON: "neon", SetPortable: "go"}[ActiveSet()]
	if got := activeGemm.name; got != want {
		t.Errorf("kernel set %s runs the %s GEMM family, want %s", ActiveSet(), got, want)
	}
}

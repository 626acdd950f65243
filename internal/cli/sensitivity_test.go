package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// fragileModel has one group of quantization points that int8 cannot
// represent: a branch of values near ±0.01 concatenated with one near ±50,
// so that the Concat's shared per-tensor scale rounds the small branch to
// zero, and then split back into two outputs. Every other point costs the
// outputs little.
func fragileModel() *testmodels.Builder {
	b := testmodels.New("fragile", 17)
	b.Input("x", tensor.Float, "N", 8)
	b.Output("large", tensor.Float, "N", 4).Output("small", tensor.Float, "N", 4)
	b.RandomInit("big.weight", 30, 4, 8).RandomInit("big.bias", 1, 4)
	b.RandomInit("tiny.weight", 0.006, 4, 8).RandomInit("tiny.bias", 0.0002, 4)
	gemm := func(name, w, bias, out string) {
		b.Node("Gemm", name, []string{"x", w, bias}, []string{out},
			testmodels.AttrFloat("alpha", 1), testmodels.AttrFloat("beta", 1), testmodels.AttrInt("transB", 1))
	}
	gemm("/big/Gemm", "big.weight", "big.bias", "big")
	gemm("/tiny/Gemm", "tiny.weight", "tiny.bias", "tiny")
	b.Node("Concat", "/cat/Concat", []string{"big", "tiny"}, []string{"cat"}, testmodels.AttrInt("axis", 1))
	b.Node("Split", "/split/Split", []string{"cat"}, []string{"large", "small"}, testmodels.AttrInt("axis", 1))
	return b
}

// fragileData writes 24 samples of the fragile model's input, uniform in
// [-1, 1) from a fixed seed.
func fragileData(t *testing.T, dir string) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 19))
	x := tensor.New(tensor.Float, 24, 8)
	for i := range x.Float32s() {
		x.Float32s()[i] = rng.Float32()*2 - 1
	}
	return writeNPY(t, dir, "x.npy", x)
}

func TestSensitivityRanksFragileGroupFirst(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	tests := []struct {
		group, wantFirst string
	}{
		{group: "node", wantFirst: "/cat/Concat"},
		{group: "module", wantFirst: "cat"},
	}
	for _, tt := range tests {
		t.Run(tt.group, func(t *testing.T) {
			out := filepath.Join(dir, tt.group+".json")
			code, _, stderr := runCLI(t, "sensitivity", "--model", model, "--data", data, "--preset", "w8a8",
				"--group", tt.group, "-o", out, "--no-cache")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var r compare.Sensitivity
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Samples != defaultSensitivityEvalSamples || len(r.Groups) < 3 {
				t.Fatalf("measured %d samples, %d groups: want %d samples and at least 3 groups:\n%s", r.Samples, len(r.Groups), defaultSensitivityEvalSamples, b)
			}
			first := r.Groups[0]
			if first.Group != tt.wantFirst {
				t.Fatalf("first group %q, want %q:\n%s", first.Group, tt.wantFirst, b)
			}
			// The small output is rounded to zero (0 dB) with the fragile
			// group quantized, and the others keep int8's usual 30 dB or more.
			if first.OnlySQNR > 3 || r.AllQuantized > 3 {
				t.Errorf("fragile group alone %s dB, all quantized %s dB: want both near 0 dB", first.OnlySQNR, r.AllQuantized)
			}
			if first.Gain < 25 {
				t.Errorf("leaving %q in float gains %s dB, want 25 dB or more", first.Group, first.Gain)
			}
			for _, g := range r.Groups[1:] {
				if g.OnlySQNR < 30 {
					t.Errorf("group %q alone gives %s dB, want 30 dB or more", g.Group, g.OnlySQNR)
				}
			}
		})
	}
}

func TestSensitivityCache(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	args := []string{"sensitivity", "--model", model, "--data", data, "--preset", "w8a8"}
	tests := []struct {
		name       string
		extra      []string
		wantCached bool
	}{
		{name: "first run measures", wantCached: false},
		{name: "second run reads the cache", wantCached: true},
		{name: "--no-cache measures", extra: []string{"--no-cache"}, wantCached: false},
		{name: "other flags miss the cache", extra: []string{"--eval-samples", "3"}, wantCached: false},
		{name: "other flags hit their own entry", extra: []string{"--eval-samples", "3"}, wantCached: true},
	}
	var want string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append(args, tt.extra...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if cached := strings.Contains(stderr, "cached result"); cached != tt.wantCached {
				t.Errorf("cache used: %v, want %v; stderr:\n%s", cached, tt.wantCached, stderr)
			}
			if len(tt.extra) > 0 && tt.extra[0] == "--eval-samples" {
				return
			}
			if want == "" {
				want = stdout
			} else if stdout != want {
				t.Errorf("output differs from the first run's:\n%s\nwant:\n%s", stdout, want)
			}
		})
	}
}

func TestSensitivityUsageErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	base := []string{"sensitivity", "--model", model, "--preset", "w8a8"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "unknown grouping", args: []string{"--data", data, "--group", "layer"}, wantErr: "--group"},
		{name: "unknown format", args: []string{"--data", data, "--format", "xml"}, wantErr: "--format"},
		{name: "no held-out sample", args: []string{"--data", data, "--eval-samples", "0"}, wantErr: "--eval-samples"},
		{name: "all samples held out", args: []string{"--data", data, "--eval-samples", "24"}, wantErr: "--eval-samples"},
		{name: "no data", args: nil, wantErr: "--data"},
		{name: "unknown flag", args: []string{"--data", data, "--bogus"}, wantErr: "bogus"},
		{name: "-o onto the model", args: []string{"--data", data, "-o", model}, wantErr: "-o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(base, tt.args...)...)
			if code != ExitUsage || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr %q: want exit %d naming %s", code, stderr, ExitUsage, tt.wantErr)
			}
		})
	}
}

// TestSensitivityDeterministic checks that the ranking is the same bytes
// at any engine thread count (which is why the cache key leaves it out).
func TestSensitivityDeterministic(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	var want string
	for _, threads := range []string{"1", "2", "5"} {
		code, stdout, stderr := runCLI(t, "sensitivity", "--model", model, "--data", data, "--preset", "w8a8",
			"--no-cache", "--format", "json", "--threads", threads)
		if code != 0 {
			t.Fatalf("--threads %s: exit %d: %s", threads, code, stderr)
		}
		if want == "" {
			want = stdout
		} else if stdout != want {
			t.Errorf("--threads %s output differs:\n%s\nwant:\n%s", threads, stdout, want)
		}
	}
}

// TestSensitivityPalettes checks that palettized weights are points of
// their node's group and that the palettization settings are part of the
// cache key.
func TestSensitivityPalettes(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	tests := []struct {
		bits       int
		wantCached bool
	}{
		{bits: 2, wantCached: false},
		{bits: 2, wantCached: true},
		{bits: 3, wantCached: false},
	}
	for _, tt := range tests {
		cfg := filepath.Join(dir, "p.yaml")
		text := "quantization_config:\n  preset: w8a8\nkmeans_palettization_config:\n  global_config: {n_bits: " + string(rune('0'+tt.bits)) + ", weight_threshold: 0}\n"
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "sensitivity", "--config", cfg, "--model", model, "--data", data, "--format", "json")
		if code != 0 {
			t.Fatalf("%d bits: exit %d: %s", tt.bits, code, stderr)
		}
		if cached := strings.Contains(stderr, "cached result"); cached != tt.wantCached {
			t.Errorf("%d bits: cache used: %v, want %v", tt.bits, cached, tt.wantCached)
		}
		var r compare.Sensitivity
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatal(err)
		}
		values := map[string][]string{}
		for _, g := range r.Groups {
			values[g.Group] = g.Values
		}
		// The palettized weight replaces the int8 one; its bias stays float.
		if got := values["/tiny/Gemm"]; !slices.Equal(got, []string{"tiny.weight"}) {
			t.Errorf("%d bits: groups %v: want /tiny/Gemm holding the palettized tiny.weight", tt.bits, values)
		}
	}
}

// TestSensitivityShardsMergeExactly checks, on fragileModel (w8a8, 24
// samples of fragileData, 4 held out), that the shards of an analysis
// merged by `sensitivity merge` give the unsharded run's file byte for
// byte, whatever the number of shards, and that merge refuses an
// incomplete set.
func TestSensitivityShardsMergeExactly(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	model := writeModel(t, dir, "fragile.onnx", fragileModel())
	data := fragileData(t, dir)
	run := func(out string, extra ...string) {
		t.Helper()
		args := append([]string{"sensitivity", "--model", model, "--data", data, "--preset", "w8a8", "--group", "tensor", "-o", out}, extra...)
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
	}
	whole := filepath.Join(dir, "whole.json")
	run(whole, "--no-cache")
	want, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3} {
		var shards []string
		for i := range n {
			p := filepath.Join(dir, fmt.Sprintf("shard%dof%d.json", i, n))
			run(p, "--shard", fmt.Sprintf("%d/%d", i, n))
			shards = append(shards, p)
		}
		// Shards in any order.
		slices.Reverse(shards)
		merged := filepath.Join(dir, fmt.Sprintf("merged%d.json", n))
		if code, _, stderr := runCLI(t, append([]string{"sensitivity", "merge", "-o", merged}, shards...)...); code != 0 {
			t.Fatalf("merge of %d shards: exit %d: %s", n, code, stderr)
		}
		got, err := os.ReadFile(merged)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d shards merged differ from the unsharded run:\n%s\nwant:\n%s", n, got, want)
		}
		if n > 1 {
			code, _, stderr := runCLI(t, append([]string{"sensitivity", "merge"}, shards[1:]...)...)
			if code != ExitUsage || !strings.Contains(stderr, "missing") {
				t.Errorf("merge without one of %d shards: exit %d, %s; want exit %d naming the missing shard", n, code, stderr, ExitUsage)
			}
		}
	}
}

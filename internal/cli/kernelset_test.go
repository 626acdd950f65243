package cli

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/kernels"
)

// kernelSetChildEnv makes the test binary, re-run by
// TestQuantizeDeterministicPerKernelSet, quantize the digits example into
// the named file and exit; the kernel set is chosen by kernels.KernelsEnv,
// which is read once at start, hence the separate process.
const kernelSetChildEnv = "COREAIQ_TEST_KERNELSET_OUT"

func TestKernelSetChild(t *testing.T) {
	out := os.Getenv(kernelSetChildEnv)
	if out == "" {
		t.Skip("runs only as TestQuantizeDeterministicPerKernelSet's child process")
	}
	dir := filepath.Join(testutil.RepoRoot(), "examples", "digits")
	code, _, stderr := runCLI(t, "quantize", "--config", filepath.Join(dir, "quantize.yaml"), "-o", out,
		"--threads", os.Getenv("COREAIQ_TEST_THREADS"))
	if code != 0 {
		t.Fatalf("quantize: exit %d\n%s", code, stderr)
	}
}

// TestQuantizeDeterministicPerKernelSet checks the README's determinism
// promise as stated: with one kernel set (what `coreaiq version` names),
// the same inputs give the same model bytes at 1 and 2 threads. Kernel
// sets differ in how float sums are ordered and fused, so models of two
// sets may differ in the last bits of a scale; whether they do is logged.
func TestQuantizeDeterministicPerKernelSet(t *testing.T) {
	if testing.Short() {
		t.Skip("quantizes the digits example six times in child processes")
	}
	sets := []string{kernels.SetPortable}
	switch kernels.ActiveSet() {
	case kernels.SetAVX512:
		sets = append(sets, kernels.SetAVX2, kernels.SetAVX512)
	case kernels.SetAVX2:
		sets = append(sets, kernels.SetAVX2)
	case kernels.SetNEON:
		sets = append(sets, kernels.SetNEON)
	}
	dir := t.TempDir()
	sums := map[string][32]byte{}
	for _, set := range sets {
		var first []byte
		for _, threads := range []int{1, 2} {
			out := filepath.Join(dir, fmt.Sprintf("%s-t%d.onnx", set, threads))
			cmd := exec.Command(os.Args[0], "-test.run=^TestKernelSetChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), kernels.KernelsEnv+"="+set, kernelSetChildEnv+"="+out,
				fmt.Sprintf("COREAIQ_TEST_THREADS=%d", threads))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s=%s, %d threads: %v\n%s", kernels.KernelsEnv, set, threads, err, b)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = b
				sums[set] = sha256.Sum256(b)
				continue
			}
			if !bytes.Equal(first, b) {
				t.Errorf("kernel set %s: the model written with %d threads differs from the one written with 1", set, threads)
			}
		}
	}
	for i, a := range sets {
		for _, b := range sets[i+1:] {
			t.Logf("kernel sets %s and %s write the same bytes: %v", a, b, sums[a] == sums[b])
		}
	}
}

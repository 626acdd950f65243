// Package archtest checks the project's structure: imports point down the
// layer list of DESIGN.md §3.
package archtest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
)

const module = "github.com/coreaiq/coreaiq/"

// layers lists package path prefixes from the top down. A package may
// import packages of its own layer or of layers below it.
var layers = []string{
	// Programs: the CLI and the benchmark drivers.
	"cmd/coreaiq",
	"bench",
	"internal/cli",
	"pkg/compare",
	"pkg/passes",
	"pkg/finalize",
	"pkg/plan",
	"pkg/calibrate",
	"pkg/runtime",
	"pkg/config",
	"pkg/ops",
	"pkg/onnxgraph",
	"pkg/spec",
	"pkg/quant",
	"pkg/tensor",
	"pkg/kernels",
	// Generated protobuf code: imports nothing of ours.
	"pkg/onnxgraph/onnxpb",
}

// testOnly are packages that production code must not import.
var testOnly = []string{"internal/testutil", "internal/testmodels", "internal/archtest", "pkg/quant/quanttest", "pkg/ops/opstest"}

func rank(pkg string) int {
	best, bestLen := -1, -1
	for i, prefix := range layers {
		if (pkg == prefix || strings.HasPrefix(pkg, prefix+"/")) && len(prefix) > bestLen {
			best, bestLen = i, len(prefix)
		}
	}
	return best
}

func TestImportsPointDown(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = testutil.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if isTestOnly(pkg) {
			continue
		}
		from := rank(pkg)
		if from < 0 {
			t.Errorf("package %s is not in the layer list; add it to layers in this test and to DESIGN.md's list", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			if isTestOnly(dep) {
				t.Errorf("%s imports the test-only package %s", pkg, dep)
				continue
			}
			if to := rank(dep); to < from {
				t.Errorf("%s (layer %s) imports %s (layer %s), which is above it", pkg, layers[from], dep, layers[to])
			}
		}
	}
}

func isTestOnly(pkg string) bool {
	for _, p := range testOnly {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

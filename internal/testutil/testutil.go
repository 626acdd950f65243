// Package testutil holds helpers shared by the project's tests: locating
// test data outside the repository and golden-file comparison.
package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// ONNXTestData is where Debian's libonnx-testdata installs the ONNX backend
// test data (make test installs the package).
const ONNXTestData = "/usr/share/libonnx-testdata/data"

// RepoRoot returns the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// SharedModelsDir returns the shared model folder (COREAIQ_SHARED_MODELS,
// or ../shared/models beside the repository) and whether it exists.
func SharedModelsDir() (string, bool) {
	dir := os.Getenv("COREAIQ_SHARED_MODELS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "..", "shared", "models")
	}
	_, err := os.Stat(dir)
	return dir, err == nil
}

// SharedModels returns the shared model folder, skipping the test when
// there is none: a plain clone of the project does not have it.
func SharedModels(t testing.TB) string {
	t.Helper()
	dir, ok := SharedModelsDir()
	if !ok {
		t.Skipf("shared models not found at %s (set COREAIQ_SHARED_MODELS)", dir)
	}
	return dir
}

// RequireONNXTestData returns ONNXTestData, failing the test when it is
// missing (make test installs it, so its absence is a setup error).
func RequireONNXTestData(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(ONNXTestData); err != nil {
		t.Fatalf("ONNX backend test data missing at %s: run `make deps` (installs Debian's libonnx-testdata)", ONNXTestData)
	}
	return ONNXTestData
}

// UpdateGolden reports whether golden files should be rewritten
// (COREAIQ_UPDATE_GOLDEN=1).
func UpdateGolden() bool { return os.Getenv("COREAIQ_UPDATE_GOLDEN") == "1" }

// Golden compares got with the golden file at path, or rewrites the file
// when COREAIQ_UPDATE_GOLDEN=1.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if UpdateGolden() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file %s: %v (run with COREAIQ_UPDATE_GOLDEN=1 to create it)", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from golden file %s (COREAIQ_UPDATE_GOLDEN=1 rewrites it)\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first differing lines of two texts.
func lineDiff(want, got string) string {
	wl := bytes.Split([]byte(want), []byte("\n"))
	gl := bytes.Split([]byte(got), []byte("\n"))
	var b bytes.Buffer
	shown := 0
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if bytes.Equal(w, g) {
			continue
		}
		b.WriteString("line " + itoa(i+1) + ":\n  want: " + string(w) + "\n  got:  " + string(g) + "\n")
		if shown++; shown == 10 {
			b.WriteString("  ...\n")
			break
		}
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

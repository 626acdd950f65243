package compare

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
)

// qdqReport compares the CNN test model with a hand-built QDQ version of it,
// per layer, with a gate that fails: the richest report there is.
func qdqReport(t *testing.T) *Report {
	t.Helper()
	ref := load(t, testmodels.CNN().Model)
	data := randomBatches(3, 4, 11)
	cand, _ := qdqModel(t, ref, data, "conv1.weight")
	pairing := PairActivations(ref, cand)
	r, err := Run(context.Background(), open(t, ref), open(t, cand), seq(data), Options{Layers: &pairing})
	if err != nil {
		t.Fatal(err)
	}
	r.Reference, r.Candidate = "cnn.onnx", "cnn.int8.onnx"
	r.Unpaired = append(r.Unpaired, Unpaired{Value: "extra<&>", Reason: "a name that needs <escaping> & quoting \""})
	if _, err := r.Check(Gates{MinSQNR: ptr(60.0)}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWriteHTMLSelfContained(t *testing.T) {
	r := qdqReport(t)
	path := filepath.Join(t.TempDir(), "report.html")
	if err := r.WriteHTMLFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, bad := range []string{"http://", "https://", "<link", " src=", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("report references an external resource: contains %q", bad)
		}
	}
	for _, want := range []string{`id="sqnr-chart"`, `class="histogram"`, "Quality gate failed", "extra&lt;&amp;&gt;", "/layer1/layer1.0/conv1/Conv_output_0", "layer1.0.conv1", "test.yaml:"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if got := strings.Count(page, `class="histogram"`); got != min(HTMLHistograms, len(r.Layers)) {
		t.Errorf("%d histograms, want %d", got, min(HTMLHistograms, len(r.Layers)))
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("temporary files left beside the report: %v", entries)
	}
	// Deterministic: rendering twice gives the same bytes.
	var again bytes.Buffer
	if err := r.WriteHTML(&again); err != nil {
		t.Fatal(err)
	}
	if again.String() != page {
		t.Error("two renderings of one report differ")
	}
}

func TestWriteHTMLFileBadDir(t *testing.T) {
	r := &Report{Outputs: []OutputReport{{Name: "y"}}}
	err := r.WriteHTMLFile(filepath.Join(t.TempDir(), "missing", "r.html"))
	if err == nil || !strings.Contains(err.Error(), "r.html") {
		t.Errorf("error %v, want one naming the file", err)
	}
}

// chromium finds headless Chromium, installing it through the project's
// dependency script when missing (make test runs the same script first).
func chromium(t *testing.T) string {
	t.Helper()
	find := func() string {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	script := filepath.Join(testutil.RepoRoot(), "scripts", "install-deps.sh")
	out, err := exec.Command(script).CombinedOutput()
	if p := find(); p != "" {
		return p
	}
	t.Skipf("chromium is not installed and %s could not install it (%v): %s", script, err, out)
	return ""
}

func runChromium(t *testing.T, bin string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + t.TempDir(),
		"--enable-logging=stderr", "--v=0"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, e.String())
	}
	return o.String(), e.String()
}

// TestHTMLRendersInChromium loads the report in headless Chromium: the
// page's script must run to the end without errors (it writes a marker into
// the DOM), and a screenshot must show the chart's colours, not a blank page.
func TestHTMLRendersInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := chromium(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := qdqReport(t).WriteHTMLFile(path); err != nil {
		t.Fatal(err)
	}
	url := "file://" + path

	dom, logs := runChromium(t, bin, "--dump-dom", url)
	if !strings.Contains(dom, `data-state="ready"`) || !strings.Contains(dom, "report ready") {
		t.Errorf("the page's script did not finish: status marker missing from the DOM\n%.2000s", dom)
	}
	if strings.Contains(dom, `data-state="error"`) {
		t.Errorf("the page reported a script error")
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Uncaught") {
			t.Errorf("console message: %s", line)
		}
	}

	shot := filepath.Join(dir, "shot.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1200,900", "--hide-scrollbars", url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	colours := map[[3]uint32]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
		}
	}
	if b.Dx() != 1200 || b.Dy() != 900 {
		t.Errorf("screenshot is %dx%d, want 1200x900", b.Dx(), b.Dy())
	}
	if len(colours) < 20 {
		t.Errorf("screenshot has %d distinct colours: the page looks blank", len(colours))
	}
	// The failed gate's banner and the bad bars are red (#d64545).
	red := 0
	for c, n := range colours {
		if c[0] > 180 && c[1] < 100 && c[2] < 100 {
			red += n
		}
	}
	if red < 100 {
		t.Errorf("only %d red pixels: the failed-gate banner or the bars did not render", red)
	}
}

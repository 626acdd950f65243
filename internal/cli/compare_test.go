package cli

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gproto "google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

func TestNewCmdCompare(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o *compareOptions)
	}{
		{"defaults", []string{"a.onnx", "b.onnx", "--data", "x.npy"}, "", func(t *testing.T, o *compareOptions) {
			if o.Format != "table" || o.Engine != "go" || o.MinSQNR != nil || o.MinTop1 != nil || o.PerLayer || o.BatchSize != 0 {
				t.Errorf("%+v", o)
			}
		}},
		{"gates", []string{"a.onnx", "b.onnx", "--data", "x.npy", "--min-sqnr", "25.5", "--min-top1-agreement", "99%"}, "", func(t *testing.T, o *compareOptions) {
			if o.MinSQNR == nil || *o.MinSQNR != 25.5 || o.MinTop1 == nil || *o.MinTop1 != 99 {
				t.Errorf("gates %v %v", o.MinSQNR, o.MinTop1)
			}
		}},
		{"zero gate is a gate", []string{"a.onnx", "b.onnx", "--data", "x.npy", "--min-sqnr", "0"}, "", func(t *testing.T, o *compareOptions) {
			if o.MinSQNR == nil || *o.MinSQNR != 0 {
				t.Errorf("--min-sqnr 0 not recorded")
			}
		}},
		{"fraction refused", []string{"a.onnx", "b.onnx", "--data", "x.npy", "--min-top1-agreement", "0.99"}, "not a fraction", nil},
		{"percent range", []string{"a.onnx", "b.onnx", "--data", "x.npy", "--min-top1-agreement", "101"}, "0 to 100", nil},
		{"bad format", []string{"a.onnx", "b.onnx", "--data", "x.npy", "--format", "yaml"}, "--format", nil},
		{"no data", []string{"a.onnx", "b.onnx"}, "--data is required", nil},
		{"one model", []string{"a.onnx", "--data", "x.npy"}, "accepts 2 arg", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *compareOptions
			cmd := NewCmdCompare(&IO{}, func(o *compareOptions) error { got = o; return nil })
			cmd.SetArgs(c.args)
			cmd.SetOut(&strings.Builder{})
			cmd.SetErr(&strings.Builder{})
			err := cmd.Execute()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, got)
		})
	}
}

// perturbed is the CNN with a fixed vector added to its logits.
func perturbed(scale float32) *testmodels.Builder {
	b := testmodels.CNN()
	b.Model = gproto.Clone(b.Model).(*onnxpb.ModelProto)
	g := b.Model.Graph
	for _, n := range g.Node {
		for i, o := range n.Output {
			if o == "logits" {
				n.Output[i] = "logits_clean"
			}
		}
	}
	noise := make([]float32, 10)
	for i := range noise {
		noise[i] = scale * float32(i%3-1)
	}
	b.Init("noise", []int64{1, 10}, noise)
	b.Node("Add", "perturb", []string{"logits_clean", "noise"}, []string{"logits"})
	return b
}

func compareFixture(t *testing.T) (dir, ref, data string) {
	t.Helper()
	dir = t.TempDir()
	ref = writeModel(t, dir, "cnn.onnx", testmodels.CNN())
	rng := rand.New(rand.NewPCG(1, 1))
	x := tensor.New(tensor.Float, 10, 1, 8, 8)
	for i := range x.Float32s() {
		x.Float32s()[i] = rng.Float32()*2 - 1
	}
	data = writeNPY(t, dir, "x.npy", x)
	return dir, ref, data
}

func TestCompareRun(t *testing.T) {
	dir, ref, data := compareFixture(t)
	noisy := writeModel(t, dir, "noisy.onnx", perturbed(0.05))
	mlp := writeModel(t, dir, "mlp.onnx", testmodels.MLP())
	x, err := npy.ReadNPYFile(data)
	if err != nil {
		t.Fatal(err)
	}
	set := writeTestSet(t, dir, x) // the same samples as an ONNX test data directory
	labels := writeNPY(t, dir, "labels.npy", tensor.FromInt64([]int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10))
	shortLabels := writeNPY(t, dir, "short.npy", tensor.FromInt64([]int64{0, 1}, 2))
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"self, json", []string{ref, ref, "--data", data, "--format", "json", "--batch-size", "3", "--min-sqnr", "200", "--min-top1-agreement", "100"}, 0,
			[]string{`"sqnr_db": "inf"`, `"top1_agreement": 100`, `"samples": 10`, `"batches": 4`}, nil},
		{"self, table, labels", []string{ref, ref, "--data", "input=" + data, "--labels", labels, "--per-layer"}, 0,
			[]string{"inf", "100.00%", "ref acc", "per-layer SQNR, worst first (0 quantized activations)"}, nil},
		{"noise passes a low gate", []string{noisy, ref, "--data", data, "--min-sqnr", "5"}, 0, []string{"quality gates passed"}, nil},
		{"a test_data_set directory", []string{ref, noisy, "--data", set, "--format", "json"}, 0, []string{`"samples": 10`}, nil},
		{"a named directory", []string{ref, ref, "--data", "input=" + set}, 2, nil, []string{"a directory feeds every input"}},
		{"noise fails a high gate", []string{ref, noisy, "--data", data, "--min-sqnr", "80"}, 3,
			[]string{"FAILED"}, []string{`output "logits": SQNR`, "below the minimum of 80.00 dB"}},
		{"samples", []string{ref, noisy, "--data", data, "--samples", "4", "--format", "json"}, 0, []string{`"samples": 4`}, nil},
		{"too few labels", []string{ref, ref, "--data", data, "--labels", shortLabels}, 2, nil, []string{"2 labels for 10 samples"}},
		{"inputs of another shape", []string{ref, mlp, "--data", data}, 2, nil, []string{"candidate model", "shape"}},
		{"data of the wrong shape", []string{mlp, mlp, "--data", data}, 2, nil, []string{"--data", "input"}},
		{"unknown input", []string{ref, ref, "--data", "image=" + data}, 2, nil, []string{`"image"`}},
		{"missing model", []string{filepath.Join(dir, "nope.onnx"), ref, "--data", data}, 2, nil, []string{"nope.onnx"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"compare"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout, stderr)
			}
			for _, w := range c.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestCompareJSONDocument(t *testing.T) {
	dir, ref, data := compareFixture(t)
	noisy := writeModel(t, dir, "noisy.onnx", perturbed(0.05))
	html := filepath.Join(dir, "report.html")
	code, stdout, stderr := runCLI(t, "compare", ref, noisy, "--data", data, "--format", "json", "--min-sqnr", "80", "--html", html)
	if code != 3 {
		t.Fatalf("exit %d, want 3: %s", code, stderr)
	}
	var doc struct {
		Outputs []struct {
			Name string  `json:"name"`
			SQNR float64 `json:"sqnr_db"`
		} `json:"outputs"`
		Violations []struct {
			Output, Metric string
		} `json:"violations"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout)
	}
	if len(doc.Outputs) != 1 || doc.Outputs[0].SQNR <= 0 || doc.Outputs[0].SQNR >= 80 {
		t.Errorf("outputs %+v", doc.Outputs)
	}
	if len(doc.Violations) != 1 || doc.Violations[0].Output != "logits" || doc.Violations[0].Metric != "sqnr_db" {
		t.Errorf("violations %+v", doc.Violations)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatalf("--html: %v", err)
	}
	if !strings.Contains(string(page), "Quality gate failed") {
		t.Error("the HTML report does not show the failed gate")
	}
}

func TestQuantizeEvalGate(t *testing.T) {
	dir, ref, data := compareFixture(t)
	out := filepath.Join(dir, "cnn.q.onnx")
	reportPath := filepath.Join(dir, "report.json")
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"gate passes", []string{"--eval-samples", "4", "--min-sqnr", "5"}, 0, []string{"evaluation on 4 held-out samples (6 to 9)", "logits"}},
		{"gate fails", []string{"--eval-samples", "4", "--min-sqnr", "200"}, 3, []string{`output "logits": SQNR`, "below the minimum of 200.00 dB"}},
		{"no samples left", []string{"--eval-samples", "10"}, 2, []string{"leaves no calibration sample"}},
		{"gate without held-out samples", []string{"--min-sqnr", "20"}, 2, []string{"--eval-samples"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(reportPath)
			args := append([]string{"quantize", "--model", ref, "-o", out, "--data", data, "--batch-size", "3", "--report", reportPath}, c.args...)
			code, _, stderr := runCLI(t, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s", code, c.code, stderr)
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if c.code == 2 {
				return
			}
			b, err := os.ReadFile(reportPath)
			if err != nil {
				t.Fatalf("report: %v", err)
			}
			var rep struct {
				Eval *struct {
					Samples int `json:"samples"`
					Outputs []struct {
						Name string  `json:"name"`
						SQNR float64 `json:"sqnr_db"`
					} `json:"outputs"`
					Violations []json.RawMessage `json:"violations"`
				} `json:"eval"`
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Eval == nil || rep.Eval.Samples != 4 || len(rep.Eval.Outputs) != 1 || rep.Eval.Outputs[0].SQNR < 5 {
				t.Fatalf("eval in report: %s", b)
			}
			if (len(rep.Eval.Violations) > 0) != (c.code == 3) {
				t.Errorf("violations %d with exit %d", len(rep.Eval.Violations), c.code)
			}
		})
	}
}

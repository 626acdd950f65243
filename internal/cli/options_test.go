package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

// parseArgs runs a command built by newCmd on args with a run function
// that only captures its options.
func parseArgs[O any](t *testing.T, streams *IO, newCmd func(*IO, func(*O) error) *cobra.Command, args []string) *O {
	t.Helper()
	var got *O
	cmd := newCmd(streams, func(o *O) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if got == nil {
		t.Fatalf("%q: the command did not run", args)
	}
	return got
}

func ptr[T any](v T) *T { return &v }

// optionsCase is one command line and the options it must give.
type optionsCase[O any] struct {
	args []string
	want O
}

func checkOptions[O any](t *testing.T, newCmd func(*IO, func(*O) error) *cobra.Command, cases []optionsCase[O], setIO func(*O, *IO)) {
	t.Helper()
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			streams := &IO{}
			got := parseArgs(t, streams, newCmd, c.args)
			want := c.want
			setIO(&want, streams)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("options\n got %s\nwant %s", show(*got), show(want))
			}
		})
	}
}

// show prints options with the values behind their pointers.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

func TestQuantizeOptions(t *testing.T) {
	checkOptions(t, NewCmdQuantize, []optionsCase[quantizeOptions]{
		{[]string{}, quantizeOptions{Format: "qdq"}},
		{[]string{"--config", "c.yaml", "--model", "m.onnx", "-o", "out.onnx", "--preset", "w4", "--data", "a.npy", "--data", "x=b,c.npy",
			"--samples", "16", "--batch-size", "4", "--engine", "ort", "--threads", "2", "--report", "r.json"},
			quantizeOptions{Config: "c.yaml", Format: "qdq", Settings: config.Overrides{Model: ptr("m.onnx"), Output: ptr("out.onnx"), Preset: ptr("w4"),
				Data: []string{"a.npy", "x=b,c.npy"}, Samples: ptr(16), BatchSize: ptr(4), Engine: ptr("ort"), Threads: ptr(2), Report: ptr("r.json")}}},
		{[]string{"--engine", "go", "--threads", "0"}, quantizeOptions{Format: "qdq", Settings: config.Overrides{Engine: ptr("go"), Threads: ptr(0)}}},
		{[]string{"--opset", "21", "--format", "ort-nbits", "--fp4-as-fp8", "--dump-after", "prepare", "--check"},
			quantizeOptions{Format: "ort-nbits", Opset: 21, FP4AsFP8: true, DumpAfter: "prepare", Check: true}},
		{[]string{"--op-intrinsics=false", "--concat-share=false"},
			quantizeOptions{Format: "qdq", Prepare: passes.PrepareOptions{NoOpIntrinsics: true, ConcatOwnQParams: true}}},
		{[]string{"--op-intrinsics", "--concat-share=true"}, quantizeOptions{Format: "qdq"}},
		{[]string{"--eval-samples", "8", "--min-sqnr", "20.5"}, quantizeOptions{Format: "qdq", EvalSamples: 8, MinSQNR: ptr(20.5)}},
		{[]string{"--min-sqnr", "0"}, quantizeOptions{Format: "qdq", MinSQNR: ptr(0.0)}},
		{[]string{"--target-sqnr", "30", "--search-budget", "3", "--emit-config", "c.yaml"},
			quantizeOptions{Format: "qdq", Search: searchOptions{TargetSQNR: ptr(30.0), Budget: ptr(3), EmitConfig: "c.yaml"}}},
		{[]string{"--target-top1", "99.5"}, quantizeOptions{Format: "qdq", Search: searchOptions{TargetTop1: ptr(99.5)}}},
		{[]string{"--eval-cmd", "./map.sh {model}", "--target-metric", "0.31"},
			quantizeOptions{Format: "qdq", Search: searchOptions{EvalCmd: "./map.sh {model}", TargetMetric: ptr(0.31)}}},
	}, func(o *quantizeOptions, s *IO) { o.IO = s })
}

func TestCalibrateOptions(t *testing.T) {
	checkOptions(t, NewCmdCalibrate, []optionsCase[calibrateOptions]{
		{[]string{"--config", "c.yaml"}, calibrateOptions{quantizeOptions: quantizeOptions{Config: "c.yaml"}}},
		{[]string{"--model", "m.onnx", "--preset", "w8", "-o", "stats.json", "--data", "a.npy", "--samples", "100", "--batch-size", "1",
			"--engine", "ort", "--threads", "3", "--shard", "1/4", "--random-data", "--concat-share=false"},
			calibrateOptions{Output: "stats.json", Shard: "1/4", RandomData: true, quantizeOptions: quantizeOptions{
				Prepare:  passes.PrepareOptions{ConcatOwnQParams: true},
				Settings: config.Overrides{Model: ptr("m.onnx"), Preset: ptr("w8"), Data: []string{"a.npy"}, Samples: ptr(100), BatchSize: ptr(1), Engine: ptr("ort"), Threads: ptr(3)}}}},
	}, func(o *calibrateOptions, s *IO) { o.IO = s })
}

func TestFinalizeOptions(t *testing.T) {
	checkOptions(t, NewCmdFinalize, []optionsCase[finalizeOptions]{
		{[]string{"--config", "c.yaml", "--stats", "s.json"}, finalizeOptions{Stats: "s.json", quantizeOptions: quantizeOptions{Config: "c.yaml", Format: "qdq"}}},
		{[]string{"--stats", "s.json", "--model", "m.onnx", "-o", "q.onnx", "--report", "r.json", "--op-intrinsics=false", "--opset", "19", "--check"},
			finalizeOptions{Stats: "s.json", quantizeOptions: quantizeOptions{Format: "qdq", Opset: 19, Check: true, Prepare: passes.PrepareOptions{NoOpIntrinsics: true},
				Settings: config.Overrides{Model: ptr("m.onnx"), Output: ptr("q.onnx"), Report: ptr("r.json")}}}},
	}, func(o *finalizeOptions, s *IO) { o.IO = s })
}

func TestPrepareOptions(t *testing.T) {
	checkOptions(t, NewCmdPrepare, []optionsCase[quantizeOptions]{
		{[]string{"--config", "c.yaml"}, quantizeOptions{Config: "c.yaml", Format: "qdq"}},
		{[]string{"--config", "c.yaml", "-o", "plan.json", "--preset", "fp8", "--model", "m.onnx", "--check"},
			quantizeOptions{Config: "c.yaml", Format: "qdq", Check: true, Settings: config.Overrides{Output: ptr("plan.json"), Preset: ptr("fp8"), Model: ptr("m.onnx")}}},
	}, func(o *quantizeOptions, s *IO) { o.IO = s })
}

func TestCompareOptions(t *testing.T) {
	checkOptions(t, NewCmdCompare, []optionsCase[compareOptions]{
		{[]string{"a.onnx", "b.onnx", "--data", "x.npy"}, compareOptions{Reference: "a.onnx", Candidate: "b.onnx", Data: []string{"x.npy"}, Engine: "go", Format: "table"}},
		{[]string{"a.onnx", "b.onnx", "--data", "x=x.npy", "--data", "y=y.npy", "--engine", "ort", "--threads", "2", "--samples", "10", "--batch-size", "5",
			"--labels", "l.npy", "--format", "json", "--per-layer", "--html", "r.html", "--min-sqnr", "30", "--min-top1-agreement", "99%"},
			compareOptions{Reference: "a.onnx", Candidate: "b.onnx", Data: []string{"x=x.npy", "y=y.npy"}, Engine: "ort", Threads: 2, Samples: 10, BatchSize: 5,
				Labels: "l.npy", Format: "json", PerLayer: true, HTML: "r.html", MinSQNR: ptr(30.0), MinTop1: ptr(99.0)}},
	}, func(o *compareOptions, s *IO) { o.IO = s })
}

func TestRunOptions(t *testing.T) {
	checkOptions(t, NewCmdRun, []optionsCase[runOptions]{
		{[]string{"m.onnx"}, runOptions{Model: "m.onnx", OutputDir: ".", Engine: "go"}},
		{[]string{"m.onnx", "--input", "x=a.npy", "--input", "b.npy", "--output-dir", "out", "--engine", "ort", "--threads", "4", "--repeat", "10"},
			runOptions{Model: "m.onnx", Inputs: []string{"x=a.npy", "b.npy"}, OutputDir: "out", Engine: "ort", Threads: 4, Repeat: 10}},
	}, func(o *runOptions, s *IO) { o.IO = s })
}

func TestInspectOptions(t *testing.T) {
	checkOptions(t, NewCmdInspect, []optionsCase[inspectOptions]{
		{[]string{"m.onnx"}, inspectOptions{Model: "m.onnx", Format: "table"}},
		{[]string{"m.onnx", "--format", "yaml", "--nodes", "--config", "c.yaml"}, inspectOptions{Model: "m.onnx", Format: "yaml", Nodes: true, Config: "c.yaml"}},
	}, func(o *inspectOptions, s *IO) { o.IO = s })
}

func TestConfigValidateOptions(t *testing.T) {
	checkOptions(t, NewCmdConfig, []optionsCase[configValidateOptions]{
		{[]string{"validate", "c.yaml"}, configValidateOptions{File: "c.yaml"}},
	}, func(o *configValidateOptions, s *IO) { o.IO = s })
}

func TestPresetsOptions(t *testing.T) {
	checkOptions(t, NewCmdPresets, []optionsCase[presetsOptions]{
		{[]string{}, presetsOptions{}},
		{[]string{"w4"}, presetsOptions{Name: "w4"}},
	}, func(o *presetsOptions, s *IO) { o.IO = s })
}

func TestStatsMergeOptions(t *testing.T) {
	checkOptions(t, NewCmdStats, []optionsCase[statsMergeOptions]{
		{[]string{"merge", "a.json", "b.json", "-o", "out.json"}, statsMergeOptions{Inputs: []string{"a.json", "b.json"}, Output: "out.json"}},
		{[]string{"merge", "a.json"}, statsMergeOptions{Inputs: []string{"a.json"}}},
	}, func(o *statsMergeOptions, s *IO) { o.IO = s })
}

func TestVersionOptions(t *testing.T) {
	checkOptions(t, NewCmdVersion, []optionsCase[versionOptions]{
		{[]string{}, versionOptions{}},
	}, func(o *versionOptions, s *IO) { o.IO = s })
}

// TestUsageErrors: flag and argument errors exit 2 through cobra's hooks.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"quantiz"}, `unknown command "quantiz" for "coreaiq"`},
		{[]string{"quantize", "--nope"}, "unknown flag: --nope"},
		{[]string{"quantize", "--samples", "many"}, `invalid argument "many" for "--samples" flag`},
		{[]string{"quantize", "--min-sqnr", "loud"}, `invalid argument "loud" for "--min-sqnr" flag`},
		{[]string{"quantize", "--op-intrinsics=maybe"}, `invalid argument "maybe" for "--op-intrinsics" flag`},
		{[]string{"quantize", "--model"}, "flag needs an argument: --model"},
		{[]string{"quantize", "extra"}, `unknown command "extra" for "coreaiq quantize"`},
		{[]string{"inspect"}, "accepts 1 arg(s), received 0"},
		{[]string{"compare", "a.onnx"}, "accepts 2 arg(s), received 1"},
		{[]string{"presets", "a", "b"}, "accepts at most 1 arg(s), received 2"},
		{[]string{"stats", "merge"}, "requires at least 1 arg(s), only received 0"},
		{[]string{"run", "m.onnx", "--threads", "-1"}, "--threads -1: want 0 (one per CPU) or more"},
		{[]string{"--log-level", "loud", "version"}, `--log-level "loud"`},
		{[]string{"quantize", "--model", filepath.Join(testutil.RepoRoot(), "examples", "digits", "model.onnx"),
			"--preset", "w4-accurate", "-o", filepath.Join(t.TempDir(), "q.onnx")}, "gptq (preset:w4-accurate:27) needs calibration data"},
		{[]string{"quantize", "--model", filepath.Join(testutil.RepoRoot(), "examples", "digits", "model.onnx"),
			"--preset", "w8", "--algorithms", "bias_correction", "-o", filepath.Join(t.TempDir(), "q.onnx")}, "bias_correction (--algorithms) needs calibration data"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, c.args...)
			if code != ExitUsage || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, ExitUsage, c.want)
			}
		})
	}
}

// TestNoArgsPrintsHelp: the bare command prints its help and succeeds.
func TestNoArgsPrintsHelp(t *testing.T) {
	code, stdout, _ := runCLI(t)
	if code != ExitOK || !strings.Contains(stdout, "Available Commands") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// badInput is one reproduction of a bad input or a misuse, run in a
// directory holding the digits example (model.onnx, calib.npy), an
// already quantized copy (quant.onnx), a FIFO, a link to the model and a
// link to /proc/self/fd/1. Every case asserts the exit code, that stderr
// says what it must (the file, node or config line), that every file that
// was there is byte-identical afterwards, and that the only new files are
// the case's products: no partial output, no temp file.
type badInput struct {
	name  string
	setup func(t *testing.T, dir string)
	args  []string
	code  int
	want  []string
	// outputs are the files the case is expected to write.
	outputs []string
}

func runBadInputs(t *testing.T, cases []badInput) {
	t.Helper()
	fixture := reliabilityFixture(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, fixture, dir)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			t.Chdir(dir)
			before := snapshot(t, dir)
			code, _, stderr := runCLI(t, tc.args...)
			first, _, _ := strings.Cut(stderr, "\n")
			t.Logf("coreaiq %s\nexit %d: %s", strings.Join(tc.args, " "), code, first)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic:") {
				t.Errorf("stack trace on stderr:\n%s", stderr)
			}
			after := snapshot(t, dir)
			for path, sum := range before {
				if after[path] != sum {
					t.Errorf("input %s changed", path)
				}
			}
			for path := range after {
				if _, was := before[path]; !was && !slices.Contains(tc.outputs, path) {
					t.Errorf("left %s behind", path)
				}
			}
			for _, want := range tc.outputs {
				if _, ok := after[want]; !ok {
					t.Errorf("did not write %s", want)
				}
			}
		})
	}
}

var fixtureDir string

// reliabilityFixture builds the shared starting directory once.
func reliabilityFixture(t *testing.T) string {
	t.Helper()
	if fixtureDir != "" {
		return fixtureDir
	}
	dir, err := os.MkdirTemp("", "coreaiq-reliability-")
	if err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(testutil.RepoRoot(), "examples", "digits")
	copyFile(t, filepath.Join(example, "model.onnx"), filepath.Join(dir, "model.onnx"))
	copyFile(t, filepath.Join(example, "calib_input.npy"), filepath.Join(dir, "calib.npy"))
	if code, _, stderr := runCLI(t, "quantize", "--model", filepath.Join(dir, "model.onnx"), "--data", filepath.Join(dir, "calib.npy"),
		"--samples", "16", "-o", filepath.Join(dir, "quant.onnx")); code != 0 {
		t.Fatalf("making quant.onnx: %s", stderr)
	}
	fixtureDir = dir
	return dir
}

func TestMain(m *testing.M) {
	if os.Getenv("COREAIQ_SIGNAL_HELPER") != "" {
		signalHelper()
		return
	}
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

// copyDir copies the fixture's regular files and makes its special ones.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
	}
	must(t, os.Mkdir(filepath.Join(to, "sub"), 0o755))
	must(t, syscall.Mkfifo(filepath.Join(to, "fifo"), 0o644))
	must(t, os.Symlink("model.onnx", filepath.Join(to, "link.onnx")))
	must(t, os.Symlink("/proc/self/fd/1", filepath.Join(to, "stdout-link")))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(to, b, 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot maps every path under dir (hidden ones included) to the hash
// of its bytes, or to its kind for what is not a regular file.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !d.Type().IsRegular() {
			out[rel] = d.Type().String()
			return nil
		}
		if info, err := d.Info(); err == nil && info.Size() > 16<<20 {
			// Sparse test files of gigabytes: size and time stand for them.
			out[rel] = fmt.Sprintf("%d bytes, modified %v", info.Size(), info.ModTime())
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	return out
}

// tinyModel is x[N,4] → Add(w) → y; edit changes it before it is written.
func tinyModel(edit func(b *testmodels.Builder)) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		b := testmodels.New("tiny", 13)
		b.Input("x", tensor.Float, "N", 4).Output("y", tensor.Float, "N", 4)
		b.Init("w", []int64{4}, []float32{1, 2, 3, 4})
		b.Node("Add", "add", []string{"x", "w"}, []string{"y"})
		if edit != nil {
			edit(b)
		}
		writeModel(t, dir, "bad.onnx", b)
	}
}

// externalModel is tinyModel with w in w.data at offset and length.
func externalModel(offset, length string, fileSize int64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		tinyModel(func(b *testmodels.Builder) {
			loc := onnxpb.TensorProto_EXTERNAL
			w := b.Model.Graph.Initializer[0]
			w.RawData, w.DataLocation = nil, &loc
			w.ExternalData = []*onnxpb.StringStringEntryProto{
				{Key: gproto.String("location"), Value: gproto.String("w.data")},
				{Key: gproto.String("offset"), Value: gproto.String(offset)},
				{Key: gproto.String("length"), Value: gproto.String(length)},
			}
		})(t, dir)
		f, err := os.Create(filepath.Join(dir, "w.data"))
		must(t, err)
		must(t, f.Truncate(fileSize)) // sparse
		must(t, f.Close())
	}
}

func writeFile(name, text string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
}

func both(fs ...func(t *testing.T, dir string)) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		for _, f := range fs {
			f(t, dir)
		}
	}
}

var quantizeDigits = []string{"quantize", "--model", "model.onnx", "--data", "calib.npy", "--samples", "8"}

func with(base []string, more ...string) []string { return append(slices.Clone(base), more...) }

// TestCrashesAreErrors: inputs that used to crash or exhaust memory end in
// one message and exit 2.
func TestCrashesAreErrors(t *testing.T) {
	const maxInt64 = "9223372036854775807"
	runBadInputs(t, []badInput{
		{name: "external offset+length overflows (prepare)", setup: externalModel("1", maxInt64, 64),
			args: []string{"prepare", "--model", "bad.onnx"}, code: 2,
			want: []string{"bad.onnx", `tensor "w"`, "offset 1 and length " + maxInt64 + " run past its end"}},
		{name: "external offset+length overflows (quantize)", setup: externalModel("1", maxInt64, 64),
			args: []string{"quantize", "--model", "bad.onnx", "--preset", "w8", "-o", "q.onnx"}, code: 2,
			want: []string{"bad.onnx", `tensor "w"`}},
		{name: "external offset+length overflows (run)", setup: externalModel("1", maxInt64, 64),
			args: []string{"run", "bad.onnx", "--input", "x=calib.npy"}, code: 2,
			want: []string{"bad.onnx", `tensor "w"`}},
		{name: "2 GiB sparse external file behind a 16-byte tensor", setup: externalModel("0", "-1", 2<<30),
			args: []string{"inspect", "bad.onnx"}, code: 2,
			want: []string{"bad.onnx", `tensor "w"`, "needs 16 bytes in its external data, has 2147483648"}},
		{name: "69-byte PNG claiming 10^6×10^6 pixels",
			setup: both(func(t *testing.T, dir string) {
				must(t, os.Mkdir(filepath.Join(dir, "img"), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, "img", "huge.png"), testmodels.PNGClaiming(1000000, 1000000), 0o644))
			}, writeFile("c.yaml", "model: model.onnx\ncalibration:\n  images:\n    dir: img\n    resize: [28, 28]\n    color: L\n")),
			args: []string{"quantize", "--config", "c.yaml", "-o", "q.onnx"}, code: 2,
			want: []string{"c.yaml:4", "huge.png", "1000000×1000000 pixels, over the limit of 64 megapixels"}},
		{name: "--random-data with a 10^12 dimension",
			setup: tinyModel(func(b *testmodels.Builder) {
				b.Model.Graph.Input[0] = testmodels.ValueInfo("x", tensor.Float, "N", int(1e12))
				b.Model.Graph.Output[0] = testmodels.ValueInfo("y", tensor.Float, "N", int(1e12))
				b.Model.Graph.Initializer[0].Dims = []int64{1}
				b.Model.Graph.Initializer[0].RawData = b.Model.Graph.Initializer[0].RawData[:4]
			}),
			args: []string{"calibrate", "--model", "bad.onnx", "--random-data"}, code: 2,
			want: []string{`input "x": a sample of shape [1000000000000] holds more than 268435456 elements`}},
		{name: "inspect /dev/zero", args: []string{"inspect", "/dev/zero"}, code: 2,
			want: []string{"/dev/zero is not a regular file (a character device)"}},
		{name: "config validate /dev/zero", args: []string{"config", "validate", "/dev/zero"}, code: 2,
			want: []string{"/dev/zero is not a regular file (a character device)"}},
		{name: "inspect a FIFO", args: []string{"inspect", "fifo"}, code: 2,
			want: []string{"fifo is not a regular file (a named pipe)"}},
		{name: "config of 200k plain keys", setup: func(t *testing.T, dir string) {
			var b strings.Builder
			for i := range 200000 {
				b.WriteString("k" + strconv.Itoa(i) + ": 1\n")
			}
			must(t, os.WriteFile(filepath.Join(dir, "big.yaml"), []byte(b.String()), 0o644))
		}, args: []string{"config", "validate", "big.yaml"}, code: 2,
			want: []string{"big.yaml is 2088890 bytes, over the limit of 1048576"}},
	})
}

// TestNoClobbering: an output that is an input, a special file or in a
// missing directory is refused before any work, and nothing is written.
func TestNoClobbering(t *testing.T) {
	runBadInputs(t, []badInput{
		{name: "-o the model", args: with(quantizeDigits, "-o", "model.onnx"), code: 2,
			want: []string{"-o model.onnx is the input model.onnx: refusing to overwrite it"}},
		{name: "-o the model through sub/..", args: with(quantizeDigits, "-o", "./sub/../model.onnx"), code: 2,
			want: []string{"-o ./sub/../model.onnx is the input model.onnx"}},
		{name: "-o a link to the model", args: with(quantizeDigits, "-o", "link.onnx"), code: 2,
			want: []string{"-o link.onnx is the input model.onnx"}},
		{name: "calibrate -o its data", args: []string{"calibrate", "--model", "model.onnx", "--data", "calib.npy", "-o", "calib.npy"}, code: 2,
			want: []string{"-o calib.npy is the input calib.npy"}},
		{name: "--report over the data", args: with(quantizeDigits, "-o", "q.onnx", "--report", "calib.npy"), code: 2,
			want: []string{"--report calib.npy is the input calib.npy"}},
		{name: "stats merge -o an input", setup: writeFile("a.json", "{}"),
			args: []string{"stats", "merge", "a.json", "-o", "a.json"}, code: 2,
			want: []string{"-o a.json is the input a.json"}},
		{name: "-o a FIFO", args: with(quantizeDigits, "-o", "fifo"), code: 2,
			want: []string{"-o fifo is a named pipe; coreaiq writes regular files only"}},
		// A private null device: a bug here must not replace the system's.
		{name: "-o a character device", setup: func(t *testing.T, dir string) {
			if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Skipf("cannot make a device node: %v", err)
			}
		}, args: with(quantizeDigits, "-o", "null"), code: 2,
			want: []string{"-o null is a character device"}},
		{name: "-o a link to /proc/self/fd/1", args: with(quantizeDigits, "-o", "stdout-link"), code: 2,
			want: []string{"-o stdout-link links to /proc/self/fd/1"}},
		{name: "--report in a missing directory", args: with(quantizeDigits, "-o", "q.onnx", "--report", "nodir/r.json"), code: 2,
			want: []string{"--report nodir/r.json: the directory nodir does not exist"}},
		{name: "-o in a missing directory", args: with(quantizeDigits, "-o", "nodir/q.onnx"), code: 2,
			want: []string{"-o nodir/q.onnx: the directory nodir does not exist"}},
		{name: "-o and --report the same file", args: with(quantizeDigits, "-o", "q.onnx", "--report", "q.onnx"), code: 2,
			want: []string{"-o q.onnx and --report name the same file"}},
		{name: "model and report, both written", args: with(quantizeDigits, "-o", "q.onnx", "--report", "r.json"), code: 0,
			outputs: []string{"q.onnx", "r.json"}},
		{name: "-o - writes the model to stdout", args: with(quantizeDigits, "-o", "-"), code: 0},
	})
}

// TestSignalRemovesStaging: SIGINT or SIGTERM while outputs are staged
// removes them, and the process exits 128+signal.
func TestSignalRemovesStaging(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "COREAIQ_SIGNAL_HELPER="+filepath.Join(dir, "out.onnx"))
			stdout, err := cmd.StdoutPipe()
			must(t, err)
			must(t, cmd.Start())
			ready := make([]byte, 6)
			if _, err := stdout.Read(ready); err != nil || string(ready) != "ready\n" {
				t.Fatalf("helper: %q %v", ready, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Fatalf("no staging directory while the helper runs: %v", entries)
			}
			must(t, cmd.Process.Signal(sig))
			err = cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) {
				t.Errorf("helper ended with %v, want exit %d", err, 128+int(sig))
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

// signalHelper plans one output, writes part of it into the staging
// directory, says ready and waits to be killed.
func signalHelper() {
	cleanupOnSignal()
	out := os.Getenv("COREAIQ_SIGNAL_HELPER")
	plan, err := planOutputs(nil, output{Flag: "-o", Path: out})
	if err != nil {
		os.Exit(3)
	}
	if err := os.WriteFile(plan.Staged(out), []byte("partial"), 0o644); err != nil {
		os.Exit(4)
	}
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute)
	os.Exit(5)
}

// TestBadInputsRefused: inputs that are wrong and used to be accepted.
func TestBadInputsRefused(t *testing.T) {
	infData := func(t *testing.T, dir string) {
		x, err := npy.ReadNPYFile(filepath.Join(dir, "calib.npy"))
		must(t, err)
		x.Float32s()[5] = float32(math.Inf(1))
		must(t, npy.WriteNPYFile(filepath.Join(dir, "inf.npy"), x))
	}
	runBadInputs(t, []badInput{
		{name: "config NAME=FILE resolves FILE only",
			setup: writeFile("c.yaml", "model: model.onnx\ncalibration:\n  data: ['input=calib.npy']\n  samples: 8\n"),
			args:  []string{"quantize", "--config", "c.yaml", "-o", "q.onnx"}, code: 0, outputs: []string{"q.onnx"}},
		{name: "config NAME=FILE with a NAME that is no input",
			setup: writeFile("c.yaml", "model: model.onnx\ncalibration:\n  data: ['images=calib.npy']\n"),
			args:  []string{"quantize", "--config", "c.yaml", "-o", "q.onnx"}, code: 2,
			want: []string{`calib.npy for "images", which is not a model input (inputs: input)`}},
		{name: "an already quantized model", args: []string{"quantize", "--model", "quant.onnx", "--data", "calib.npy", "-o", "q.onnx"}, code: 2,
			want: []string{"quant.onnx: the model is already quantized", "QuantizeLinear", "quantize the float model"}},
		{name: "Softmax axis as a string", setup: tinyModel(func(b *testmodels.Builder) {
			b.Model.Graph.Node[0] = &onnxpb.NodeProto{Name: gproto.String("sm"), OpType: gproto.String("Softmax"), Input: []string{"x"}, Output: []string{"y"},
				Attribute: []*onnxpb.AttributeProto{{Name: gproto.String("axis"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("1")}}}
		}), args: []string{"prepare", "--model", "bad.onnx"}, code: 2,
			want: []string{"bad.onnx", `node "sm" (Softmax): attribute "axis" must be INT, the model gives STRING`}},
		{name: "Gemm transB as a float", setup: tinyModel(func(b *testmodels.Builder) {
			b.Model.Graph.Node[0] = &onnxpb.NodeProto{Name: gproto.String("g"), OpType: gproto.String("Gemm"), Input: []string{"x", "w"}, Output: []string{"y"},
				Attribute: []*onnxpb.AttributeProto{{Name: gproto.String("transB"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: gproto.Float32(1)}}}
		}), args: []string{"run", "bad.onnx", "--input", "x=calib.npy"}, code: 2,
			want: []string{`node "g" (Gemm): attribute "transB" must be INT, the model gives FLOAT`}},
		{name: "duplicate initializers", setup: tinyModel(func(b *testmodels.Builder) { b.Init("w", []int64{4}, []float32{0, 0, 0, 0}) }),
			args: []string{"inspect", "bad.onnx"}, code: 2, want: []string{"bad.onnx", `two initializers named "w"`}},
		{name: "no nodes, output never produced", setup: tinyModel(func(b *testmodels.Builder) { b.Model.Graph.Node = nil }),
			args: []string{"inspect", "bad.onnx"}, code: 2, want: []string{"bad.onnx", `declares the output "y", which no node produces`}},
		{name: "node output named like an initializer", setup: tinyModel(func(b *testmodels.Builder) {
			b.Node("Relu", "r", []string{"x"}, []string{"w"})
		}), args: []string{"inspect", "bad.onnx"}, code: 2, want: []string{"bad.onnx", `node "r" (Relu) writes "w", which is also an initializer`}},
		{name: "raw_data too short", setup: tinyModel(func(b *testmodels.Builder) {
			b.Model.Graph.Initializer[0].RawData = b.Model.Graph.Initializer[0].RawData[:6]
		}), args: []string{"quantize", "--model", "bad.onnx", "--preset", "w8", "-o", "q.onnx"}, code: 2,
			want: []string{"bad.onnx", `tensor "w": float32 tensor of shape [4] needs 16 bytes in raw_data, has 6`}},
		{name: "10^12 dims", setup: tinyModel(func(b *testmodels.Builder) {
			b.Model.Graph.Initializer[0].Dims = []int64{1000000, 1000000}
		}), args: []string{"prepare", "--model", "bad.onnx"}, code: 2,
			want: []string{`tensor "w": float32 tensor of shape [1000000 1000000] needs 4000000000000 bytes in raw_data, has 16`}},
		{name: "negative dims (inspect)", setup: tinyModel(func(b *testmodels.Builder) {
			b.Model.Graph.Initializer[0].Dims = []int64{-4}
		}), args: []string{"inspect", "bad.onnx"}, code: 2, want: []string{`tensor "w": negative dimension -4`}},
		{name: "external length mismatch says external data", setup: externalModel("0", "8", 64),
			args: []string{"prepare", "--model", "bad.onnx"}, code: 2,
			want: []string{`tensor "w": float32 tensor of shape [4] needs 16 bytes in its external data, has 8`}},
		{name: "--opset 5", args: with(quantizeDigits, "-o", "q.onnx", "--opset", "5"), code: 2,
			want: []string{"--opset: opset 5 is too low: QuantizeLinear and DequantizeLinear need opset 10 or later"}},
		{name: "--opset 99", args: with(quantizeDigits, "-o", "q.onnx", "--opset", "99"), code: 2,
			want: []string{"--opset: opset 99: coreaiq writes opsets 10 to 25"}},
		{name: "--opset below the model's", args: with(quantizeDigits, "-o", "q.onnx", "--opset", "11"), code: 2,
			want: []string{"opset 11 is below the model's opset 13"}},
		{name: "--samples beyond the data", args: []string{"quantize", "--model", "model.onnx", "--data", "calib.npy", "--samples", "1000", "-o", "q.onnx"},
			code: 0, outputs: []string{"q.onnx"},
			want: []string{"warning: --samples asks for 1000 samples; the calibration data holds 64, which are all used"}},
		{name: "±Inf in the data", setup: infData,
			args: []string{"quantize", "--model", "model.onnx", "--data", "inf.npy", "--samples", "8", "-o", "q.onnx"},
			code: 0, outputs: []string{"q.onnx"},
			want: []string{`note: value "input": held 1 ±Inf values in calibration`}},
	})
}

// TestShardingPromise: what sharding cannot reproduce exactly is refused.
func TestShardingPromise(t *testing.T) {
	runBadInputs(t, []badInput{
		{name: "calibrate --shard with a moving average", args: []string{"calibrate", "--model", "model.onnx", "--data", "calib.npy", "--shard", "0/2", "-o", "s0.json"},
			code: 2, want: []string{"--shard 0/2: tensor", "moving_average calculator", "cannot be merged exactly"}},
		{name: "calibrate --shard with min/max", setup: writeFile("c.yaml", minmaxConfig),
			args: []string{"calibrate", "--config", "c.yaml", "--data", "calib.npy", "--shard", "0/2", "-o", "s0.json"},
			code: 0, outputs: []string{"s0.json"}},
	})
}

const minmaxConfig = `model: model.onnx
quantization_config:
  global_config:
    op_input_spec: { "*": &a { dtype: int8, qscheme: symmetric, granularity: { type: per_tensor }, qparam_calculator: { type: minmax } } }
    op_output_spec: { "*": *a }
    op_state_spec:
      weight: { dtype: int8, qscheme: symmetric, granularity: { type: per_channel }, qparam_calculator: static }
`

// TestBatchAxis: an input whose samples lie along axis 1 (a recurrent
// state [layers, batch, hidden]) is given as NAME=FILE.npy:axis=1, on the
// command line or in the config; without it the message says how.
func TestBatchAxis(t *testing.T) {
	setup := func(t *testing.T, dir string) {
		b := testmodels.New("stateful", 13)
		b.Input("x", tensor.Float, "N", 4).Input("state", tensor.Float, 2, "N", 4).Output("y", tensor.Float, 2, "N", 4)
		b.Node("Add", "add", []string{"state", "x"}, []string{"s"})
		b.Node("Relu", "relu", []string{"s"}, []string{"y"})
		writeModel(t, dir, "state.onnx", b)
		x := make([]float32, 6*4)
		st := make([]float32, 2*6*4)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for i := range st {
			st[i] = float32(i%5) - 2
		}
		must(t, npy.WriteNPYFile(filepath.Join(dir, "x.npy"), tensor.FromFloat32(x, 6, 4)))
		must(t, npy.WriteNPYFile(filepath.Join(dir, "h.npy"), tensor.FromFloat32(st, 2, 6, 4)))
		must(t, os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("model: state.onnx\ncalibration:\n  data: [x=x.npy, 'state=h.npy:axis=1']\n  batch_size: 4\n"), 0o644))
	}
	runBadInputs(t, []badInput{
		{name: "axis 1 on the command line", setup: setup,
			args: []string{"quantize", "--model", "state.onnx", "--data", "x=x.npy", "--data", "state=h.npy:axis=1", "--batch-size", "4", "-o", "q.onnx"},
			code: 0, outputs: []string{"q.onnx"}},
		{name: "axis 1 in the config", setup: setup, args: []string{"quantize", "--config", "c.yaml", "-o", "q.onnx"},
			code: 0, outputs: []string{"q.onnx"}},
		{name: "no axis given", setup: setup,
			args: []string{"quantize", "--model", "state.onnx", "--data", "x=x.npy", "--data", "state=h.npy", "-o", "q.onnx"}, code: 2,
			want: []string{`input "state": h.npy has 2 samples on axis 0, other inputs have 6 (if its samples lie along another axis, say which: --data state=FILE.npy:axis=K)`}},
		{name: "an axis the array does not have", setup: setup,
			args: []string{"quantize", "--model", "state.onnx", "--data", "x=x.npy", "--data", "state=h.npy:axis=3", "-o", "q.onnx"}, code: 2,
			want: []string{`input "state": h.npy has shape [2 6 4], no axis 3 to take samples along`}},
	})
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// percentileConfig observes every activation with a histogram
// (percentile calculator) so that shard merging covers histograms too.
const percentileConfig = `
model: %s
quantization_spec:
  act: &act
    dtype: int8
    qscheme: symmetric
    granularity: { type: per_tensor }
    qparam_calculator: { type: percentile, percentile: 99.9, num_bins: 2048 }
  weight: &weight
    dtype: int8
    qscheme: symmetric
    granularity: { type: per_channel }
    qparam_calculator: static
quantization_config:
  global_config:
    op_input_spec: { "*": *act }
    op_output_spec: { "*": *act }
    op_state_spec: { weight: *weight }
`

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("coreaiq %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stdout
}

func readStats(t *testing.T, path string) *calibrate.Stats {
	t.Helper()
	s, err := calibrate.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCalibrateMatchesBruteForce runs `coreaiq calibrate` on shared models
// and their calibration data and checks every planned tensor's min/max
// against a naive pass: the model run on all the data at once with a tap
// on every planned value, min and max taken with plain comparisons.
func TestCalibrateMatchesBruteForce(t *testing.T) {
	shared := testutil.SharedModels(t)
	for _, name := range []string{"digits_lenet", "digits_mlp", "digits_resnet"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(shared, name)
			model, data := filepath.Join(dir, "model.onnx"), filepath.Join(dir, "calib_input.npy")
			out := filepath.Join(t.TempDir(), "stats.json")
			mustCLI(t, "calibrate", "--model", model, "--preset", "w8a8", "--data", data, "--batch-size", "7", "-o", out)
			st := readStats(t, out)

			m, err := onnxgraph.Load(model)
			if err != nil {
				t.Fatal(err)
			}
			q, err := config.Preset("w8a8")
			if err != nil {
				t.Fatal(err)
			}
			x, err := npy.ReadNPYFile(data)
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := map[string]float64{}, map[string]float64{}
			var names []string
			tap := func(v string, t *tensor.Tensor) {
				for _, f := range t.Data.([]float32) {
					if g := float64(f); !math.IsNaN(g) && !math.IsInf(g, 0) {
						lo[v], hi[v] = math.Min(lo[v], g), math.Max(hi[v], g)
					}
				}
			}
			// The naive pass runs as the pipeline's calibrate pass, as the
			// command does, in the same batches of 7: the engine's float
			// results can differ in the last bit between sessions set up
			// differently, which is not what this test is about.
			u := &passes.Unit{Model: m, Config: q}
			u.Calibrate = func(ctx context.Context, m *onnxgraph.Model, plan *passes.Plan) (passes.Stats, error) {
				for _, p := range passes.ToObserve(plan) {
					names = append(names, p.Name)
					lo[p.Name], hi[p.Name] = math.Inf(1), math.Inf(-1)
				}
				sess, err := runtime.Open("go", m, runtime.Options{})
				if err != nil {
					return nil, err
				}
				defer sess.Close()
				row := tensor.NumElements(x.Shape[1:])
				all := x.Data.([]float32)
				for s := 0; s < x.Shape[0]; s += 7 {
					e := min(s+7, x.Shape[0])
					b := tensor.FromFloat32(all[s*row:e*row], append([]int{e - s}, x.Shape[1:]...)...)
					if _, err := sess.Run(ctx, map[string]*tensor.Tensor{sess.Inputs()[0].Name: b},
						runtime.RunOptions{Tap: tap, TapValues: names}); err != nil {
						return nil, err
					}
				}
				return passes.StatsOf(&calibrate.Stats{}), nil
			}
			if _, err := passes.Run(context.Background(), u, passes.RunOptions{Until: "calibrate"}); err != nil {
				t.Fatal(err)
			}
			if len(names) == 0 || len(st.Tensors) != len(names) {
				t.Fatalf("stats hold %d tensors, the plan observes %d", len(st.Tensors), len(names))
			}
			for _, n := range names {
				o := st.Tensor(n)
				if o == nil {
					t.Fatalf("tensor %q missing from the stats", n)
				}
				// +0 for zero extremes, as the observers store them.
				if float32(o.Min[0]) != float32(lo[n]+0) || float32(o.Max[0]) != float32(hi[n]+0) {
					t.Errorf("tensor %q: stats [%v, %v], brute force [%v, %v]", n, o.Min[0], o.Max[0], lo[n], hi[n])
				}
				if st.Samples != int64(x.Shape[0]) {
					t.Errorf("%d samples counted, the data has %d", st.Samples, x.Shape[0])
				}
			}
		})
	}
}

// TestCalibrateShardsMerge checks that --shard i/4 and `stats merge`
// equal one pass exactly for min/max and histograms.
func TestCalibrateShardsMerge(t *testing.T) {
	shared := testutil.SharedModels(t)
	dir := t.TempDir()
	m := filepath.Join(shared, "digits_lenet")
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, percentileConfig, filepath.Join(m, "model.onnx")), 0o644); err != nil {
		t.Fatal(err)
	}
	// 100 of the 256 samples: shards of 25, batches of 8 that do not
	// line up with the shard edges.
	common := []string{"--config", cfg, "--data", filepath.Join(m, "calib_input.npy"), "--samples", "100", "--batch-size", "8"}
	one := filepath.Join(dir, "one.json")
	mustCLI(t, append([]string{"calibrate", "-o", one}, common...)...)
	shards := make([]string, 4)
	for i := range shards {
		shards[i] = filepath.Join(dir, fmt.Sprintf("shard%d.json", i))
		mustCLI(t, append([]string{"calibrate", "-o", shards[i], "--shard", fmt.Sprintf("%d/4", i)}, common...)...)
	}
	merged := filepath.Join(dir, "merged.json")
	mustCLI(t, append([]string{"stats", "merge", "-o", merged}, shards...)...)
	a, b := readStats(t, one), readStats(t, merged)
	if a.Samples != 100 || b.Samples != 100 || len(a.Tensors) == 0 || len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("one pass: %d samples, %d tensors; merged: %d samples, %d tensors", a.Samples, len(a.Tensors), b.Samples, len(b.Tensors))
	}
	for i, x := range a.Tensors {
		y := b.Tensors[i]
		if x.Histogram == nil {
			t.Fatalf("tensor %q has no histogram", x.Name)
		}
		if x.Name != y.Name || !reflect.DeepEqual(x.Min, y.Min) || !reflect.DeepEqual(x.Max, y.Max) ||
			!reflect.DeepEqual(x.Histogram, y.Histogram) || x.Count != y.Count || x.NaN != y.NaN || x.Inf != y.Inf {
			t.Errorf("tensor %q: one pass %+v %+v, merged %+v %+v", x.Name, x, x.Histogram, y, y.Histogram)
		}
	}
}

// TestCalibrateThenFinalizeEqualsQuantize checks that quantize and
// calibrate + finalize --stats write byte-identical models from one config
// with its calibration data, under w8a8 and under accurate, whose
// algorithms read the data before calibration (SmoothQuant) and after it
// (bias correction): calibrate and finalize both read the config's data.
// yolox-nano (from the shared set, when its data is given) adds
// equalization through gated activations, which inserts nodes. Under
// accurate, two calibrate shards merged finalize into the same model too.
func TestCalibrateThenFinalizeEqualsQuantize(t *testing.T) {
	shared := testutil.SharedModels(t)
	for _, tc := range []struct{ model, input, preset string }{
		{"digits_resnet", "input", "w8a8"},
		{"digits_resnet", "input", "accurate"},
		{"yolox-nano", "images", "accurate"},
	} {
		t.Run(tc.model+"/"+tc.preset, func(t *testing.T) {
			dir := t.TempDir()
			m := filepath.Join(shared, tc.model)
			cfg := filepath.Join(dir, "c.yaml")
			text := fmt.Sprintf("model: %s\ncalibration:\n  data: [%s]\n  samples: 40\n  batch_size: %d\nquantization_config:\n  preset: %s\n",
				filepath.Join(m, "model.onnx"), filepath.Join(m, "calib_"+tc.input+".npy"), map[bool]int{true: 1, false: 6}[tc.model == "yolox-nano"], tc.preset)
			if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			a, b, stats := filepath.Join(dir, "a.onnx"), filepath.Join(dir, "b.onnx"), filepath.Join(dir, "s.json")
			ra, rb := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
			mustCLI(t, "quantize", "--config", cfg, "-o", a, "--report", ra)
			mustCLI(t, "calibrate", "--config", cfg, "-o", stats)
			mustCLI(t, "finalize", "--config", cfg, "--stats", stats, "-o", b, "--report", rb)
			ab, _ := os.ReadFile(a)
			bb, _ := os.ReadFile(b)
			if len(ab) == 0 || !bytes.Equal(ab, bb) {
				var x, y report
				for _, r := range []struct {
					path string
					into *report
				}{{ra, &x}, {rb, &y}} {
					raw, _ := os.ReadFile(r.path)
					json.Unmarshal(raw, r.into)
				}
				for i := range min(len(x.Tensors), len(y.Tensors)) {
					if !reflect.DeepEqual(x.Tensors[i], y.Tensors[i]) {
						t.Errorf("tensor %q: quantize %+v %+v, finalize %+v %+v", x.Tensors[i].Value, x.Tensors[i], x.Tensors[i].Observed, y.Tensors[i], y.Tensors[i].Observed)
						break
					}
				}
				t.Fatalf("quantize wrote %d bytes, calibrate + finalize %d bytes, not identical", len(ab), len(bb))
			}
			if readStats(t, stats).PlanSHA256 == "" {
				t.Error("the stats record no plan")
			}
			if tc.preset != "accurate" {
				return // w8a8's moving averages do not shard
			}
			// Every shard runs the algorithms on all the samples: the
			// merged stats finalize into the same model.
			shards := []string{filepath.Join(dir, "s0.json"), filepath.Join(dir, "s1.json")}
			for i, sh := range shards {
				mustCLI(t, "calibrate", "--config", cfg, "-o", sh, "--shard", fmt.Sprintf("%d/2", i))
			}
			merged, c := filepath.Join(dir, "merged.json"), filepath.Join(dir, "c.onnx")
			mustCLI(t, append([]string{"stats", "merge", "-o", merged}, shards...)...)
			mustCLI(t, "finalize", "--config", cfg, "--stats", merged, "-o", c)
			if cb, _ := os.ReadFile(c); !bytes.Equal(ab, cb) {
				t.Errorf("quantize wrote %d bytes, two calibrate shards merged + finalize %d bytes, not identical", len(ab), len(cb))
			}
		})
	}
}

func TestCalibrateUsage(t *testing.T) {
	model := modelPath("mlp.onnx")
	dir := t.TempDir()
	t.Run("random data is marked", func(t *testing.T) {
		out := mustCLI(t, "calibrate", "--model", model, "--preset", "w8a8", "--random-data", "--samples", "5", "--batch-size", "2")
		s, err := calibrate.Read(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		if !s.RandomData || s.Samples != 5 || len(s.Tensors) == 0 || s.ModelSHA256 == "" {
			t.Fatalf("stats: random %t, %d samples, %d tensors, sha %q", s.RandomData, s.Samples, len(s.Tensors), s.ModelSHA256)
		}
	})
	t.Run("weight-only writes empty stats", func(t *testing.T) {
		out := mustCLI(t, "calibrate", "--model", model, "--preset", "w8")
		s, err := calibrate.Read(strings.NewReader(out))
		if err != nil || len(s.Tensors) != 0 {
			t.Fatalf("stats %+v, %v", s, err)
		}
	})
	bad := filepath.Join(dir, "bad.npy")
	if err := npy.WriteNPYFile(bad, tensor.New(tensor.Float, 3, 5)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"shard syntax", []string{"--shard", "4/4", "--random-data"}, "--shard"},
		{"random and data", []string{"--random-data", "--data", bad}, "exclude each other"},
		{"shape checked up front", []string{"--data", bad}, `input "`},
		{"no data", nil, "no calibration data"},
		{"unknown data kind", []string{"--data", model}, "unknown kind of data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"calibrate", "--model", model, "--preset", "w8a8"}, tc.args...)...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q: want exit %d mentioning %q", code, stderr, ExitUsage, tc.want)
			}
		})
	}
}

package calibrate

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// fakeSession computes y = 3·x − 1 elementwise and taps x and y.
type fakeSession struct{ runs int }

func (f *fakeSession) Engine() string { return "fake" }
func (f *fakeSession) Inputs() []runtime.IOInfo {
	return []runtime.IOInfo{{Name: "x", DType: tensor.Float, Shape: []int64{-1, 2, 3}}}
}
func (f *fakeSession) Outputs() []runtime.IOInfo { return nil }
func (f *fakeSession) Close() error              { return nil }
func (f *fakeSession) Run(_ context.Context, in map[string]*tensor.Tensor, opts runtime.RunOptions) (map[string]*tensor.Tensor, error) {
	f.runs++
	x := in["x"]
	y := x.Clone()
	for i, v := range y.Float32s() {
		y.Float32s()[i] = 3*v - 1
	}
	for _, name := range opts.TapValues {
		switch name {
		case "x":
			opts.Tap(name, x)
		case "y":
			opts.Tap(name, y)
		}
	}
	return map[string]*tensor.Tensor{"y": y}, nil
}

func writeCalib(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "calib.npy")
	if err := npy.WriteNPYFile(path, tensor.FromFloat32(data("specials", n*6, 8), n, 2, 3)); err != nil {
		t.Fatal(err)
	}
	return path
}

func planned() []TensorToObserve {
	one := 1
	pc := specWith(spec.Static)
	pc.Granularity = spec.Granularity{Type: spec.PerChannel, Axis: &one}
	return []TensorToObserve{
		{Name: "y", Spec: specWith(spec.Entropy)},
		{Name: "x", Spec: pc},
	}
}

func run(t *testing.T, path string, opts Options) *Stats {
	t.Helper()
	sess := &fakeSession{}
	src, err := OpenNPY(sess.Inputs(), map[string]string{"": path})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	st, err := Calibrate(context.Background(), sess, planned(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestCalibrateBatchSizeAndShards(t *testing.T) {
	path := writeCalib(t, 64)
	one := run(t, path, Options{BatchSize: 1, ModelSHA256: "m"})
	b32 := run(t, path, Options{BatchSize: 32, ModelSHA256: "m"})
	if one.Samples != 64 || one.Batches != 64 || b32.Batches != 2 {
		t.Fatalf("samples %d batches %d / %d", one.Samples, one.Batches, b32.Batches)
	}
	sameHist(t, "batch 1 vs 32", one.Tensor("y").Histogram, b32.Tensor("y").Histogram)
	var shards []*Stats
	for i := range 3 {
		shards = append(shards, run(t, path, Options{BatchSize: 5, Shard: i, Shards: 3, ModelSHA256: "m"}))
	}
	m, err := Merge(shards...)
	if err != nil {
		t.Fatal(err)
	}
	sameHist(t, "shards", m.Tensor("y").Histogram, one.Tensor("y").Histogram)
	if m.Samples != 64 || !slices.Equal(m.Tensor("x").Min, one.Tensor("x").Min) || !slices.Equal(m.Tensor("x").Max, one.Tensor("x").Max) {
		t.Fatalf("merged per-channel %v %v vs %v %v", m.Tensor("x").Min, m.Tensor("x").Max, one.Tensor("x").Min, one.Tensor("x").Max)
	}
	if len(one.Tensor("x").Min) != 2 {
		t.Fatalf("x has %d channels", len(one.Tensor("x").Min))
	}
	for _, name := range []string{"x", "y"} {
		s := planned()[0].Spec
		if name == "x" {
			s = planned()[1].Spec
		}
		r1, r2, err1 := one.Tensor(name).Range(s)
		m1, m2, err2 := m.Tensor(name).Range(s)
		if err1 != nil || err2 != nil || !slices.Equal(r1, m1) || !slices.Equal(r2, m2) {
			t.Fatalf("%s: ranges %v %v vs merged %v %v (%v %v)", name, r1, r2, m1, m2, err1, err2)
		}
	}
	// Samples caps the data before sharding.
	capped := run(t, path, Options{BatchSize: 4, Samples: 10})
	if capped.Samples != 10 || capped.Batches != 3 {
		t.Fatalf("capped: %d samples in %d batches", capped.Samples, capped.Batches)
	}
}

func TestOpenNPYRejects(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.npy")
	if err := npy.WriteNPYFile(bad, tensor.FromFloat32(make([]float32, 8), 2, 4)); err != nil {
		t.Fatal(err)
	}
	sess := &fakeSession{}
	for name, tt := range map[string]struct {
		files map[string]string
		want  string
	}{
		"shape":      {map[string]string{"x": bad}, `input "x"`},
		"not inputs": {map[string]string{"z": bad}, `calibration data ` + bad + ` for "z", which is not a model input (inputs: x)`},
		"missing":    {map[string]string{"x": bad, "z": bad}, `for "z", which is not a model input (inputs: x)`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := OpenNPY(sess.Inputs(), tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCalibrateMissingTensor(t *testing.T) {
	sess := &fakeSession{}
	src, err := NewRandomSource([]runtime.IOInfo{{Name: "x", DType: tensor.Float, Shape: []int64{1, 2, 3}}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Calibrate(context.Background(), sess, []TensorToObserve{{Name: "nope", Spec: specWith(spec.Static)}}, src, Options{})
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("got %v", err)
	}
}

func TestRandomSourceMarked(t *testing.T) {
	sess := &fakeSession{}
	if _, err := NewRandomSource([]runtime.IOInfo{{Name: "x", DType: tensor.Float, Shape: []int64{-1, -1, 3}}}, 4); err == nil || !strings.Contains(err.Error(), "symbolic") {
		t.Fatalf("symbolic dims must be refused: %v", err)
	}
	src, err := NewRandomSource(sess.Inputs(), 8)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Calibrate(context.Background(), sess, planned(), src, Options{BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := Calibrate(context.Background(), sess, planned(), src, Options{BatchSize: 8})
	if !st.RandomData || st.Samples != 8 {
		t.Fatalf("random %v samples %d", st.RandomData, st.Samples)
	}
	sameHist(t, "random batches", st.Tensor("y").Histogram, st1.Tensor("y").Histogram)
}

// TestStatsPlan: the plan a stats file records survives writing and
// reading, a shard calibrated on another plan is not merged, and CheckPlan
// refuses another plan but passes stats that record none.
func TestStatsPlan(t *testing.T) {
	path := writeCalib(t, 12)
	var shards []*Stats
	for i := range 2 {
		st := run(t, path, Options{BatchSize: 4, Shard: i, Shards: 2, ModelSHA256: "m"})
		st.PlanSHA256 = "p1"
		shards = append(shards, st)
	}
	m, err := Merge(shards...)
	if err != nil || m.PlanSHA256 != "p1" {
		t.Fatalf("merged plan %q (%v), want p1", m.PlanSHA256, err)
	}
	var buf bytes.Buffer
	if err := m.Write(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := Read(&buf)
	if err != nil || back.PlanSHA256 != "p1" {
		t.Fatalf("read back plan %q (%v)", back.PlanSHA256, err)
	}
	shards[1].PlanSHA256 = "p2"
	if _, err := Merge(shards...); err == nil || !strings.Contains(err.Error(), "input 2 was calibrated on plan") {
		t.Errorf("merging shards of two plans: %v", err)
	}
	if err := back.CheckPlan("p1"); err != nil {
		t.Errorf("same plan refused: %v", err)
	}
	if err := back.CheckPlan("p2"); err == nil || !strings.Contains(err.Error(), "another plan") {
		t.Errorf("another plan: %v", err)
	}
	back.PlanSHA256 = ""
	if err := back.CheckPlan("p2"); err != nil {
		t.Errorf("stats recording no plan refused: %v", err)
	}
}

//go:build ort

package ort

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func TestLibraryPath(t *testing.T) {
	dir := t.TempDir()
	t.Run("env names a missing file", func(t *testing.T) {
		t.Setenv(LibraryEnv, filepath.Join(dir, "nope.so"))
		_, err := LibraryPath()
		if !errors.Is(err, ErrLibraryNotFound) || !strings.Contains(err.Error(), "ONNXRUNTIME_LIB="+filepath.Join(dir, "nope.so")) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("neither env nor cache", func(t *testing.T) {
		t.Setenv(LibraryEnv, "")
		t.Setenv(CacheEnv, dir)
		_, err := LibraryPath()
		if !errors.Is(err, ErrLibraryNotFound) {
			t.Fatalf("err = %v", err)
		}
		for _, want := range []string{"ONNXRUNTIME_LIB", filepath.Join(dir, Version, libraryFile()), "scripts/fetch-ort.sh"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		if _, err := Default(); !errors.Is(err, ErrLibraryNotFound) {
			t.Errorf("Default: %v", err)
		}
	})
	t.Run("cache", func(t *testing.T) {
		t.Setenv(LibraryEnv, "")
		t.Setenv(CacheEnv, dir)
		p := filepath.Join(dir, Version, libraryFile())
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := LibraryPath()
		if err != nil || got != p {
			t.Fatalf("LibraryPath = %q, %v; want %q", got, err, p)
		}
		// An empty file is no library: loading it must fail, not crash.
		if _, err := Load(p); err == nil {
			t.Fatal("loading an empty file succeeded")
		}
	})
}

func TestAPITable(t *testing.T) {
	typ := reflect.TypeFor[api]()
	seen := map[int]string{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		slot, ok := apiSlots[f.Name]
		if !ok {
			t.Errorf("%s has no slot", f.Name)
			continue
		}
		if other, dup := seen[slot]; dup {
			t.Errorf("slot %d used by %s and %s", slot, other, f.Name)
		}
		seen[slot] = f.Name
		if slot >= apiTableLen {
			t.Errorf("%s: slot %d beyond apiTableLen %d", f.Name, slot, apiTableLen)
		}
	}
	if len(apiSlots) != typ.NumField() {
		t.Errorf("apiSlots has %d entries, api has %d functions", len(apiSlots), typ.NumField())
	}
}

func TestLibrary(t *testing.T) {
	l := testLibrary(t)
	if l.VersionString != Version {
		t.Errorf("library %s reports version %q, want %q", l.Path, l.VersionString, Version)
	}
	// GetAvailableProviders and ReleaseAvailableProviders sit far into the
	// table: a miscounted slot before them shows up here.
	p, err := l.Providers()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p, "CPUExecutionProvider") {
		t.Errorf("providers %v lack CPUExecutionProvider", p)
	}
	again, err := Load(l.Path)
	if err != nil || again != l {
		t.Errorf("second Load = %p, %v; want the same library", again, err)
	}
}

// identity is a model passing x through Identity, with a symbolic batch.
func identity(dt tensor.DType) *testmodels.Builder {
	b := testmodels.New("identity", 21)
	b.Input("x", dt, "N", 3).Output("y", dt, "N", 3)
	b.Node("Identity", "id", []string{"x"}, []string{"y"})
	return b
}

func TestDTypes(t *testing.T) {
	l := testLibrary(t)
	cases := []struct {
		dt   tensor.DType
		data any
	}{
		{tensor.Float, []float32{1.5, -2, 3.25, 0, 1e-8, -7}},
		{tensor.Float16, []uint16{0x3c00, 0xc000, 0x7bff, 0, 1, 0x8001}},
		{tensor.BFloat16, []uint16{0x3f80, 0xc000, 0x7f7f, 0, 1, 0x8001}},
		{tensor.Double, []float64{1.5, -2, 3.25, 0, 1e-300, -7}},
		{tensor.Int64, []int64{1 << 40, -2, 3, 0, -1 << 62, 7}},
		{tensor.Int32, []int32{1 << 30, -2, 3, 0, -1 << 31, 7}},
		{tensor.Int16, []int16{1 << 14, -2, 3, 0, -1 << 15, 7}},
		{tensor.Int8, []int8{127, -128, 3, 0, -1, 7}},
		{tensor.Uint8, []uint8{255, 0, 3, 128, 1, 7}},
		{tensor.Uint16, []uint16{65535, 0, 3, 128, 1, 7}},
		{tensor.Bool, []bool{true, false, true, true, false, false}},
		{tensor.Float8E4M3FN, []uint8{0x38, 0xb8, 0x7e, 0, 1, 0x81}},
	}
	for _, c := range cases {
		t.Run(c.dt.String(), func(t *testing.T) {
			s, err := l.NewSessionFromBytes(modelBytes(t, identity(c.dt)), SessionOptions{IntraOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			in := s.Inputs()
			want := []int64{-1, 3}
			if len(in) != 1 || in[0].Name != "x" || in[0].DType != c.dt || !slices.Equal(in[0].Shape, want) ||
				!slices.Equal(in[0].DimParams, []string{"N", ""}) {
				t.Errorf("inputs = %+v", in)
			}
			if out := s.Outputs(); len(out) != 1 || out[0].Name != "y" || out[0].DType != c.dt {
				t.Errorf("outputs = %+v", out)
			}
			x := &tensor.Tensor{DType: c.dt, Shape: []int{2, 3}, Data: c.data}
			res, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": x}, nil)
			if err != nil {
				t.Fatal(err)
			}
			y := res["y"]
			if y == nil || y.DType != c.dt || !slices.Equal(y.Shape, []int{2, 3}) || !reflect.DeepEqual(y.Data, c.data) {
				t.Errorf("y = %v %v, want %v", y, y.Data, c.data)
			}
		})
	}
}

func TestEmptyAndScalar(t *testing.T) {
	l := testLibrary(t)
	s, err := l.NewSessionFromBytes(modelBytes(t, identity(tensor.Float)), SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": tensor.New(tensor.Float, 0, 3)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if y := res["y"]; !slices.Equal(y.Shape, []int{0, 3}) || y.Len() != 0 {
		t.Errorf("y = %v", y)
	}

	b := testmodels.New("scalar", 17)
	b.Input("a", tensor.Float).Input("b", tensor.Float).Output("c", tensor.Float)
	b.Node("Add", "add", []string{"a", "b"}, []string{"c"})
	s2, err := l.NewSessionFromBytes(modelBytes(t, b), SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	res, err = s2.Run(context.Background(), map[string]*tensor.Tensor{
		"a": tensor.FromFloat32([]float32{1.25}), "b": tensor.FromFloat32([]float32{2})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := res["c"]; len(c.Shape) != 0 || c.Float32s()[0] != 3.25 {
		t.Errorf("c = %v %v", c, c.Data)
	}
}

func TestErrors(t *testing.T) {
	l := testLibrary(t)
	s, err := l.NewSessionFromBytes(modelBytes(t, identity(tensor.Float)), SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	x := tensor.FromFloat32(make([]float32, 6), 2, 3)
	cases := []struct {
		name   string
		inputs map[string]*tensor.Tensor
		names  []string
		want   string
	}{
		{"missing input", map[string]*tensor.Tensor{}, nil, `input "x" (float32) is missing`},
		{"unknown input", map[string]*tensor.Tensor{"x": x, "z": x}, nil, `model has no input "z"`},
		{"unknown output", map[string]*tensor.Tensor{"x": x}, []string{"w"}, `model has no output "w"`},
		{"wrong dtype", map[string]*tensor.Tensor{"x": tensor.FromInt64(make([]int64, 6), 2, 3)}, nil, `input "x": expected float32[N 3], given int64[2 3]`},
		{"wrong shape", map[string]*tensor.Tensor{"x": tensor.FromFloat32(make([]float32, 8), 2, 4)}, nil, `input "x": expected float32[N 3], given float32[2 4]`},
		{"wrong rank", map[string]*tensor.Tensor{"x": tensor.FromFloat32(make([]float32, 6), 6)}, nil, `input "x": expected float32[N 3], given float32[6]`},
		{"short data", map[string]*tensor.Tensor{"x": tensor.FromFloat32(make([]float32, 5), 2, 3)}, nil, "shape [2 3] needs 6 elements, data has 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Run(ctx, c.inputs, c.names)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			var ie *runtime.InputError
			if strings.HasPrefix(c.name, "wrong") && !errors.As(err, &ie) {
				t.Errorf("err %v is no runtime.InputError", err)
			}
		})
	}
	// ONNX Runtime's own run-time errors come back with its message: a
	// Reshape to a size the data does not have.
	t.Run("onnxruntime message", func(t *testing.T) {
		b := testmodels.New("badreshape", 17)
		b.Input("x", tensor.Float, "N", 3).Output("y", tensor.Float, 4)
		b.InitInt64("shape", []int64{1}, []int64{4})
		b.Node("Reshape", "reshape", []string{"x", "shape"}, []string{"y"})
		s2, err := l.NewSessionFromBytes(modelBytes(t, b), SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		_, err = s2.Run(ctx, map[string]*tensor.Tensor{"x": x}, nil)
		var oe *Error
		if !errors.As(err, &oe) || oe.Op != "Run" || !strings.Contains(oe.Msg, "reshape") {
			t.Fatalf("err = %v", err)
		}
		t.Logf("%v", err)
	})
	t.Run("corrupt model", func(t *testing.T) {
		_, err := l.NewSessionFromBytes([]byte("not a model"), SessionOptions{})
		var oe *Error
		if !errors.As(err, &oe) || oe.Op != "CreateSessionFromArray" || oe.Msg == "" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "none.onnx")
		_, err := l.NewSession(p, SessionOptions{})
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "onnxruntime CreateSession") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := l.NewSessionFromBytes(modelBytes(t, identity(tensor.Float)), SessionOptions{IntraOpThreads: -1}); err == nil {
			t.Fatal("negative threads accepted")
		}
		if _, err := l.NewSessionFromBytes(modelBytes(t, identity(tensor.Float)), SessionOptions{Optimization: 9}); err == nil {
			t.Fatal("unknown optimization level accepted")
		}
	})
	t.Run("closed", func(t *testing.T) {
		s2, err := l.NewSessionFromBytes(modelBytes(t, identity(tensor.Float)), SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s2.Close()
		s2.Close()
		if _, err := s2.Run(ctx, map[string]*tensor.Tensor{"x": x}, nil); err == nil {
			t.Fatal("run on a closed session succeeded")
		}
	})
}

// TestSessionOptions runs the small CNN with each optimization level and
// thread setting, from a file, and checks the optimized model is written.
func TestSessionOptions(t *testing.T) {
	l := testLibrary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "cnn.onnx")
	if err := os.WriteFile(path, modelBytes(t, testmodels.CNN()), 0o644); err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.Float, 2, 1, 8, 8)
	for i, v := range x.Float32s() {
		x.Float32s()[i] = float32(i%17)/8 - 1 + v
	}
	in := map[string]*tensor.Tensor{"input": x}
	var ref []float64
	for _, o := range []SessionOptions{
		{Optimization: OptimizeNone, IntraOpThreads: 1},
		{Optimization: OptimizeBasic, IntraOpThreads: 2},
		{Optimization: OptimizeExtended, IntraOpThreads: 1, InterOpThreads: 2, Parallel: true},
		{Optimization: OptimizeAll, OptimizedModelPath: filepath.Join(dir, "opt.onnx")},
	} {
		s, err := l.NewSession(path, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		res, err := s.Run(context.Background(), in, nil)
		s.Close()
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		got := asFloat64(res["logits"])
		if ref == nil {
			ref = got
			continue
		}
		if d, scale := maxAbsDiff(got, ref); d > 1e-5*scale {
			t.Errorf("%+v: max abs diff %g (scale %g)", o, d, scale)
		}
	}
	m, err := onnxgraph.Load(filepath.Join(dir, "opt.onnx"))
	if err != nil {
		t.Fatalf("optimized model: %v", err)
	}
	if len(m.Graph.Nodes) == 0 {
		t.Error("optimized model has no nodes")
	}
}

// chain is a model slow enough to be cancelled mid-run: n MatMuls of d×d.
func chain(n, d int) *testmodels.Builder {
	b := testmodels.New("chain", 17)
	b.Input("x", tensor.Float, d, d).Output("y", tensor.Float, d, d)
	b.RandomInit("w", 1/float32(d), int64(d), int64(d))
	prev := "x"
	for i := range n {
		out := "h" + string(rune('a'+i%26)) + strings.Repeat("_", i/26)
		if i == n-1 {
			out = "y"
		}
		b.Node("MatMul", "", []string{prev, "w"}, []string{out})
		prev = out
	}
	return b
}

func TestCancel(t *testing.T) {
	l := testLibrary(t)
	const d = 512
	s, err := l.NewSessionFromBytes(modelBytes(t, chain(400, d)), SessionOptions{IntraOpThreads: 1, Optimization: OptimizeNone})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := map[string]*tensor.Tensor{"x": tensor.New(tensor.Float, d, d)}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, in, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("pre-cancelled run: %v", err)
	}

	// 400 MatMuls of 512×512 take seconds on one thread; a cancelled run
	// must come back long before.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Run(ctx, in, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run past its deadline: err = %v after %v", err, time.Since(start))
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("cancelled run took %v", el)
	}
}

// TestDroppedSession: a session dropped without Close must not upset the
// garbage collector (a pinned pointer left behind panics at finalization).
func TestDroppedSession(t *testing.T) {
	l := testLibrary(t)
	for range 3 {
		s, err := l.NewSessionFromBytes(modelBytes(t, identity(tensor.Float)), SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(context.Background(), map[string]*tensor.Tensor{"x": tensor.New(tensor.Float, 1, 3)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	goruntime.GC()
	goruntime.GC()
	time.Sleep(10 * time.Millisecond) // finalizers run on their own goroutine
	goruntime.GC()
}

package calibrate

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
	"github.com/coreaiq/coreaiq/pkg/tensor/npy"
)

// twoInputs is a model with a float input x of samples 2×3 and a float16
// input h of samples 4.
var twoInputs = []runtime.IOInfo{
	{Name: "x", DType: tensor.Float, Shape: []int64{-1, 2, 3}},
	{Name: "h", DType: tensor.Float16, Shape: []int64{-1, 4}},
}

// sampleData makes n samples of each input, every element distinct.
func sampleData(n int) map[string]*tensor.Tensor {
	x := tensor.New(tensor.Float, n, 2, 3)
	for i, d := 0, x.Data.([]float32); i < len(d); i++ {
		d[i] = float32(i) - 7.5
	}
	h := tensor.New(tensor.Float16, n, 4)
	for i, d := 0, h.Data.([]uint16); i < len(d); i++ {
		d[i] = tensor.Float32ToFloat16(float32(i) / 4)
	}
	return map[string]*tensor.Tensor{"x": x, "h": h}
}

func npyBytes(t *testing.T, x *tensor.Tensor) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := npy.WriteNPY(&b, x); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// writeNPZ writes arrays as np.savez (method Store) or
// np.savez_compressed (Deflate) would, members in the order of names.
func writeNPZ(t *testing.T, path string, method uint16, names []string, arrays map[string]*tensor.Tensor) {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n + ".npy", Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(npyBytes(t, arrays[n]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sliceRows is rows [a, b) of x, computed independently of the sources.
func sliceRows(x *tensor.Tensor, a, b int) *tensor.Tensor {
	row := tensor.NumElements(x.Shape[1:])
	out := tensor.New(x.DType, append([]int{b - a}, x.Shape[1:]...)...)
	switch d := x.Data.(type) {
	case []float32:
		copy(out.Data.([]float32), d[a*row:b*row])
	case []uint16:
		copy(out.Data.([]uint16), d[a*row:b*row])
	}
	return out
}

// checkBatches reads src in every batch split of the given sizes
// (including reading backwards) and compares with want.
func checkBatches(t *testing.T, src Source, want map[string]*tensor.Tensor, n int) {
	t.Helper()
	if src.Samples() != n {
		t.Fatalf("%d samples, want %d", src.Samples(), n)
	}
	for _, bs := range []int{1, 2, 3, n} {
		for _, start := range []int{0, 1} {
			for s := start; s < n; s += bs {
				e := min(s+bs, n)
				got, err := src.Batch(s, e)
				if err != nil {
					t.Fatalf("batch [%d, %d): %v", s, e, err)
				}
				for name, w := range want {
					if !reflect.DeepEqual(got[name], sliceRows(w, s, e)) {
						t.Fatalf("batch size %d, input %q rows [%d, %d): got %v, want %v", bs, name, s, e, got[name], sliceRows(w, s, e))
					}
				}
			}
		}
	}
	// Going back (a second epoch) must reopen streamed members.
	got, err := src.Batch(0, 1)
	if err != nil || !reflect.DeepEqual(got["x"], sliceRows(want["x"], 0, 1)) {
		t.Fatalf("re-reading sample 0: %v, %v", got["x"], err)
	}
}

func TestNPZSource(t *testing.T) {
	const n = 5
	data := sampleData(n)
	for _, m := range []struct {
		name   string
		method uint16
	}{{"savez", zip.Store}, {"savez_compressed", zip.Deflate}} {
		t.Run(m.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "calib.npz")
			writeNPZ(t, path, m.method, []string{"h", "x"}, data)
			src, err := Open(twoInputs, []string{path}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			checkBatches(t, src, data, n)
		})
	}
}

func TestNPZRejects(t *testing.T) {
	dir := t.TempDir()
	good := sampleData(3)
	bad := map[string]*tensor.Tensor{"x": tensor.New(tensor.Float, 3, 3, 2), "h": good["h"], "y": good["h"],
		"h5": tensor.New(tensor.Float16, 5, 4), "x32": tensor.New(tensor.Double, 3, 2, 3)}
	tests := []struct {
		name  string
		write func(path string)
		want  string
	}{
		{"missing key", func(p string) { writeNPZ(t, p, zip.Store, []string{"x"}, good) }, `input "h"`},
		{"extra key", func(p string) {
			writeNPZ(t, p, zip.Store, []string{"x", "h", "y"}, map[string]*tensor.Tensor{"x": good["x"], "h": good["h"], "y": bad["y"]})
		}, `array "y" is not a model input`},
		{"shape", func(p string) {
			writeNPZ(t, p, zip.Deflate, []string{"x", "h"}, map[string]*tensor.Tensor{"x": bad["x"], "h": good["h"]})
		}, `input "x"`},
		{"dtype", func(p string) {
			writeNPZ(t, p, zip.Store, []string{"x", "h"}, map[string]*tensor.Tensor{"x": bad["x32"], "h": good["h"]})
		}, "the model wants float"},
		{"sample counts", func(p string) {
			writeNPZ(t, p, zip.Store, []string{"x", "h"}, map[string]*tensor.Tensor{"x": good["x"], "h": bad["h5"]})
		}, "5 samples"},
		{"not a zip", func(p string) { os.WriteFile(p, []byte("PK but not really"), 0o644) }, "not an .npz archive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".npz")
			tc.write(p)
			_, err := Open(twoInputs, []string{p}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// writeTestSet writes input_N.pb files of rows [a, b) of data.
func writeTestSet(t *testing.T, dir string, data map[string]*tensor.Tensor, a, b int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, in := range twoInputs {
		tp, err := tensor.ToProto(sliceRows(data[in.Name], a, b), in.Name)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := proto.Marshal(tp)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("input_%d.pb", i)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTestSetSource(t *testing.T) {
	const n = 7
	data := sampleData(n)
	root := t.TempDir()
	// Sets of 1, 2, 1 and 3 samples; set 10 sorts after set 2 by number.
	bounds := []struct {
		name string
		a, b int
	}{{"test_data_set_0", 0, 1}, {"test_data_set_1", 1, 3}, {"test_data_set_2", 3, 4}, {"test_data_set_10", 4, 7}}
	for _, s := range bounds {
		writeTestSet(t, filepath.Join(root, s.name), data, s.a, s.b)
	}
	src, err := Open(twoInputs, []string{root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	checkBatches(t, src, data, n)

	t.Run("one set", func(t *testing.T) {
		src, err := Open(twoInputs, []string{filepath.Join(root, "test_data_set_10")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.Batch(1, 3)
		if err != nil || !reflect.DeepEqual(got["h"], sliceRows(data["h"], 5, 7)) {
			t.Fatalf("got %v, %v", got["h"], err)
		}
	})
	t.Run("rejects", func(t *testing.T) {
		bad := t.TempDir()
		writeTestSet(t, bad, data, 0, 2)
		os.WriteFile(filepath.Join(bad, "input_2.pb"), nil, 0o644)
		if _, err := Open(twoInputs, []string{bad}, nil); err == nil || !strings.Contains(err.Error(), "input_2.pb: the model has 2 inputs") {
			t.Fatalf("extra input file: %v", err)
		}
		os.Remove(filepath.Join(bad, "input_2.pb"))
		os.WriteFile(filepath.Join(bad, "input_1.pb"), []byte{0xff, 0xff}, 0o644)
		if _, err := Open(twoInputs, []string{bad}, nil); err == nil || !strings.Contains(err.Error(), `input "h"`) {
			t.Fatalf("corrupt protobuf: %v", err)
		}
		wrong := []runtime.IOInfo{twoInputs[0], {Name: "h", DType: tensor.Float16, Shape: []int64{-1, 5}}}
		if _, err := Open(wrong, []string{root}, nil); err == nil || !strings.Contains(err.Error(), `input "h"`) || !strings.Contains(err.Error(), "dimension 1") {
			t.Fatalf("shape mismatch: %v", err)
		}
		if _, err := Open(twoInputs, []string{t.TempDir()}, nil); err == nil || !strings.Contains(err.Error(), "test_data_set") {
			t.Fatalf("empty dir: %v", err)
		}
	})
}

func TestOpenMixes(t *testing.T) {
	dir := t.TempDir()
	data := sampleData(4)
	xp, hp := filepath.Join(dir, "x.npy"), filepath.Join(dir, "h.npy")
	os.WriteFile(xp, npyBytes(t, sliceRows(data["x"], 0, 2)), 0o644)
	os.WriteFile(hp, npyBytes(t, sliceRows(data["h"], 0, 2)), 0o644)
	zp := filepath.Join(dir, "rest.npz")
	writeNPZ(t, zp, zip.Deflate, []string{"x", "h"}, map[string]*tensor.Tensor{"x": sliceRows(data["x"], 2, 4), "h": sliceRows(data["h"], 2, 4)})
	// Named .npy files, then an .npz: one stream of 4 samples.
	src, err := Open(twoInputs, []string{"x=" + xp, "h=" + hp, zp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	checkBatches(t, src, data, 4)

	for _, tc := range []struct {
		data []string
		want string
	}{
		{[]string{xp, hp}, "second unnamed"},
		{[]string{"x=" + xp, "x=" + hp}, `input "x" given twice`},
		{[]string{"x=" + zp}, "drop"},
		{[]string{filepath.Join(dir, "calib.txt")}, "no such file"},
		{nil, "no calibration data"},
	} {
		if _, err := Open(twoInputs, tc.data, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%v): %v, want %q", tc.data, err, tc.want)
		}
	}
}

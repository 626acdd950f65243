//go:build ort

package ort

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// testLibrary loads the library the package would use. Tests built with
// the ort tag are meant to run against it (make test-ort fetches it), so
// its absence fails rather than skips.
func testLibrary(t testing.TB) *Library {
	t.Helper()
	l, err := Default()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return l
}

// modelOf turns a test model builder into a loaded model.
func modelOf(t testing.TB, b *testmodels.Builder) *onnxgraph.Model {
	t.Helper()
	m, err := onnxgraph.FromProto(b.Model, "")
	if err != nil {
		t.Fatalf("build model: %v", err)
	}
	return m
}

func modelBytes(t testing.TB, b *testmodels.Builder) []byte {
	t.Helper()
	raw, err := proto.Marshal(b.Model)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

var npyHeader = regexp.MustCompile(`'descr':\s*'([<|=>]?)([a-z?]\d*)'.*'fortran_order':\s*(True|False).*'shape':\s*\(([^)]*)\)`)

// readNPY reads the little-endian, C-order .npy files of the shared model
// folder: enough for the parity tests, which must not depend on the
// project's own .npy reader being correct.
func readNPY(path string) (*tensor.Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 10 || string(b[1:6]) != "NUMPY" {
		return nil, fmt.Errorf("%s: not a .npy file", path)
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:])), 10
	default:
		hlen, start = int(binary.LittleEndian.Uint32(b[8:])), 12
	}
	m := npyHeader.FindStringSubmatch(string(b[start : start+hlen]))
	if m == nil || m[1] == ">" || m[3] == "True" {
		return nil, fmt.Errorf("%s: unsupported header %q", path, b[start:start+hlen])
	}
	var shape []int
	for _, f := range strings.Split(m[4], ",") {
		if f = strings.TrimSpace(f); f != "" {
			d, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%s: shape %q", path, m[4])
			}
			shape = append(shape, d)
		}
	}
	dts := map[string]tensor.DType{"f4": tensor.Float, "f2": tensor.Float16, "f8": tensor.Double, "i8": tensor.Int64,
		"i4": tensor.Int32, "i1": tensor.Int8, "u1": tensor.Uint8, "b1": tensor.Bool, "?": tensor.Bool}
	dt, ok := dts[m[2]]
	if !ok {
		return nil, fmt.Errorf("%s: dtype %q", path, m[2])
	}
	t := tensor.New(dt, shape...)
	dst, n, size := dataView(t.Data)
	body := b[start+hlen:]
	if len(body) != n*size {
		return nil, fmt.Errorf("%s: %d data bytes for %v %s", path, len(body), shape, dt)
	}
	if n > 0 {
		copy(unsafeBytes(dst, n*size), body)
	}
	return t, nil
}

// asFloat64 widens a float tensor for comparisons.
func asFloat64(t *tensor.Tensor) []float64 {
	switch d := t.Data.(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	case []uint16:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(tensor.Float16ToFloat32(v))
		}
		return out
	case []int64:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	}
	panic(fmt.Sprintf("asFloat64: %T", t.Data))
}

// maxAbsDiff returns max |got-ref| and the largest finite |ref|. Equal
// infinities and NaN against NaN match; any other non-finite mismatch is
// an infinite difference, so that it cannot pass a tolerance.
func maxAbsDiff(got, ref []float64) (diff, scale float64) {
	for i := range ref {
		g, r := got[i], ref[i]
		switch {
		case g == r, math.IsNaN(g) && math.IsNaN(r):
		case math.IsNaN(g) || math.IsNaN(r) || math.IsInf(g, 0) || math.IsInf(r, 0):
			diff = math.Inf(1)
		default:
			diff = math.Max(diff, math.Abs(g-r))
		}
		if !math.IsInf(r, 0) && !math.IsNaN(r) {
			scale = math.Max(scale, math.Abs(r))
		}
	}
	return diff, scale
}

func TestMaxAbsDiff(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	cases := []struct {
		name       string
		got, ref   []float64
		diff, scal float64
	}{
		{"finite", []float64{1, -2.5}, []float64{1.5, -2}, 0.5, 2},
		{"equal infinities", []float64{-inf, 3}, []float64{-inf, 3}, 0, 3},
		{"both NaN", []float64{nan, 1}, []float64{nan, 1}, 0, 1},
		{"NaN against number", []float64{nan, 1}, []float64{0, 1}, inf, 1},
		{"number against infinity", []float64{1e30}, []float64{inf}, inf, 0},
		{"opposite infinities", []float64{inf}, []float64{-inf}, inf, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, s := maxAbsDiff(c.got, c.ref)
			if d != c.diff || s != c.scal {
				t.Errorf("maxAbsDiff = %g, %g; want %g, %g", d, s, c.diff, c.scal)
			}
		})
	}
}

package npy

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func sample() []*tensor.Tensor {
	return []*tensor.Tensor{
		tensor.FromFloat32([]float32{1, -2, float32(math.Inf(1)), 0.5, 3, 4}, 2, 3),
		{DType: tensor.Double, Shape: []int{2}, Data: []float64{0.1, -1e300}},
		{DType: tensor.Float16, Shape: []int{3}, Data: []uint16{0x3C00, 0xC000, 0x7BFF}},
		tensor.FromInt64([]int64{-1, 1 << 62}, 2, 1),
		{DType: tensor.Int32, Shape: []int{1}, Data: []int32{-7}},
		{DType: tensor.Int16, Shape: []int{2}, Data: []int16{-300, 300}},
		{DType: tensor.Int8, Shape: []int{2}, Data: []int8{-128, 127}},
		{DType: tensor.Uint8, Shape: []int{2}, Data: []uint8{0, 255}},
		{DType: tensor.Uint16, Shape: []int{1}, Data: []uint16{65535}},
		{DType: tensor.Uint32, Shape: []int{1}, Data: []uint32{1 << 31}},
		{DType: tensor.Uint64, Shape: []int{1}, Data: []uint64{1 << 63}},
		{DType: tensor.Bool, Shape: []int{3}, Data: []bool{true, false, true}},
		{DType: tensor.Complex64, Shape: []int{1}, Data: []complex64{complex(1, -1)}},
		{DType: tensor.Complex128, Shape: []int{1}, Data: []complex128{complex(2, 3)}},
		tensor.FromFloat32([]float32{7}),          // scalar
		tensor.FromFloat32([]float32{}, 0, 4),     // empty
		tensor.FromFloat32([]float32{1, 2}, 1, 2), // leading 1
	}
}

func same(a, b *tensor.Tensor) bool {
	if a.DType != b.DType || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	if a.DType == tensor.Bool {
		return reflect.DeepEqual(a.Data, b.Data)
	}
	return bytes.Equal(tensor.ByteView(a.Data), tensor.ByteView(b.Data))
}

// streamOnly hides Len so that ReadNPY takes the unknown-length path.
type streamOnly struct{ r io.Reader }

func (s streamOnly) Read(p []byte) (int, error) { return s.r.Read(p) }

func TestRoundTrip(t *testing.T) {
	var golden bytes.Buffer
	for _, want := range sample() {
		t.Run(want.String(), func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteNPY(&buf, want); err != nil {
				t.Fatal(err)
			}
			if buf.Len()%64 != 0 && want.Len() == 0 {
				t.Errorf("empty array file is %d bytes, not 64-aligned", buf.Len())
			}
			hlen := int(binary.LittleEndian.Uint16(buf.Bytes()[8:]))
			golden.WriteString(strconv.Quote(string(buf.Bytes()[:10+hlen])) + "\n")
			for name, r := range map[string]io.Reader{"sized": bytes.NewReader(buf.Bytes()), "stream": streamOnly{bytes.NewReader(buf.Bytes())}} {
				got, err := ReadNPY(r)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !same(got, want) {
					t.Fatalf("%s: got %s %v, want %s %v", name, got, got.Data, want, want.Data)
				}
			}
		})
	}
	testutil.Golden(t, filepath.Join("testdata", "headers_golden.txt"), golden.Bytes())
}

// npyFile builds a .npy file by hand: version, header dictionary, data.
func npyFile(major byte, dict string, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(magic)
	b.WriteByte(major)
	b.WriteByte(0)
	if major == 1 {
		binary.Write(&b, binary.LittleEndian, uint16(len(dict)))
	} else {
		binary.Write(&b, binary.LittleEndian, uint32(len(dict)))
	}
	b.WriteString(dict)
	b.Write(data)
	return b.Bytes()
}

func TestReadVariants(t *testing.T) {
	le := []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0x40} // 1, 2 little-endian f4
	be := []byte{0x3F, 0x80, 0, 0, 0x40, 0, 0, 0} // 1, 2 big-endian f4
	be8 := []byte{0, 0, 0, 0, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE}
	cases := []struct {
		name string
		file []byte
		want *tensor.Tensor
	}{
		{"v1", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", le), tensor.FromFloat32([]float32{1, 2}, 2)},
		{"v2", npyFile(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }\n", le), tensor.FromFloat32([]float32{1, 2}, 1, 2)},
		{"v3 double quotes", npyFile(3, `{"descr": "<f4", "fortran_order": False, "shape": (2,)}`, le), tensor.FromFloat32([]float32{1, 2}, 2)},
		{"big-endian f4", npyFile(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be), tensor.FromFloat32([]float32{1, 2}, 2)},
		{"big-endian i8", npyFile(1, "{'descr': '>i8', 'fortran_order': False, 'shape': (2,), }", be8), tensor.FromInt64([]int64{1, -2}, 2)},
		{"python2 long dims", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }", le), tensor.FromFloat32([]float32{1, 2}, 2)},
		{"fortran 1-D", npyFile(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", le), tensor.FromFloat32([]float32{1, 2}, 2)},
		{"fortran trivially 1-D", npyFile(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }", le), tensor.FromFloat32([]float32{1, 2}, 1, 2)},
		{"key order", npyFile(1, "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}", le), tensor.FromFloat32([]float32{1, 2}, 2)},
		{"bool bytes", npyFile(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", []byte{0, 1, 7}), &tensor.Tensor{DType: tensor.Bool, Shape: []int{3}, Data: []bool{false, true, true}}},
		{"trailing bytes ignored", npyFile(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", []byte{5, 6}), &tensor.Tensor{DType: tensor.Uint8, Shape: []int{1}, Data: []uint8{5}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{bytes.NewReader(tc.file), streamOnly{bytes.NewReader(tc.file)}} {
				got, err := ReadNPY(r)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, tc.want) {
					t.Fatalf("got %s %v, want %s %v", got, got.Data, tc.want, tc.want.Data)
				}
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	huge := npyFile(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }", make([]byte, 64))
	cases := []struct {
		name string
		file []byte
		msg  string
	}{
		{"empty", nil, "not a .npy file"},
		{"bad magic", []byte("PK\x03\x04 zip file......"), "bad magic"},
		{"version", npyFile(4, "{}", nil), "version 4.0"},
		{"short header", npyFile(1, "{'descr'", nil)[:15], "header"},
		{"fortran 2-D", npyFile(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", make([]byte, 16)), "Fortran"},
		{"structured", npyFile(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", make([]byte, 4)), "structured"},
		{"unicode", npyFile(1, "{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", make([]byte, 12)), "unsupported dtype"},
		{"object", npyFile(1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", make([]byte, 8)), "unsupported dtype"},
		{"missing key", npyFile(1, "{'descr': '<f4', 'shape': (1,), }", make([]byte, 4)), "fortran_order"},
		{"unknown key", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", make([]byte, 4)), "unknown key"},
		{"negative dim", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", nil), "non-negative"},
		{"truncated data", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", make([]byte, 8)), "only 8 bytes follow"},
		{"huge declared", huge, "only 64 bytes follow"},
		{"overflowing dims", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", nil), "out of range"},
		{"too many elements", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }", nil), "2^48"},
		{"header limit", npyFile(2, "", nil)[:8], "header length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{bytes.NewReader(tc.file), streamOnly{bytes.NewReader(tc.file)}} {
				_, err := ReadNPY(r)
				if err == nil || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("err = %v, want one containing %q", err, tc.msg)
				}
			}
		})
	}
	big := npyFile(2, "", nil)[:8]
	big = append(big, 0xFF, 0xFF, 0xFF, 0x7F)
	if _, err := ReadNPY(bytes.NewReader(big)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("2 GiB header: err = %v", err)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.npy")
	want := tensor.FromFloat32([]float32{1, 2, 3}, 3)
	if err := WriteNPYFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNPYFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !same(got, want) {
		t.Fatalf("got %v", got.Data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	// A failed write leaves the existing file alone and no temp file.
	bad := &tensor.Tensor{DType: tensor.Int4, Shape: []int{1}, Data: []int8{1}}
	if err := WriteNPYFile(path, bad); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("writing int4: err = %v, want an error naming %s", err, path)
	}
	if got, err := ReadNPYFile(path); err != nil || !same(got, want) {
		t.Fatalf("failed write changed the file: %v", err)
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind after a failed write: %v", entries)
	}
	// Truncated file: the error names it.
	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)-1], 0o644)
	if _, err := ReadNPYFile(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "only 11 bytes follow") {
		t.Fatalf("truncated file: err = %v", err)
	}
	if err := WriteNPY(io.Discard, &tensor.Tensor{DType: tensor.Float, Shape: []int{2}, Data: []float32{1}}); err == nil {
		t.Error("writing a tensor whose data does not match its shape succeeded")
	}
}

// TestSharedModels reads every .npy of the shared model set and checks it
// against the file: element count and payload size, finite values, and a
// byte-identical rewrite (numpy's header layout).
func TestSharedModels(t *testing.T) {
	root := testutil.SharedModels(t)
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.npy"))
	more, _ := filepath.Glob(filepath.Join(root, "*", "ref", "*.npy"))
	out, _ := filepath.Glob(filepath.Join(root, "*", "ref", "out", "*.npy"))
	files = append(append(files, more...), out...)
	if len(files) == 0 {
		t.Skipf("no .npy files under %s", root)
	}
	counts := map[tensor.DType]int{}
	for _, path := range files {
		got, err := ReadNPYFile(path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		counts[got.DType]++
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := ReadHeader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(raw))-h.DataOffset != int64(got.Len()*got.DType.ElemSize()) {
			t.Errorf("%s: %s from %d data bytes", path, got, int64(len(raw))-h.DataOffset)
		}
		switch got.DType {
		case tensor.Float:
			for i, v := range got.Float32s() {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Errorf("%s: element %d is %g", path, i, v)
					break
				}
			}
		case tensor.Int64:
		default:
			t.Errorf("%s: unexpected dtype %s", path, got.DType)
		}
		var buf bytes.Buffer
		if err := WriteNPY(&buf, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), raw) {
			t.Errorf("%s: rewriting %s does not reproduce numpy's bytes", path, got)
		}
	}
	t.Logf("%d files read: %v", len(files), counts)
}

// FuzzReadNPY: arbitrary bytes never panic; whatever reads must write and
// read back to the same tensor.
func FuzzReadNPY(f *testing.F) {
	for _, tt := range sample() {
		var buf bytes.Buffer
		if err := WriteNPY(&buf, tt); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ReadNPY(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteNPY(&buf, got); err != nil {
			t.Fatalf("%s read but does not write: %v", got, err)
		}
		again, err := ReadNPY(&buf)
		if err != nil || !same(got, again) {
			t.Fatalf("round trip of %s failed: %v", got, err)
		}
	})
}

// TestFuzzSeeds keeps the committed FuzzReadNPY corpus (COREAIQ_UPDATE_GOLDEN=1
// rewrites it): every sample, a big-endian file, a v2 file and a truncated one.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReadNPY")
	seed := func(name string, b []byte) {
		testutil.Golden(t, filepath.Join(dir, name), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(b))+")\n"))
	}
	for i, tt := range sample() {
		var buf bytes.Buffer
		if err := WriteNPY(&buf, tt); err != nil {
			t.Fatal(err)
		}
		seed(strconv.Itoa(i)+"-"+tt.DType.String(), buf.Bytes())
		if i == 0 {
			seed("truncated", buf.Bytes()[:buf.Len()-2])
		}
	}
	seed("big-endian", npyFile(1, "{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", []byte{0, 0, 0, 0, 0, 0, 0, 1}))
	seed("v2", npyFile(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }\n", make([]byte, 8)))
}

// BenchmarkReadNPYFile reads a 64 MiB float32 file.
func BenchmarkReadNPYFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.npy")
	const n = 16 << 20
	if err := WriteNPYFile(path, tensor.FromFloat32(make([]float32, n), n)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4 * n)
	for b.Loop() {
		if _, err := ReadNPYFile(path); err != nil {
			b.Fatal(err)
		}
	}
}

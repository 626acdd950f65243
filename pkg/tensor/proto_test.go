package tensor

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// sameTensor compares dtype, shape and element bits (NaN payloads included).
func sameTensor(a, b *Tensor) bool {
	if a.DType != b.DType || !reflect.DeepEqual(append([]int{}, a.Shape...), append([]int{}, b.Shape...)) {
		return false
	}
	if a.DType == String || a.DType == Bool {
		return reflect.DeepEqual(a.Data, b.Data)
	}
	return bytes.Equal(ByteView(a.Data), ByteView(b.Data))
}

// TestONNXBackendData decodes every .pb of the ONNX backend test data. Files
// whose graph input/output is a sequence, optional or map are counted as
// non-tensors; every other file must decode, and node-test tensors must
// survive ToProto → FromProto unchanged.
func TestONNXBackendData(t *testing.T) {
	root := testutil.RequireONNXTestData(t)
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".pb") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no .pb files under %s", root)
	}
	sort.Strings(files)
	models := map[string]*onnxpb.ModelProto{}
	var decoded, nonTensor, roundTripped int
	dtypes := map[DType]int{}
	for _, path := range files {
		kind, err := declaredKind(models, path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if kind != "tensor" {
			nonTensor++
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var tp onnxpb.TensorProto
		if err := proto.Unmarshal(data, &tp); err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		got, err := FromProto(&tp, nil)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		decoded++
		dtypes[got.DType]++
		if got.Len() != dataLen(got.Data) {
			t.Errorf("%s: %s holds %d elements", path, got, dataLen(got.Data))
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasPrefix(rel, "node"+string(filepath.Separator)) {
			continue
		}
		tp2, err := ToProto(got, tp.GetName())
		if err != nil {
			t.Errorf("%s: ToProto: %v", path, err)
			continue
		}
		wire, err := proto.Marshal(tp2)
		if err != nil {
			t.Fatal(err)
		}
		var tp3 onnxpb.TensorProto
		if err := proto.Unmarshal(wire, &tp3); err != nil {
			t.Fatal(err)
		}
		again, err := FromProto(&tp3, nil)
		if err != nil {
			t.Errorf("%s: decoding re-encoded tensor: %v", path, err)
			continue
		}
		if !sameTensor(got, again) {
			t.Errorf("%s: %s changed in a ToProto/FromProto round trip", path, got)
		}
		roundTripped++
	}
	var seen []string
	for dt, n := range dtypes {
		seen = append(seen, fmt.Sprintf("%s:%d", dt, n))
	}
	sort.Strings(seen)
	t.Logf("%d .pb files: %d tensors decoded (%d node tensors round-tripped), %d non-tensor (sequence/optional/map)",
		len(files), decoded, roundTripped, nonTensor)
	t.Logf("dtypes: %s", strings.Join(seen, " "))
	if decoded+nonTensor != len(files) && !t.Failed() {
		t.Errorf("%d files unaccounted for", len(files)-decoded-nonTensor)
	}
}

// declaredKind returns "tensor", "sequence", "optional" or "map" for a test
// data file input_<i>.pb / output_<i>.pb from the type of the model's i-th
// graph input or output. Files without a readable model count as tensors.
func declaredKind(models map[string]*onnxpb.ModelProto, path string) (string, error) {
	caseDir := filepath.Dir(filepath.Dir(path))
	m, ok := models[caseDir]
	if !ok {
		data, err := os.ReadFile(filepath.Join(caseDir, "model.onnx"))
		if err == nil {
			m = &onnxpb.ModelProto{}
			if err := proto.Unmarshal(data, m); err != nil {
				return "", fmt.Errorf("model.onnx: %w", err)
			}
		}
		models[caseDir] = m
	}
	if m == nil {
		return "tensor", nil
	}
	base := strings.TrimSuffix(filepath.Base(path), ".pb")
	var list []*onnxpb.ValueInfoProto
	var idx int
	switch {
	case strings.HasPrefix(base, "input_"):
		// Inputs that are initializers (older IR) are not fed by test data.
		inits := map[string]bool{}
		for _, init := range m.GetGraph().GetInitializer() {
			inits[init.GetName()] = true
		}
		for _, vi := range m.GetGraph().GetInput() {
			if !inits[vi.GetName()] {
				list = append(list, vi)
			}
		}
		if _, err := fmt.Sscanf(base, "input_%d", &idx); err != nil {
			return "", err
		}
	case strings.HasPrefix(base, "output_"):
		list = m.GetGraph().GetOutput()
		if _, err := fmt.Sscanf(base, "output_%d", &idx); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("unexpected test data file name")
	}
	if idx >= len(list) {
		return "", fmt.Errorf("model declares %d values, file is number %d", len(list), idx)
	}
	typ := list[idx].GetType()
	switch {
	case typ.GetSequenceType() != nil:
		return "sequence", nil
	case typ.GetOptionalType() != nil:
		return "optional", nil
	case typ.GetMapType() != nil:
		return "map", nil
	}
	return "tensor", nil
}

// goldenTensors has one small tensor per dtype with edge values.
func goldenTensors() []*Tensor {
	return []*Tensor{
		{Float, []int{2, 2}, []float32{1, -2.5, 3.4028235e38, 1e-45}},
		{Uint8, []int{3}, []uint8{0, 7, 255}},
		{Int8, []int{3}, []int8{-128, 0, 127}},
		{Uint16, []int{2}, []uint16{1, 65535}},
		{Int16, []int{2}, []int16{-32768, 32767}},
		{Int32, []int{2}, []int32{-2147483648, 2147483647}},
		{Int64, []int{2}, []int64{-9223372036854775808, 1}},
		{String, []int{2}, []string{"a", "ünï"}},
		{Bool, []int{3}, []bool{true, false, true}},
		{Float16, []int{3}, []uint16{0x3C00, 0xC000, 0x7BFF}},
		{Double, []int{2}, []float64{1.5, -1e300}},
		{Uint32, []int{2}, []uint32{0, 4294967295}},
		{Uint64, []int{2}, []uint64{0, 18446744073709551615}},
		{Complex64, []int{2}, []complex64{complex(1, -2), complex(0.5, 3)}},
		{Complex128, []int{1}, []complex128{complex(1, -2)}},
		{BFloat16, []int{2}, []uint16{0x3F80, 0xC020}},
		{Float8E4M3FN, []int{3}, []uint8{0x38, 0x7E, 0xFE}},
		{Float8E4M3FNUZ, []int{2}, []uint8{0x40, 0x80}},
		{Float8E5M2, []int{3}, []uint8{0x3C, 0x7B, 0x7C}},
		{Float8E5M2FNUZ, []int{2}, []uint8{0x40, 0xFF}},
		{Uint4, []int{3}, []uint8{1, 15, 7}},
		{Int4, []int{3, 4}, []int8{1, 2, 3, 5, -8, -6, 3, 4, 4, 5, 5, 7}},
		{Float4E2M1, []int{5}, []uint8{0x1, 0x7, 0xF, 0x8, 0x2}},
		{Float8E8M0, []int{2}, []uint8{127, 0xFF}},
		{Uint2, []int{5}, []uint8{0, 1, 2, 3, 1}},
		{Int2, []int{6}, []int8{-2, -1, 0, 1, 1, -2}},
		{Float, []int{0, 3}, []float32{}},
		{Int4, []int{}, []int8{-1}},
	}
}

// TestRawGolden pins the raw_data bytes of every dtype and decodes them back.
func TestRawGolden(t *testing.T) {
	var buf bytes.Buffer
	for _, want := range goldenTensors() {
		tp, err := ToProto(want, "x")
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if want.DType == String {
			fmt.Fprintf(&buf, "%s %v string_data %q\n", want.DType, want.Shape, tp.StringData)
		} else {
			fmt.Fprintf(&buf, "%s %v raw_data %s\n", want.DType, want.Shape, hex.EncodeToString(tp.RawData))
		}
		got, err := FromProto(tp, nil)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if !sameTensor(got, want) {
			t.Errorf("%s: decoded %v, want %v", want, got.Data, want.Data)
		}
	}
	testutil.Golden(t, filepath.Join("testdata", "raw_golden.txt"), buf.Bytes())
}

// TestPack4ONNXGolden is ONNX's test_quantizelinear_int4 output, packed.
func TestPack4ONNXGolden(t *testing.T) {
	y := []int8{1, 2, 3, 5, -8, -6, 3, 4, 4, 5, 5, 7}
	want := []byte{33, 83, 168, 67, 84, 117}
	if got := Pack4(y); !bytes.Equal(got, want) {
		t.Fatalf("Pack4 = %v, want %v", got, want)
	}
	if got := Unpack4Signed(want, len(y)); !reflect.DeepEqual(got, y) {
		t.Fatalf("Unpack4Signed = %v, want %v", got, y)
	}
	// The same bytes in int32_data, one packed byte per int32.
	tp := &onnxpb.TensorProto{Name: proto.String("y"), DataType: proto.Int32(int32(Int4)), Dims: []int64{3, 4},
		Int32Data: []int32{33, 83, 168, 67, 84, 117}}
	got, err := FromProto(tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Data, y) {
		t.Fatalf("int32_data decodes to %v, want %v", got.Data, y)
	}
}

func TestPackOddAndUnsigned(t *testing.T) {
	u := []uint8{15, 0, 9}
	if got := Pack4(u); !bytes.Equal(got, []byte{0x0F, 0x09}) {
		t.Errorf("Pack4(%v) = %x", u, got)
	}
	if got := Unpack4([]byte{0x0F, 0x09}, 3); !reflect.DeepEqual(got, u) {
		t.Errorf("Unpack4 = %v", got)
	}
	s2 := []int8{-2, -1, 0, 1, 1}
	packed := Pack2(s2)
	if !bytes.Equal(packed, []byte{0b01_00_11_10, 0b01}) {
		t.Errorf("Pack2(%v) = %08b", s2, packed)
	}
	if got := Unpack2Signed(packed, 5); !reflect.DeepEqual(got, s2) {
		t.Errorf("Unpack2Signed = %v", got)
	}
	if got := Unpack2(packed, 5); !reflect.DeepEqual(got, []uint8{2, 3, 0, 1, 1}) {
		t.Errorf("Unpack2 = %v", got)
	}
}

// TestTypedFields decodes each typed field ONNX allows and compares with
// the raw_data decoding of the same values.
func TestTypedFields(t *testing.T) {
	mk := func(dt DType, dims []int64, set func(*onnxpb.TensorProto)) *onnxpb.TensorProto {
		tp := &onnxpb.TensorProto{Name: proto.String("t"), DataType: proto.Int32(int32(dt)), Dims: dims}
		set(tp)
		return tp
	}
	cases := []struct {
		name string
		tp   *onnxpb.TensorProto
		want *Tensor
	}{
		{"float", mk(Float, []int64{2}, func(tp *onnxpb.TensorProto) { tp.FloatData = []float32{1, 2} }),
			&Tensor{Float, []int{2}, []float32{1, 2}}},
		{"float16 unsigned bits", mk(Float16, []int64{2}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{15360, 0xC000} }),
			&Tensor{Float16, []int{2}, []uint16{0x3C00, 0xC000}}},
		{"bfloat16", mk(BFloat16, []int64{1}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0x3F80} }),
			&Tensor{BFloat16, []int{1}, []uint16{0x3F80}}},
		{"int8 signed", mk(Int8, []int64{2}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{-128, 127} }),
			&Tensor{Int8, []int{2}, []int8{-128, 127}}},
		{"int16 signed", mk(Int16, []int64{1}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{-300} }),
			&Tensor{Int16, []int{1}, []int16{-300}}},
		{"uint8", mk(Uint8, []int64{1}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{200} }),
			&Tensor{Uint8, []int{1}, []uint8{200}}},
		{"float8", mk(Float8E4M3FN, []int64{2}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0x38, 0xFE} }),
			&Tensor{Float8E4M3FN, []int{2}, []uint8{0x38, 0xFE}}},
		{"bool", mk(Bool, []int64{2}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{1, 0} }),
			&Tensor{Bool, []int{2}, []bool{true, false}}},
		{"uint4 odd", mk(Uint4, []int64{3}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0xF1, 0x07} }),
			&Tensor{Uint4, []int{3}, []uint8{1, 15, 7}}},
		{"float4", mk(Float4E2M1, []int64{2}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0x71} }),
			&Tensor{Float4E2M1, []int{2}, []uint8{1, 7}}},
		{"int2", mk(Int2, []int64{5}, func(tp *onnxpb.TensorProto) { tp.Int32Data = []int32{0b01_00_11_10, 0b01} }),
			&Tensor{Int2, []int{5}, []int8{-2, -1, 0, 1, 1}}},
		{"int64", mk(Int64, []int64{1}, func(tp *onnxpb.TensorProto) { tp.Int64Data = []int64{-5} }),
			&Tensor{Int64, []int{1}, []int64{-5}}},
		{"uint32", mk(Uint32, []int64{1}, func(tp *onnxpb.TensorProto) { tp.Uint64Data = []uint64{4294967295} }),
			&Tensor{Uint32, []int{1}, []uint32{4294967295}}},
		{"uint64", mk(Uint64, []int64{1}, func(tp *onnxpb.TensorProto) { tp.Uint64Data = []uint64{1 << 63} }),
			&Tensor{Uint64, []int{1}, []uint64{1 << 63}}},
		{"double", mk(Double, []int64{1}, func(tp *onnxpb.TensorProto) { tp.DoubleData = []float64{0.1} }),
			&Tensor{Double, []int{1}, []float64{0.1}}},
		{"complex64 interleaved", mk(Complex64, []int64{2}, func(tp *onnxpb.TensorProto) { tp.FloatData = []float32{1, 2, 3, 4} }),
			&Tensor{Complex64, []int{2}, []complex64{complex(1, 2), complex(3, 4)}}},
		{"complex128", mk(Complex128, []int64{1}, func(tp *onnxpb.TensorProto) { tp.DoubleData = []float64{1, -1} }),
			&Tensor{Complex128, []int{1}, []complex128{complex(1, -1)}}},
		{"string", mk(String, []int64{2}, func(tp *onnxpb.TensorProto) { tp.StringData = [][]byte{[]byte("a"), {}} }),
			&Tensor{String, []int{2}, []string{"a", ""}}},
		{"scalar", mk(Float, nil, func(tp *onnxpb.TensorProto) { tp.RawData = []byte{0, 0, 0x80, 0x3F} }),
			&Tensor{Float, []int{}, []float32{1}}},
		{"empty", mk(Int64, []int64{0, 5}, func(*onnxpb.TensorProto) {}),
			&Tensor{Int64, []int{0, 5}, []int64{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromProto(tc.tp, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !sameTensor(got, tc.want) {
				t.Fatalf("got %s %v, want %s %v", got, got.Data, tc.want, tc.want.Data)
			}
		})
	}
}

type fakeExternal struct {
	data []byte
	err  error
}

func (f fakeExternal) ReadExternal(*onnxpb.TensorProto) ([]byte, error) { return f.data, f.err }

func TestExternal(t *testing.T) {
	tp := &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(Int4)), Dims: []int64{3},
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()}
	got, err := FromProto(tp, fakeExternal{data: []byte{0x21, 0x03}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Data, []int8{1, 2, 3}) {
		t.Fatalf("got %v", got.Data)
	}
	if _, err := FromProto(tp, nil); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("nil reader: err = %v, want an error naming the tensor", err)
	}
	if _, err := FromProto(tp, fakeExternal{data: []byte{1}}); err == nil {
		t.Fatal("short external data accepted")
	}
}

// TestFromProtoErrors checks that malformed tensors are errors naming the tensor.
func TestFromProtoErrors(t *testing.T) {
	cases := []struct {
		name string
		tp   *onnxpb.TensorProto
		msg  string
	}{
		{"short raw", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{4}, RawData: make([]byte, 15)}, "needs 16 bytes"},
		{"long raw", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{4}, RawData: make([]byte, 17)}, "needs 16 bytes"},
		{"int4 raw", &onnxpb.TensorProto{DataType: proto.Int32(22), Dims: []int64{3}, RawData: make([]byte, 1)}, "needs 2 bytes"},
		{"short float_data", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{2}, FloatData: []float32{1}}, "needs 2 values"},
		{"complex count", &onnxpb.TensorProto{DataType: proto.Int32(14), Dims: []int64{2}, FloatData: []float32{1, 2}}, "needs 4 values"},
		{"no data", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{2}}, "no data"},
		{"two fields", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1}, RawData: make([]byte, 4), FloatData: []float32{1}}, "both raw_data and float_data"},
		{"wrong field", &onnxpb.TensorProto{DataType: proto.Int32(7), Dims: []int64{1}, FloatData: []float32{1}}, "ONNX stores int64 in int64_data"},
		{"bad dtype", &onnxpb.TensorProto{DataType: proto.Int32(99), Dims: []int64{1}}, "unknown data_type 99"},
		{"undefined", &onnxpb.TensorProto{Dims: []int64{1}}, "unknown data_type 0"},
		{"negative dim", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{-1}}, "negative dimension"},
		{"huge", &onnxpb.TensorProto{DataType: proto.Int32(1), Dims: []int64{1 << 40, 1 << 40}}, "more than 2^48"},
		{"string raw", &onnxpb.TensorProto{DataType: proto.Int32(8), Dims: []int64{1}, RawData: []byte("a")}, "string_data"},
		{"segment", &onnxpb.TensorProto{DataType: proto.Int32(1), Segment: &onnxpb.TensorProto_Segment{}}, "segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.tp.Name = proto.String("bad_" + strings.ReplaceAll(tc.name, " ", "_"))
			for _, from := range []func(*onnxpb.TensorProto, ExternalReader) (*Tensor, error){FromProto, FromProtoReadOnly} {
				_, err := from(tc.tp, nil)
				if err == nil {
					t.Fatal("no error")
				}
				if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), tc.tp.GetName()) {
					t.Fatalf("error %q does not name the tensor or lacks %q", err, tc.msg)
				}
			}
		})
	}
}

func TestToProtoErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    *Tensor
	}{
		{"wrong slice", &Tensor{Float, []int{1}, []float64{1}}},
		{"wrong length", &Tensor{Float, []int{2}, []float32{1}}},
		{"int4 range", &Tensor{Int4, []int{1}, []int8{8}}},
		{"uint2 range", &Tensor{Uint2, []int{1}, []uint8{4}}},
		{"invalid dtype", &Tensor{DType(77), []int{1}, []float32{1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ToProto(tc.t, "out"); err == nil || !strings.Contains(err.Error(), `"out"`) {
				t.Fatalf("err = %v, want an error naming the tensor", err)
			}
		})
	}
}

// FuzzTensorDecode feeds arbitrary bytes through proto.Unmarshal and
// FromProto: errors are fine, panics are not, and whatever decodes must
// re-encode and decode to the same tensor.
func FuzzTensorDecode(f *testing.F) {
	for _, tt := range goldenTensors() {
		tp, err := ToProto(tt, "seed")
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(tp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var tp onnxpb.TensorProto
		if err := proto.Unmarshal(data, &tp); err != nil {
			return
		}
		got, err := FromProto(&tp, nil)
		if err != nil {
			return
		}
		if got.DType == String {
			return
		}
		tp2, err := ToProto(got, tp.GetName())
		if err != nil {
			t.Fatalf("decoded %s does not re-encode: %v", got, err)
		}
		again, err := FromProto(tp2, nil)
		if err != nil || !sameTensor(got, again) {
			t.Fatalf("round trip of %s failed: %v", got, err)
		}
	})
}

// BenchmarkFromProtoRaw decodes a 64 MiB float32 raw_data tensor.
func BenchmarkFromProtoRaw(b *testing.B) {
	const n = 16 << 20
	tp := &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(Float)), Dims: []int64{n},
		RawData: make([]byte, 4*n)}
	b.SetBytes(4 * n)
	for b.Loop() {
		if _, err := FromProto(tp, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// fuzzSeedFile is the `go test fuzz v1` corpus encoding of one []byte input.
func fuzzSeedFile(b []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n")
}

// TestFuzzSeeds keeps the committed corpus of FuzzTensorDecode in step with
// goldenTensors (COREAIQ_UPDATE_GOLDEN=1 rewrites it), plus two truncated
// inputs that must be errors.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzTensorDecode")
	for i, tt := range goldenTensors() {
		tp, err := ToProto(tt, "seed")
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(tp)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Golden(t, filepath.Join(dir, fmt.Sprintf("%02d-%s", i, tt.DType)), fuzzSeedFile(b))
		if i == 0 || i == 21 {
			cut := b[:len(b)-3]
			testutil.Golden(t, filepath.Join(dir, fmt.Sprintf("%02d-%s-truncated", i, tt.DType)), fuzzSeedFile(cut))
			var tp2 onnxpb.TensorProto
			if proto.Unmarshal(cut, &tp2) == nil {
				if _, err := FromProto(&tp2, nil); err == nil {
					t.Errorf("truncated %s decodes without error", tt)
				}
			}
		}
	}
}

// TestFromProtoReadOnly checks that the read-only decoding gives
// FromProto's tensor, viewing raw_data in place exactly where its bytes
// are the elements' memory (fixed-width types, aligned) and copying
// elsewhere.
func TestFromProtoReadOnly(t *testing.T) {
	aligned := func(n int) []byte { return ByteView(make([]float64, (n+7)/8))[:n] }
	pattern := func(b []byte) []byte {
		for i := range b {
			b[i] = byte(3*i + 1)
		}
		return b
	}
	cases := []struct {
		name   string
		dt     DType
		dims   []int64
		raw    []byte
		shared bool
	}{
		{"float", Float, []int64{2, 3}, pattern(aligned(24)), true},
		{"double", Double, []int64{3}, pattern(aligned(24)), true},
		{"int8", Int8, []int64{5}, pattern(aligned(5)), true},
		{"uint8", Uint8, []int64{5}, pattern(aligned(5)), true},
		{"float16", Float16, []int64{4}, pattern(aligned(8)), true},
		{"int32", Int32, []int64{2}, pattern(aligned(8)), true},
		{"int64", Int64, []int64{2}, pattern(aligned(16)), true},
		{"complex64", Complex64, []int64{2}, pattern(aligned(16)), true},
		{"unaligned float", Float, []int64{2}, pattern(aligned(9))[1:9], false},
		{"bool", Bool, []int64{3}, []byte{0, 1, 1}, false},
		{"int4", Int4, []int64{3}, []byte{0x21, 0x03}, false},
		{"empty", Float, []int64{0}, []byte{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp := &onnxpb.TensorProto{Name: proto.String(tc.name), DataType: proto.Int32(int32(tc.dt)), Dims: tc.dims, RawData: tc.raw}
			want, err := FromProto(tp, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FromProtoReadOnly(tp, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, FromProto gives %+v", got, want)
			}
			view := ByteView(got.Data)
			shared := len(view) > 0 && &view[0] == &tc.raw[0]
			if shared != tc.shared {
				t.Fatalf("shares raw_data: %v, want %v", shared, tc.shared)
			}
		})
	}
	// External data and typed fields decode as FromProto does.
	ext := &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(Float)), Dims: []int64{1},
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()}
	got, err := FromProtoReadOnly(ext, fakeExternal{data: []byte{0, 0, 0x80, 0x3f}})
	if err != nil || !reflect.DeepEqual(got.Data, []float32{1}) {
		t.Fatalf("external: %v, %v", got, err)
	}
	typed := &onnxpb.TensorProto{Name: proto.String("f"), DataType: proto.Int32(int32(Float)), Dims: []int64{2}, FloatData: []float32{1, 2}}
	got, err = FromProtoReadOnly(typed, nil)
	if err != nil || !reflect.DeepEqual(got.Data, []float32{1, 2}) {
		t.Fatalf("float_data: %v, %v", got, err)
	}
}

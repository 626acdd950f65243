package spec

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
)

// checkGolden compares got with testdata/name (COREAIQ_UPDATE_GOLDEN=1
// rewrites it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), []byte(got))
}

func TestParseDType(t *testing.T) {
	tests := []struct {
		in   string
		want DType
	}{
		{"int8", Int8}, {"torch.int8", Int8}, {"uint8", UInt8}, {"int16", Int16}, {"uint16", UInt16},
		{"int4", Int4}, {"uint4", UInt4}, {"int2", Int2}, {"uint2", UInt2},
		{"float8_e4m3fn", Float8E4M3FN}, {"torch.float8_e5m2", Float8E5M2},
		{"float4_e2m1fn_x2", Float4E2M1}, {"float4_e2m1", Float4E2M1},
		{"float32", Float32}, {"float16", Float16}, {"bfloat16", BFloat16}, {"float8_e8m0fnu", Float8E8M0FNU},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDType(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ParseDType(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "int9", "torch.float64", "Int8", "auto"} {
		if _, err := ParseDType(bad); err == nil {
			t.Errorf("ParseDType(%q) accepted", bad)
		}
	}
}

func TestRanges(t *testing.T) {
	tests := []struct {
		d          DType
		qmin, qmax int64
	}{
		{Int8, -128, 127}, {UInt8, 0, 255}, {Int16, -32768, 32767}, {UInt16, 0, 65535},
		{Int4, -8, 7}, {UInt4, 0, 15}, {Int2, -2, 1}, {UInt2, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			lo, hi := tt.d.Range()
			if lo != tt.qmin || hi != tt.qmax {
				t.Fatalf("Range = [%d, %d], want [%d, %d]", lo, hi, tt.qmin, tt.qmax)
			}
		})
	}
	s := &QuantizationSpec{DType: Int8, QScheme: SymmetricWithClipping}
	if lo, hi, _ := s.QuantRange(); lo != -127 || hi != 127 {
		t.Errorf("restricted int8 range = [%d, %d], want [-127, 127]", lo, hi)
	}
}

func TestDefaults(t *testing.T) {
	a := DefaultActivationSpec()
	if got := a.String(); got != "int8 symmetric per_tensor moving_average(c=0.01)" {
		t.Errorf("activation default = %q", got)
	}
	w := DefaultWeightSpec()
	if got := w.String(); got != "int8 symmetric per_channel(axis=default) static" {
		t.Errorf("weight default = %q", got)
	}
	if !a.Equal(a.Clone()) || a.Equal(w) {
		t.Error("Equal/Clone disagree")
	}
}

// TestQParamsExact pins the formulas on values whose results are exact or
// computed here the way DESIGN.md §5 states them.
func TestQParamsExact(t *testing.T) {
	f32 := func(x float64) float32 { return float32(x) }
	tests := []struct {
		name   string
		spec   QuantizationSpec
		lo, hi float32
		scale  float32
		zp     int32
	}{
		{"int8 symmetric absmax/127.5", QuantizationSpec{DType: Int8, QScheme: Symmetric}, -1, 2, f32(2) / 127.5, 0},
		{"int8 restricted absmax/127", QuantizationSpec{DType: Int8, QScheme: SymmetricWithClipping}, -1, 2, f32(2) / 127, 0},
		{"uint8 symmetric zp 128", QuantizationSpec{DType: UInt8, QScheme: Symmetric}, -1, 2, f32(2) / 127.5, 128},
		{"uint8 restricted zp 128", QuantizationSpec{DType: UInt8, QScheme: SymmetricWithClipping}, -1, 2, f32(2) / 127, 128},
		{"int4 symmetric absmax/7.5", QuantizationSpec{DType: Int4, QScheme: Symmetric}, -3, 1, 0.4, 0},
		{"uint4 symmetric zp 8", QuantizationSpec{DType: UInt4, QScheme: Symmetric}, -3, 1, 0.4, 8},
		{"int8 asymmetric", QuantizationSpec{DType: Int8, QScheme: Asymmetric}, -1, 2, f32(3) / 255, -43},
		{"uint8 asymmetric all positive", QuantizationSpec{DType: UInt8, QScheme: Asymmetric}, 0.5, 1, f32(1) / 255, 0},
		{"uint8 asymmetric all negative", QuantizationSpec{DType: UInt8, QScheme: Asymmetric}, -2, -1, f32(2) / 255, 255},
		{"zero range floors at epsilon", QuantizationSpec{DType: Int8, QScheme: Symmetric}, 0, 0, ScaleFloor, 0},
		{"zero range asymmetric", QuantizationSpec{DType: UInt8, QScheme: Asymmetric}, 0, 0, ScaleFloor, 0},
		{"fp8 e4m3fn absmax/448", QuantizationSpec{DType: Float8E4M3FN}, -896, 10, 2, 0},
		{"fp8 e5m2 absmax/57344", QuantizationSpec{DType: Float8E5M2}, 0, 57344, 1, 0},
		{"fp4 absmax/6", QuantizationSpec{DType: Float4E2M1}, -3, 1.5, 0.5, 0},
		{"fp4 e8m0 power of two", QuantizationSpec{DType: Float4E2M1, ScaleDType: Float8E8M0FNU}, -0.75, 0.1, 0.125, 0},
		{"fp4 e8m0 absmax 6", QuantizationSpec{DType: Float4E2M1, ScaleDType: Float8E8M0FNU}, -6, 6, 1, 0},
		{"fp8 e8m0 absmax 448", QuantizationSpec{DType: Float8E4M3FN, ScaleDType: Float8E8M0FNU}, 0, 448, 1, 0},
		{"int8 e8m0 rounds up", QuantizationSpec{DType: Int8, QScheme: Symmetric, ScaleDType: Float8E8M0FNU}, 0, 127.5 * 3, 4, 0},
		{"bfloat16 scale", QuantizationSpec{DType: Int8, QScheme: Symmetric, ScaleDType: BFloat16}, 0, 1, 129.0 / 16384, 0}, // 1/127.5 rounded to 8 significant bits
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, z, err := tt.spec.QParams([]float32{tt.lo}, []float32{tt.hi})
			if err != nil {
				t.Fatal(err)
			}
			if s[0] != tt.scale || z[0] != tt.zp {
				t.Fatalf("QParams(%g, %g) = scale %v zp %d; want %v, %d", tt.lo, tt.hi, s[0], z[0], tt.scale, tt.zp)
			}
		})
	}
}

func TestQParamsRejects(t *testing.T) {
	s := DefaultWeightSpec()
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, tt := range []struct {
		name   string
		lo, hi []float32
	}{
		{"length mismatch", []float32{0}, []float32{1, 2}},
		{"nan", []float32{nan}, []float32{1}},
		{"inf", []float32{0}, []float32{inf}},
		{"min above max", []float32{2}, []float32{1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := s.QParams(tt.lo, tt.hi); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestRoundHalfEven(t *testing.T) {
	for in, want := range map[float32]float32{0.5: 0, 1.5: 2, 2.5: 2, -0.5: 0, -1.5: -2, -2.5: -2, 2.4999: 2} {
		if got := roundHalfEven(in); got != want {
			t.Errorf("roundHalfEven(%v) = %v, want %v", in, got, want)
		}
	}
	// An asymmetric zero point that lands on a tie: min = -2.5·scale.
	s := QuantizationSpec{DType: UInt8, QScheme: Asymmetric}
	scale := float32(1) // (max − min)/255 = 1 with min −2.5, max 252.5
	_, z, err := s.QParams([]float32{-2.5 * scale}, []float32{252.5})
	if err != nil {
		t.Fatal(err)
	}
	if z[0] != 2 {
		t.Errorf("tie zero point = %d, want 2 (half to even)", z[0])
	}
}

func TestFloat16Scale(t *testing.T) {
	for in, want := range map[float32]float32{1: 1, 0.1: 0.0999755859375, 1e-8: 5.960464477539063e-08, 1e6: 65504, 3e-6: 2.98023223876953125e-06} {
		if got := roundToFloat16(in); got != want {
			t.Errorf("roundToFloat16(%v) = %v, want %v", in, got, want)
		}
	}
}

// TestQParamsGolden pins per-tensor, per-channel and per-block arrays for
// every data type and scheme.
func TestQParamsGolden(t *testing.T) {
	mins := []float32{-1, -0.003, 0, -127.5, -5, -0.25, 0.1, -1e-9}
	maxs := []float32{1, 0.7, 0, 3, 0.01, 0.25, 0.3, 2e-9}
	var b strings.Builder
	fmt.Fprintf(&b, "mins %v\nmaxs %v\n", mins, maxs)
	for d := Int8; d <= Float4E2M1; d++ {
		schemes := []QScheme{Symmetric, SymmetricWithClipping, Asymmetric}
		if d.IsFloat() {
			schemes = []QScheme{Symmetric}
		}
		for _, q := range schemes {
			for _, sd := range []DType{Float32, Float16, BFloat16, Float8E8M0FNU} {
				s := &QuantizationSpec{DType: d, QScheme: q, ScaleDType: sd}
				for _, n := range []int{1, 2, len(mins)} { // per tensor, two channels, eight blocks
					scale, zp, err := s.QParams(mins[:n], maxs[:n])
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&b, "%s %s scale=%s n=%d: scale %v zp %v\n", d, q, sd, n, scale, zp)
				}
			}
		}
	}
	checkGolden(t, "qparams.golden", b.String())
}

func TestValidate(t *testing.T) {
	axis := 0
	for _, tt := range []struct {
		name string
		s    QuantizationSpec
		ok   bool
	}{
		{"default", *DefaultWeightSpec(), true},
		{"asymmetric fp8", QuantizationSpec{DType: Float8E4M3FN, QScheme: Asymmetric}, false},
		{"block size 0", QuantizationSpec{DType: Int4, Granularity: Granularity{Type: PerBlock}}, false},
		{"block size on per_channel", QuantizationSpec{DType: Int4, Granularity: Granularity{Type: PerChannel, BlockSize: 4}}, false},
		{"axis on per_tensor", QuantizationSpec{DType: Int4, Granularity: Granularity{Type: PerTensor, Axis: &axis}}, false},
		{"scale dtype int8", QuantizationSpec{DType: Int4, ScaleDType: Int8}, false},
		{"data dtype float32", QuantizationSpec{DType: Float32}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.s.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

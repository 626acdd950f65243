package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// narrowCase describes one narrow format for the exhaustive tests.
type narrowCase struct {
	name   string
	codes  int // number of codes
	decode func(uint32) float32
	encode func(float32, bool) uint32
}

func narrowCases() []narrowCase {
	return []narrowCase{
		{"float16", 1 << 16, func(c uint32) float32 { return Float16ToFloat32(uint16(c)) },
			func(f float32, _ bool) uint32 { return uint32(Float32ToFloat16(f)) }},
		{"bfloat16", 1 << 16, func(c uint32) float32 { return BFloat16ToFloat32(uint16(c)) },
			func(f float32, _ bool) uint32 { return uint32(Float32ToBFloat16(f)) }},
		{"e4m3fn", 256, func(c uint32) float32 { return Float8E4M3FNToFloat32(uint8(c)) },
			func(f float32, s bool) uint32 { return uint32(Float32ToFloat8E4M3FN(f, s)) }},
		{"e4m3fnuz", 256, func(c uint32) float32 { return Float8E4M3FNUZToFloat32(uint8(c)) },
			func(f float32, s bool) uint32 { return uint32(Float32ToFloat8E4M3FNUZ(f, s)) }},
		{"e5m2", 256, func(c uint32) float32 { return Float8E5M2ToFloat32(uint8(c)) },
			func(f float32, s bool) uint32 { return uint32(Float32ToFloat8E5M2(f, s)) }},
		{"e5m2fnuz", 256, func(c uint32) float32 { return Float8E5M2FNUZToFloat32(uint8(c)) },
			func(f float32, s bool) uint32 { return uint32(Float32ToFloat8E5M2FNUZ(f, s)) }},
		{"e2m1", 16, func(c uint32) float32 { return Float4E2M1ToFloat32(uint8(c)) },
			func(f float32, _ bool) uint32 { return uint32(Float32ToFloat4E2M1(f)) }},
		{"e8m0", 256, func(c uint32) float32 { return Float8E8M0ToFloat32(uint8(c)) },
			func(f float32, s bool) uint32 { return uint32(Float32ToFloat8E8M0(f, s, E8M0Up)) }},
	}
}

// TestNarrowRoundTripEveryCode decodes every code and encodes it back: each
// non-NaN code must return to itself (both saturate settings), each NaN code
// must encode to some NaN.
func TestNarrowRoundTripEveryCode(t *testing.T) {
	for _, tc := range narrowCases() {
		t.Run(tc.name, func(t *testing.T) {
			nans := 0
			for c := range uint32(tc.codes) {
				v := tc.decode(c)
				for _, sat := range []bool{true, false} {
					got := tc.encode(v, sat)
					if math.IsInf(float64(v), 0) && sat {
						continue // saturation maps infinity to ±max, tested below
					}
					if math.IsNaN(float64(v)) {
						if !math.IsNaN(float64(tc.decode(got))) {
							t.Fatalf("NaN code %#x re-encodes to non-NaN %#x", c, got)
						}
						continue
					}
					if got != c {
						t.Fatalf("code %#x = %g re-encodes to %#x (saturate=%v)", c, v, got, sat)
					}
				}
				if math.IsNaN(float64(v)) {
					nans++
				}
			}
			wantNaNs := map[string]int{"float16": 2046, "bfloat16": 254, "e4m3fn": 2, "e4m3fnuz": 1,
				"e5m2": 6, "e5m2fnuz": 1, "e2m1": 0, "e8m0": 1}[tc.name]
			if nans != wantNaNs {
				t.Errorf("%d NaN codes, want %d", nans, wantNaNs)
			}
		})
	}
}

// TestNarrowNearestEven checks rounding against the definition: the midpoint
// of two adjacent codes goes to the even one, and the float32 just either
// side of it goes to the nearer one.
func TestNarrowNearestEven(t *testing.T) {
	for _, tc := range narrowCases() {
		if tc.name == "e8m0" {
			continue // no mantissa: tested by TestE8M0
		}
		t.Run(tc.name, func(t *testing.T) {
			half := uint32(tc.codes / 2) // codes below half are positive
			for c := range half - 1 {
				a, b := tc.decode(c), tc.decode(c+1)
				if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
					continue
				}
				mid := float32((float64(a) + float64(b)) / 2)
				if float64(mid) != (float64(a)+float64(b))/2 {
					t.Fatalf("midpoint of %g and %g not exact in float32", a, b)
				}
				even := c
				if c%2 == 1 {
					even = c + 1
				}
				for _, neg := range []bool{false, true} {
					sign, m := uint32(0), mid
					if neg {
						sign, m = half, -mid
					}
					if neg && c == 0 && (tc.name == "e4m3fnuz" || tc.name == "e5m2fnuz") {
						sign = 0 // no negative zero: the tie and below go to +0
						if got := tc.encode(m, true); got != 0 {
							t.Fatalf("%g encodes to %#x, want 0", m, got)
						}
						if got := tc.encode(math.Nextafter32(m, -1), true); got != half|1 {
							t.Fatalf("just below %g encodes to %#x, want %#x", m, got, half|1)
						}
						continue
					}
					if got := tc.encode(m, true); got != sign|even {
						t.Fatalf("%g (between codes %#x and %#x) encodes to %#x, want %#x", m, c, c+1, got, sign|even)
					}
					below := math.Nextafter32(m, 0)
					above := math.Nextafter32(m, float32(math.Copysign(math.Inf(1), float64(m))))
					if got := tc.encode(below, true); got != sign|c {
						t.Fatalf("%g encodes to %#x, want %#x", below, got, sign|c)
					}
					if got := tc.encode(above, true); got != sign|(c+1) {
						t.Fatalf("%g encodes to %#x, want %#x", above, got, sign|(c+1))
					}
				}
			}
		})
	}
}

// TestNarrowRandomNearest checks random float32 inputs against a brute
// nearest-code search for the 8-bit formats.
func TestNarrowRandomNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range narrowCases() {
		if tc.codes != 256 || tc.name == "e8m0" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			maxv := float32(0)
			for c := range uint32(256) {
				if v := tc.decode(c); !math.IsInf(float64(v), 0) && v > maxv {
					maxv = v
				}
			}
			for range 20000 {
				x := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(30)-18)))
				if math.Abs(float64(x)) > float64(maxv) {
					continue
				}
				got := tc.decode(tc.encode(x, true))
				best := math.Inf(1)
				for c := range uint32(256) {
					v := tc.decode(c)
					if d := math.Abs(float64(v) - float64(x)); d < best {
						best = d
					}
				}
				if d := math.Abs(float64(got) - float64(x)); d != best {
					t.Fatalf("%g encodes to %g (error %g), nearest code has error %g", x, got, d, best)
				}
			}
		})
	}
}

func TestFloat16Known(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3C00}, {-2, 0xC000}, {65504, 0x7BFF}, {65520, 0x7C00}, {65519.99, 0x7BFF},
		{float32(math.Inf(-1)), 0xFC00}, {5.960464477539063e-08, 0x0001}, {2.9802322387695312e-08, 0x0000},
		{2.98023259e-08, 0x0001}, {float32(math.Copysign(0, -1)), 0x8000}, {6.103515625e-05, 0x0400},
		{0.1, 0x2E66}, {1e-10, 0},
	} {
		if got := Float32ToFloat16(tc.f); got != tc.h {
			t.Errorf("Float32ToFloat16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	if got := Float32ToFloat16(float32(math.NaN())); got&0x7C00 != 0x7C00 || got&0x3FF == 0 {
		t.Errorf("NaN encodes to %#04x", got)
	}
}

// TestEncode32MatchesEncode cross-checks the float32 fast path against the
// float64 routine on random bit patterns and on small magnitudes.
func TestEncode32MatchesEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	formats := map[string]*minifloat{"float16": &fmtFloat16, "bfloat16": &fmtBFloat16, "e4m3fn": &fmtE4M3FN,
		"e4m3fnuz": &fmtE4M3FNUZ, "e5m2": &fmtE5M2, "e5m2fnuz": &fmtE5M2FNUZ, "e2m1": &fmtE2M1}
	for name, f := range formats {
		t.Run(name, func(t *testing.T) {
			for i := range 200000 {
				var x float32
				if i%2 == 0 {
					x = math.Float32frombits(r.Uint32())
				} else {
					x = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(60)-40)))
				}
				for _, sat := range []bool{true, false} {
					fast, slow := f.encode32(x, sat), f.encode(float64(x), sat)
					if fast != slow {
						t.Fatalf("%g (%#08x) saturate=%v: encode32 %#x, encode %#x", x, math.Float32bits(x), sat, fast, slow)
					}
				}
			}
		})
	}
}

func TestBFloat16MatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		f := math.Float32frombits(r.Uint32())
		fast := Float32ToBFloat16(f)
		slow := Float64ToBFloat16(float64(f))
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(BFloat16ToFloat32(fast))) {
				t.Fatalf("NaN %#x encodes to %#x", math.Float32bits(f), fast)
			}
			continue
		}
		if fast != slow {
			t.Fatalf("%g (%#08x): fast %#04x, generic %#04x", f, math.Float32bits(f), fast, slow)
		}
	}
}

// TestFloat8Saturate pins ONNX's table of special values (float8.md).
func TestFloat8Saturate(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	type enc func(float32, bool) uint8
	formats := []struct {
		name string
		enc  enc
		dec  func(uint8) float32
		max  float32
	}{
		{"e4m3fn", Float32ToFloat8E4M3FN, Float8E4M3FNToFloat32, 448},
		{"e4m3fnuz", Float32ToFloat8E4M3FNUZ, Float8E4M3FNUZToFloat32, 240},
		{"e5m2", Float32ToFloat8E5M2, Float8E5M2ToFloat32, 57344},
		{"e5m2fnuz", Float32ToFloat8E5M2FNUZ, Float8E5M2FNUZToFloat32, 57344},
	}
	// want: "max", "-max", "nan", "inf", "-inf", "0", "-0"
	table := map[string]map[string][6]string{
		// inputs: +Inf, -Inf, 1e9, -1e9, -0, NaN
		"e4m3fn":   {"sat": {"max", "-max", "max", "-max", "-0", "nan"}, "nosat": {"nan", "nan", "nan", "nan", "-0", "nan"}},
		"e4m3fnuz": {"sat": {"nan", "nan", "max", "-max", "0", "nan"}, "nosat": {"nan", "nan", "nan", "nan", "0", "nan"}},
		"e5m2":     {"sat": {"max", "-max", "max", "-max", "-0", "nan"}, "nosat": {"inf", "-inf", "inf", "-inf", "-0", "nan"}},
		"e5m2fnuz": {"sat": {"nan", "nan", "max", "-max", "0", "nan"}, "nosat": {"nan", "nan", "nan", "nan", "0", "nan"}},
	}
	inputs := []float32{inf, -inf, 1e9, -1e9, float32(math.Copysign(0, -1)), nan}
	for _, f := range formats {
		for _, mode := range []string{"sat", "nosat"} {
			t.Run(f.name+"/"+mode, func(t *testing.T) {
				for i, x := range inputs {
					got := f.dec(f.enc(x, mode == "sat"))
					want := table[f.name][mode][i]
					ok := false
					switch want {
					case "max":
						ok = got == f.max
					case "-max":
						ok = got == -f.max
					case "nan":
						ok = math.IsNaN(float64(got))
					case "inf":
						ok = math.IsInf(float64(got), 1)
					case "-inf":
						ok = math.IsInf(float64(got), -1)
					case "0":
						ok = got == 0 && !math.Signbit(float64(got))
					case "-0":
						ok = got == 0 && math.Signbit(float64(got))
					}
					if !ok {
						t.Errorf("%g → %g, want %s", x, got, want)
					}
				}
			})
		}
	}
	// Values that round to max stay finite without saturation; above the
	// rounding boundary they overflow.
	if got := Float32ToFloat8E4M3FN(464, false); got != 0x7E {
		t.Errorf("e4m3fn(464, nosat) = %#x, want 0x7E (tie to even 448)", got)
	}
	if got := Float32ToFloat8E4M3FN(465, false); got != 0x7F {
		t.Errorf("e4m3fn(465, nosat) = %#x, want NaN 0x7F", got)
	}
	if got := Float32ToFloat8E5M2(61440, false); got != 0x7C {
		t.Errorf("e5m2(61440, nosat) = %#x, want Inf 0x7C (tie to even)", got)
	}
	if got := Float32ToFloat8E4M3FNUZ(-1e-9, true); got != 0 {
		t.Errorf("e4m3fnuz(-1e-9) = %#x, want 0 (no negative zero)", got)
	}
}

func TestFloat4E2M1(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		code uint8
	}{
		{0, 0}, {0.25, 0}, {0.26, 1}, {0.5, 1}, {0.75, 2}, {1.25, 2}, {1.75, 4}, {2.5, 4}, {3.5, 6},
		{5, 6}, {5.01, 7}, {6, 7}, {100, 7}, {-100, 0xF}, {-0.75, 0xA},
		{float32(math.Inf(1)), 7}, {float32(math.Inf(-1)), 0xF}, {float32(math.NaN()), 7},
		{float32(math.Copysign(0, -1)), 8},
	} {
		if got := Float32ToFloat4E2M1(tc.f); got != tc.code {
			t.Errorf("Float32ToFloat4E2M1(%g) = %#x, want %#x", tc.f, got, tc.code)
		}
	}
	want := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for c, w := range want {
		if got := Float4E2M1ToFloat32(uint8(c)); got != w {
			t.Errorf("code %d = %g, want %g", c, got, w)
		}
		if got := Float4E2M1ToFloat32(uint8(c | 8)); got != -w {
			t.Errorf("code %d = %g, want %g", c|8, got, -w)
		}
	}
}

func TestE8M0(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		sat  bool
		mode E8M0Rounding
		code uint8
	}{
		{1, true, E8M0Up, 127}, {1.1, true, E8M0Up, 128}, {1.1, true, E8M0Down, 127},
		{1.4, true, E8M0Nearest, 127}, {1.5, true, E8M0Nearest, 128}, {1.6, true, E8M0Nearest, 128},
		{0.124, true, E8M0Up, 124}, {-4, true, E8M0Up, 129}, {0, true, E8M0Up, 0},
		{float32(math.Inf(1)), true, E8M0Up, 0xFF}, {float32(math.NaN()), true, E8M0Up, 0xFF},
		{math.MaxFloat32, true, E8M0Up, 0xFE}, {math.MaxFloat32, false, E8M0Up, 0xFF},
		{1e-40, true, E8M0Up, 0}, {7e-39, true, E8M0Up, 1}, {7e-39, true, E8M0Down, 0},
		{7e-39, true, E8M0Nearest, 0}, {9e-39, true, E8M0Nearest, 1},
	} {
		if got := Float32ToFloat8E8M0(tc.f, tc.sat, tc.mode); got != tc.code {
			t.Errorf("Float32ToFloat8E8M0(%g, %v, %d) = %d, want %d", tc.f, tc.sat, tc.mode, got, tc.code)
		}
	}
	if got := Float8E8M0ToFloat32(0); got != float32(math.Ldexp(1, -127)) {
		t.Errorf("e8m0 code 0 = %g, want 2^-127", got)
	}
}

func TestSliceHelpers(t *testing.T) {
	src := []float32{0, 1, -3, 1e6, float32(math.Inf(1))}
	h := make([]uint16, len(src))
	Float32sToFloat16(h, src)
	back := make([]float32, len(src))
	Float16sToFloat32(back, h)
	wantF16 := []float32{0, 1, -3, float32(math.Inf(1)), float32(math.Inf(1))}
	for i := range src {
		if back[i] != wantF16[i] {
			t.Errorf("float16 round trip of %g = %g, want %g", src[i], back[i], wantF16[i])
		}
	}
	Float32sToBFloat16(h, src)
	BFloat16sToFloat32(back, h)
	if back[3] != 999424 || back[2] != -3 {
		t.Errorf("bfloat16 round trip = %v", back)
	}
	for _, dt := range []DType{Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0, Float4E2M1} {
		codes := make([]uint8, len(src))
		if err := Float32sToFloat8(dt, codes, src[:3], true); err != nil {
			t.Fatal(err)
		}
		if err := Float8sToFloat32(dt, back, codes[:3]); err != nil {
			t.Fatal(err)
		}
		for i, w := range []float32{0, 1, -3} {
			if dt == Float8E8M0 {
				w = []float32{float32(math.Ldexp(1, -127)), 1, 4}[i]
			}
			if back[i] != w {
				t.Errorf("%s round trip of %g = %g, want %g", dt, src[i], back[i], w)
			}
		}
	}
	if err := Float32sToFloat8(Int8, nil, nil, true); err == nil {
		t.Error("Float32sToFloat8(int8) succeeded")
	}
}

func BenchmarkNarrowEncode(b *testing.B) {
	src := make([]float32, 1<<16)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	b.Run("float16", func(b *testing.B) {
		dst := make([]uint16, len(src))
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			Float32sToFloat16(dst, src)
		}
	})
	b.Run("e4m3fn", func(b *testing.B) {
		dst := make([]uint8, len(src))
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			_ = Float32sToFloat8(Float8E4M3FN, dst, src, true)
		}
	})
}

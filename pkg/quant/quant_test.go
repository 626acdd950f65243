package quant_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/quant/quanttest"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// zeroPoint is a case's zero point as a one-element tensor; nil for narrow
// float types, whose zero point is +0.
func zeroPoint(dt tensor.DType, zp int64) *tensor.Tensor {
	if quant.IsNarrowFloat(dt) {
		return nil
	}
	return quanttest.Tensor(dt, zp)
}

// TestCasesScalar runs the case table through the one-value functions.
func TestCasesScalar(t *testing.T) {
	for _, c := range quanttest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			got := make([]int64, len(c.X))
			for i, x := range c.X {
				if lo, hi, ok := quant.IntRange(c.DType); ok {
					got[i] = quant.Int(x, c.Scale, c.ZeroPoint, lo, hi)
					continue
				}
				got[i] = int64(quant.Float(c.DType, x, c.Scale, 0, !c.NoSaturate))
			}
			if !slices.Equal(got, c.Want) {
				t.Errorf("quantize %v / %g + %d to %s = %#x, want %#x", c.X, c.Scale, c.ZeroPoint, c.DType, got, c.Want)
			}
		})
	}
}

// TestCasesTensor runs the case table through Quantize, per tensor and
// with the case repeated along an axis and in blocks.
func TestCasesTensor(t *testing.T) {
	for _, c := range quanttest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			n := len(c.X)
			// Three rows of the case, each its own scale (per axis 0),
			// then in blocks of two rows along axis 0.
			x := slices.Concat(c.X, c.X, c.X)
			want := slices.Concat(c.Want, c.Want, c.Want)
			for _, lc := range []struct {
				name        string
				shape       []int
				axis, block int
			}{
				{"per tensor", []int{3 * n}, -1, 0},
				{"per axis", []int{3, n}, 0, 0},
				{"per block", []int{3, n}, 0, 2},
				{"per axis 1", []int{3, n}, 1, 0},
			} {
				l, err := quant.NewLayout(lc.shape, lc.axis, lc.block)
				if err != nil {
					t.Fatal(err)
				}
				g := l.Groups()
				scales := slices.Repeat([]float32{c.Scale}, g)
				var zp *tensor.Tensor
				if z := zeroPoint(c.DType, c.ZeroPoint); z != nil {
					zp = quanttest.Tensor(c.DType, slices.Repeat([]int64{c.ZeroPoint}, g)...)
				}
				q, err := quant.Quantize(x, lc.shape, l, scales, zp, c.DType, !c.NoSaturate, 1)
				if err != nil {
					t.Fatalf("%s: %v", lc.name, err)
				}
				if got := quanttest.Codes(q); !slices.Equal(got, want) {
					t.Errorf("%s: codes %#x, want %#x", lc.name, got, want)
				}
			}
		})
	}
}

func TestDequantizeCases(t *testing.T) {
	for _, c := range quanttest.DequantizeCases {
		t.Run(c.Name, func(t *testing.T) {
			y := make([]float32, len(c.Q))
			if err := quant.DequantizeInto(y, quanttest.Tensor(c.DType, c.Q...), quant.PerTensor, []float32{c.Scale}, zeroPoint(c.DType, c.ZeroPoint)); err != nil {
				t.Fatal(err)
			}
			for i := range y {
				if y[i] != c.Want[i] && !(math.IsNaN(float64(y[i])) && math.IsNaN(float64(c.Want[i]))) {
					t.Errorf("dequantize %v = %v, want %v", c.Q, y, c.Want)
					break
				}
			}
		})
	}
}

// TestRoundTrip: every code of every integer type dequantizes and
// quantizes back to itself.
func TestRoundTrip(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Int4, tensor.Uint4, tensor.Int8, tensor.Uint8, tensor.Int16, tensor.Uint16} {
		lo, hi, _ := quant.IntRange(dt)
		for _, zp := range []int64{lo, 0, hi} {
			if zp < lo || zp > hi {
				continue
			}
			for q := lo; q <= hi; q++ {
				x := quant.Dequantize(q, zp, 0.37)
				if back := quant.Int(x, 0.37, zp, lo, hi); back != q {
					t.Fatalf("%s zp %d: code %d → %g → %d", dt, zp, q, x, back)
				}
			}
		}
	}
}

func TestLayout(t *testing.T) {
	for _, tt := range []struct {
		shape       []int
		axis, block int
		wantShape   []int
		wantGroups  []int
	}{
		{[]int{2, 3}, -1, 0, []int{}, []int{0, 0, 0, 0, 0, 0}},
		{[]int{2, 3}, 0, 0, []int{2}, []int{0, 0, 0, 1, 1, 1}},
		{[]int{2, 3}, 1, 0, []int{3}, []int{0, 1, 2, 0, 1, 2}},
		{[]int{2, 5}, 1, 2, []int{2, 3}, []int{0, 0, 1, 1, 2, 3, 3, 4, 4, 5}},
		{[]int{5, 2}, 0, 2, []int{3, 2}, []int{0, 1, 0, 1, 2, 3, 2, 3, 4, 5}},
	} {
		if got := quant.ParamShape(tt.shape, tt.axis, tt.block); !slices.Equal(got, tt.wantShape) {
			t.Errorf("ParamShape(%v, %d, %d) = %v, want %v", tt.shape, tt.axis, tt.block, got, tt.wantShape)
		}
		l, err := quant.NewLayout(tt.shape, tt.axis, tt.block)
		if err != nil {
			t.Fatal(err)
		}
		if l.Groups() != tensor.NumElements(tt.wantShape) {
			t.Errorf("%v axis %d block %d: %d groups, want %d", tt.shape, tt.axis, tt.block, l.Groups(), tensor.NumElements(tt.wantShape))
		}
		var each []int
		l.Each(len(tt.wantGroups), func(i, g int) {
			if i != len(each) {
				t.Fatalf("Each visited %d after %d elements", i, len(each))
			}
			each = append(each, g)
		})
		of := make([]int, len(tt.wantGroups))
		for i := range of {
			of[i] = l.Of(i)
		}
		if !slices.Equal(each, tt.wantGroups) || !slices.Equal(of, tt.wantGroups) {
			t.Errorf("%v axis %d block %d: Each %v, Of %v, want %v", tt.shape, tt.axis, tt.block, each, of, tt.wantGroups)
		}
	}
}

// TestQuantizeWorkersAgree: a tensor large enough to be shared among
// goroutines quantizes to the same codes with 1 and 4 workers, per block
// (int4) and per channel (float8).
func TestQuantizeWorkersAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	shape := []int{512, 1024}
	x := make([]float32, 512*1024)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, c := range []struct {
		dt          tensor.DType
		axis, block int
	}{{tensor.Int4, 1, 32}, {tensor.Float8E4M3FN, 0, 0}, {tensor.Uint8, -1, 0}} {
		l, err := quant.NewLayout(shape, c.axis, c.block)
		if err != nil {
			t.Fatal(err)
		}
		scales := make([]float32, l.Groups())
		for i := range scales {
			scales[i] = 0.01 + float32(i%7)*0.003
		}
		one, err := quant.Quantize(x, shape, l, scales, nil, c.dt, true, 1)
		if err != nil {
			t.Fatal(err)
		}
		four, err := quant.Quantize(x, shape, l, scales, nil, c.dt, true, 4)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tensor.ByteView(one.Data), tensor.ByteView(four.Data)) {
			t.Errorf("%s axis %d block %d: 4 workers give other codes than 1", c.dt, c.axis, c.block)
		}
	}
}

// TestIntCodesAgainstFloat64 checks Quantize and DequantizeInto, whose
// loops round codes of 16 bits or fewer in float32, against the
// definition computed here in float64 (clamp(roundHalfEven(x/scale) + zp),
// NaN to the lowest code; (q − zp)·scale), on values chosen to break a
// float32 rounding: ties at every half, quotients around ±2^22 and ±2^23,
// ±Inf, NaN, −0, the largest floats, and random ones, for every integer
// type at its extreme and middle zero points, per tensor and per axis (the
// last axis too, a scale per element).
func TestIntCodesAgainstFloat64(t *testing.T) {
	x := hardValues()
	want := func(v, scale float32, zp, lo, hi int64) int64 {
		q := float64(v / scale)
		if math.IsNaN(q) {
			return lo
		}
		return int64(math.Max(float64(lo), math.Min(float64(hi), math.RoundToEven(q)+float64(zp))))
	}
	for _, dt := range []tensor.DType{tensor.Int8, tensor.Uint8, tensor.Int16, tensor.Uint16, tensor.Int32, tensor.Int4, tensor.Uint4} {
		lo, hi, _ := quant.IntRange(dt)
		for _, zp := range []int64{lo, (lo + hi) / 2, hi} {
			for _, scale := range []float32{1, 0.5, 0.0078125, 3.3} {
				shape := []int{2, len(x)}
				xx := slices.Concat(x, x)
				// Axis 1 is the last: a scale per element, three of them in turn.
				for _, axis := range []int{-1, 0, 1} {
					l, err := quant.NewLayout(shape, axis, 0)
					if err != nil {
						t.Fatal(err)
					}
					scales, zps := make([]float32, l.Groups()), make([]int64, l.Groups())
					for i := range scales {
						scales[i], zps[i] = scale, zp
						if axis == 1 {
							scales[i] = scale * float32(1+i%3)
						}
					}
					scaleOf := func(i int) float32 {
						if axis == 1 {
							return scales[i%len(x)]
						}
						return scale
					}
					q, err := quant.Quantize(xx, shape, l, scales, quanttest.Tensor(dt, zps...), dt, true, 1)
					if err != nil {
						t.Fatal(err)
					}
					codes := quanttest.Codes(q)
					y := make([]float32, len(xx))
					if err := quant.DequantizeInto(y, q, l, scales, quanttest.Tensor(dt, zps...)); err != nil {
						t.Fatal(err)
					}
					for i, v := range xx {
						sc := scaleOf(i)
						w := want(v, sc, zp, lo, hi)
						if codes[i] != w {
							t.Fatalf("%s zp %d scale %g axis %d: %g → %d, want %d", dt, zp, sc, axis, v, codes[i], w)
						}
						if wy := float32(float64(w-zp)) * sc; y[i] != wy {
							t.Fatalf("%s zp %d scale %g axis %d: code %d → %g, want %g", dt, zp, sc, axis, w, y[i], wy)
						}
					}
				}
			}
		}
	}
}

// hardValues are values chosen to break a float32 rounding: ties at every
// half, quotients around ±2^22 and ±2^23 and the 16-bit bounds, ±Inf, NaN,
// −0, the largest floats, and random ones of every size (fixed seed).
func hardValues() []float32 {
	r := rand.New(rand.NewPCG(21, 22))
	var x []float32
	for k := -300; k <= 300; k++ {
		x = append(x, float32(k)+0.5, float32(k)-0.5, float32(k), float32(k)+0.49999997, float32(k)+0.50000006)
	}
	for _, b := range []float32{1 << 22, 1 << 23, 1 << 24, 65535.5, 65536.5, 32767.5, -32768.5} {
		for _, d := range []float32{-1.5, -1, -0.5, 0, 0.5, 1, 1.5} {
			x = append(x, b+d, -b+d)
		}
	}
	x = append(x, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32)
	for range 4000 {
		x = append(x, float32(r.NormFloat64()*float64(r.IntN(100000)+1)))
	}
	return x
}

// TestRoundTripIsQuantizeThenDequantize checks that RoundTripInto gives,
// bit for bit, what Quantize then DequantizeInto give, for every integer
// type of 16 bits or fewer at extreme and middle zero points, per tensor
// and per axis with a scale per row, on hardValues; and that it declines
// int32 codes.
func TestRoundTripIsQuantizeThenDequantize(t *testing.T) {
	x := hardValues()
	shape := []int{3, len(x)}
	xx := slices.Concat(x, x, x)
	for _, dt := range []tensor.DType{tensor.Int8, tensor.Uint8, tensor.Int16, tensor.Uint16, tensor.Int4, tensor.Uint4} {
		lo, hi, _ := quant.IntRange(dt)
		for _, zp := range []int64{lo, (lo + hi) / 2, hi} {
			for _, axis := range []int{-1, 0} {
				l, err := quant.NewLayout(shape, axis, 0)
				if err != nil {
					t.Fatal(err)
				}
				scales, zps := make([]float32, l.Groups()), make([]int64, l.Groups())
				for i := range scales {
					scales[i], zps[i] = []float32{0.37, 1, 0.0078125}[i%3], zp
				}
				zt := quanttest.Tensor(dt, zps...)
				q, err := quant.Quantize(xx, shape, l, scales, zt, dt, true, 1)
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float32, len(xx))
				if err := quant.DequantizeInto(want, q, l, scales, zt); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, len(xx))
				ok, err := quant.RoundTripInto(got, xx, l, scales, zt, dt)
				if !ok || err != nil {
					t.Fatalf("%s: round trip declined (%v)", dt, err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s zp %d axis %d: %g → %g, want %g", dt, zp, axis, xx[i], got[i], want[i])
					}
				}
			}
		}
	}
	if ok, _ := quant.RoundTripInto(make([]float32, 4), make([]float32, 4), quant.PerTensor, []float32{1}, nil, tensor.Int32); ok {
		t.Error("int32 codes taken")
	}
}

// benchWeight is a 4096×4096 weight of normal values (fixed seed) and,
// for per-channel quantization along axis, its layout and int8 scales.
func benchWeight(b *testing.B, axis int) ([]float32, []int, quant.Layout, []float32) {
	b.Helper()
	shape := []int{4096, 4096}
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, shape[0]*shape[1])
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
	}
	l, err := quant.NewLayout(shape, axis, 0)
	if err != nil {
		b.Fatal(err)
	}
	scales := make([]float32, l.Groups())
	for i := range scales {
		scales[i] = 0.1 / 127
	}
	return x, shape, l, scales
}

// BenchmarkQuantizeWeight times int8 codes of a 4096×4096 weight per
// channel along each axis: axis 1 is a MatMul weight's output features,
// a scale per element of each row.
func BenchmarkQuantizeWeight(b *testing.B) {
	for _, axis := range []int{0, 1} {
		b.Run(fmt.Sprintf("axis=%d", axis), func(b *testing.B) {
			x, shape, l, scales := benchWeight(b, axis)
			b.SetBytes(int64(len(x) * 4))
			for b.Loop() {
				if _, err := quant.Quantize(x, shape, l, scales, nil, tensor.Int8, false, 2); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDequantizeWeight times DequantizeInto on the int8 codes of
// BenchmarkQuantizeWeight's weight, per channel along each axis.
func BenchmarkDequantizeWeight(b *testing.B) {
	for _, axis := range []int{0, 1} {
		b.Run(fmt.Sprintf("axis=%d", axis), func(b *testing.B) {
			x, shape, l, scales := benchWeight(b, axis)
			q, err := quant.Quantize(x, shape, l, scales, nil, tensor.Int8, false, 2)
			if err != nil {
				b.Fatal(err)
			}
			y := make([]float32, len(x))
			b.SetBytes(int64(len(x) * 4))
			for b.Loop() {
				if err := quant.DequantizeInto(y, q, l, scales, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

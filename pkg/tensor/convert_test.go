package tensor

import (
	"math"
	"reflect"
	"testing"
)

func TestAsFloat32(t *testing.T) {
	f := []float32{1, 2}
	ft := FromFloat32(f, 2)
	got, err := ft.AsFloat32()
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &f[0] {
		t.Error("AsFloat32 of a Float tensor copied the data")
	}
	for _, tc := range []struct {
		t    *Tensor
		want []float32
	}{
		{&Tensor{Double, []int{2}, []float64{0.5, -1e40}}, []float32{0.5, float32(math.Inf(-1))}},
		{&Tensor{Int8, []int{2}, []int8{-128, 5}}, []float32{-128, 5}},
		{&Tensor{Uint8, []int{1}, []uint8{255}}, []float32{255}},
		{&Tensor{Int16, []int{1}, []int16{-7}}, []float32{-7}},
		{&Tensor{Uint16, []int{1}, []uint16{65535}}, []float32{65535}},
		{&Tensor{Int32, []int{1}, []int32{1 << 24}}, []float32{1 << 24}},
		{&Tensor{Uint32, []int{1}, []uint32{3}}, []float32{3}},
		{&Tensor{Int64, []int{1}, []int64{-9}}, []float32{-9}},
		{&Tensor{Uint64, []int{1}, []uint64{9}}, []float32{9}},
		{&Tensor{Bool, []int{2}, []bool{true, false}}, []float32{1, 0}},
		{&Tensor{Float16, []int{2}, []uint16{0x3C00, 0xC000}}, []float32{1, -2}},
		{&Tensor{BFloat16, []int{1}, []uint16{0x4040}}, []float32{3}},
		{&Tensor{Float8E4M3FN, []int{2}, []uint8{0x7E, 0x38}}, []float32{448, 1}},
		{&Tensor{Float8E4M3FNUZ, []int{1}, []uint8{0x40}}, []float32{1}},
		{&Tensor{Float8E5M2, []int{1}, []uint8{0x3C}}, []float32{1}},
		{&Tensor{Float8E5M2FNUZ, []int{1}, []uint8{0x40}}, []float32{1}},
		{&Tensor{Float8E8M0, []int{1}, []uint8{130}}, []float32{8}},
		{&Tensor{Float4E2M1, []int{2}, []uint8{0x7, 0xB}}, []float32{6, -1.5}},
		{&Tensor{Int4, []int{2}, []int8{-8, 7}}, []float32{-8, 7}},
		{&Tensor{Uint2, []int{1}, []uint8{3}}, []float32{3}},
	} {
		t.Run(tc.t.DType.String(), func(t *testing.T) {
			got, err := tc.t.AsFloat32()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []*Tensor{
		{String, []int{1}, []string{"x"}},
		{Complex64, []int{1}, []complex64{1}},
		{Float, []int{3}, []float32{1}},
	} {
		if _, err := bad.AsFloat32(); err == nil {
			t.Errorf("AsFloat32 of %s succeeded", bad)
		}
	}
}

func TestCast(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	cases := []struct {
		name string
		in   *Tensor
		to   DType
		opts CastOptions
		want any
	}{
		{"float to int32 truncates", FromFloat32([]float32{2.7, -2.7, 0.5, -0.5}, 4), Int32, CastOptions{}, []int32{2, -2, 0, 0}},
		{"float to int8 saturates", FromFloat32([]float32{300, -300, nan, inf}, 4), Int8, CastOptions{}, []int8{127, -128, 0, 127}},
		{"float to uint8", FromFloat32([]float32{-1, 255.9, 256}, 3), Uint8, CastOptions{}, []uint8{0, 255, 255}},
		{"float to int64", FromFloat32([]float32{-1e30, 1e30, 3.9}, 3), Int64, CastOptions{}, []int64{math.MinInt64, math.MaxInt64, 3}},
		{"float to uint64", FromFloat32([]float32{-1, 1e30, 7.5}, 3), Uint64, CastOptions{}, []uint64{0, math.MaxUint64, 7}},
		{"float to int4 rounds even and clamps", FromFloat32([]float32{2.5, 3.5, -9, 100, nan}, 5), Int4, CastOptions{}, []int8{2, 4, -8, 7, 0}},
		{"float to uint2", FromFloat32([]float32{-1, 1.5, 9}, 3), Uint2, CastOptions{}, []uint8{0, 2, 3}},
		{"float to bool", FromFloat32([]float32{0, float32(math.Copysign(0, -1)), 2, nan}, 4), Bool, CastOptions{}, []bool{false, false, true, true}},
		{"float to float16", FromFloat32([]float32{1, 65520}, 2), Float16, CastOptions{}, []uint16{0x3C00, 0x7C00}},
		{"float to bfloat16", FromFloat32([]float32{1}, 1), BFloat16, CastOptions{}, []uint16{0x3F80}},
		{"float to e4m3fn saturates", FromFloat32([]float32{1000, -inf}, 2), Float8E4M3FN, CastOptions{}, []uint8{0x7E, 0xFE}},
		{"float to e4m3fn no saturate", FromFloat32([]float32{1000}, 1), Float8E4M3FN, CastOptions{NoSaturate: true}, []uint8{0x7F}},
		{"float to e5m2 no saturate", FromFloat32([]float32{1e6}, 1), Float8E5M2, CastOptions{NoSaturate: true}, []uint8{0x7C}},
		{"float to e8m0 down", FromFloat32([]float32{3}, 1), Float8E8M0, CastOptions{E8M0Rounding: E8M0Down}, []uint8{128}},
		{"float to e8m0 up", FromFloat32([]float32{3}, 1), Float8E8M0, CastOptions{}, []uint8{129}},
		{"float to fp4", FromFloat32([]float32{2.5, 7}, 2), Float4E2M1, CastOptions{}, []uint8{4, 7}},
		{"float to double", FromFloat32([]float32{0.1}, 1), Double, CastOptions{}, []float64{float64(float32(0.1))}},
		{"double to float16 rounds once", &Tensor{Double, []int{1}, []float64{1 + 1.0/2048 + 1e-12}}, Float16, CastOptions{}, []uint16{0x3C01}},
		{"double to int16", &Tensor{Double, []int{2}, []float64{-1.9, 1e10}}, Int16, CastOptions{}, []int16{-1, 32767}},
		{"float16 to float", &Tensor{Float16, []int{1}, []uint16{0xC000}}, Float, CastOptions{}, []float32{-2}},
		{"e4m3fn to int32", &Tensor{Float8E4M3FN, []int{1}, []uint8{0x7E}}, Int32, CastOptions{}, []int32{448}},
		{"int to int wraps", FromInt64([]int64{300, -129}, 2), Int8, CastOptions{}, []int8{44, 127}},
		{"int to uint8 wraps", &Tensor{Int32, []int{1}, []int32{-1}}, Uint8, CastOptions{}, []uint8{255}},
		{"int to int4 clamps", FromInt64([]int64{300, -9, 3}, 3), Int4, CastOptions{}, []int8{7, -8, 3}},
		{"uint64 to int4 clamps", &Tensor{Uint64, []int{1}, []uint64{math.MaxUint64}}, Int4, CastOptions{}, []int8{7}},
		{"uint64 to float", &Tensor{Uint64, []int{1}, []uint64{math.MaxUint64}}, Float, CastOptions{}, []float32{1.8446744e19}},
		{"int to float", FromInt64([]int64{-3}, 1), Float, CastOptions{}, []float32{-3}},
		{"int to float16", &Tensor{Int8, []int{1}, []int8{-3}}, Float16, CastOptions{}, []uint16{0xC200}},
		{"int to bool", &Tensor{Int32, []int{2}, []int32{0, -5}}, Bool, CastOptions{}, []bool{false, true}},
		{"bool to int64", &Tensor{Bool, []int{2}, []bool{true, false}}, Int64, CastOptions{}, []int64{1, 0}},
		{"bool to float", &Tensor{Bool, []int{2}, []bool{true, false}}, Float, CastOptions{}, []float32{1, 0}},
		{"int4 to float", &Tensor{Int4, []int{1}, []int8{-8}}, Float, CastOptions{}, []float32{-8}},
		{"int to complex", &Tensor{Int32, []int{1}, []int32{2}}, Complex64, CastOptions{}, []complex64{2}},
		{"complex widen", &Tensor{Complex64, []int{1}, []complex64{complex(1, 2)}}, Complex128, CastOptions{}, []complex128{complex(1, 2)}},
		{"same type copies", FromFloat32([]float32{1}, 1), Float, CastOptions{}, []float32{1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CastWith(tc.in, tc.to, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != tc.to || !reflect.DeepEqual(got.Shape, tc.in.Shape) {
				t.Fatalf("got %s, want %s%v", got, tc.to, tc.in.Shape)
			}
			if !reflect.DeepEqual(got.Data, tc.want) {
				t.Fatalf("got %v, want %v", got.Data, tc.want)
			}
		})
	}
	src := FromFloat32([]float32{1}, 1)
	c, _ := Cast(src, Float)
	c.Float32s()[0] = 5
	if src.Float32s()[0] != 1 {
		t.Error("Cast to the same type aliases the input")
	}
	for _, bad := range []struct {
		in *Tensor
		to DType
	}{
		{&Tensor{String, []int{1}, []string{"1"}}, Float},
		{FromFloat32([]float32{1}, 1), String},
		{&Tensor{Complex64, []int{1}, []complex64{1}}, Float},
		{FromFloat32([]float32{1}, 1), DType(99)},
		{FromFloat32([]float32{1}, 2), Int8},
	} {
		if _, err := Cast(bad.in, bad.to); err == nil {
			t.Errorf("Cast %s to %s succeeded", bad.in, bad.to)
		}
	}
}

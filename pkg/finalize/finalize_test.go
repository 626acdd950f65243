package finalize

import (
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func intPtr(i int) *int { return &i }

func TestGroupRanges(t *testing.T) {
	tests := []struct {
		name        string
		shape       []int
		axis, block int
		wantMin     []float32
		wantMax     []float32
	}{
		{"per tensor", []int{2, 3}, -1, 0, []float32{-3}, []float32{6}},
		{"per channel axis 0", []int{2, 3}, 0, 0, []float32{-3, 4}, []float32{2, 6}},
		{"per channel axis 1", []int{2, 3}, 1, 0, []float32{1, 2, -3}, []float32{4, 5, 6}},
		// Blocks of 2 along axis 1 of a 2×3 tensor: [1 2 | -3], [4 5 | 6].
		{"per block axis 1", []int{2, 3}, 1, 2, []float32{1, -3, 4, 6}, []float32{2, -3, 5, 6}},
	}
	data := []float32{1, 2, -3, 4, 5, 6}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mins, maxs, err := GroupRanges(data, tt.shape, tt.axis, tt.block)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(mins, tt.wantMin) || !slices.Equal(maxs, tt.wantMax) {
				t.Errorf("GroupRanges = %v %v, want %v %v", mins, maxs, tt.wantMin, tt.wantMax)
			}
		})
	}
}

func TestQuantizeHandComputed(t *testing.T) {
	int8sym := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric}
	int4 := &spec.QuantizationSpec{DType: spec.Int4, QScheme: spec.Symmetric}
	uint8a := &spec.QuantizationSpec{DType: spec.UInt8, QScheme: spec.Asymmetric}
	tests := []struct {
		name        string
		s           *spec.QuantizationSpec
		data        []float32
		shape       []int
		axis, block int
		p           plan.Params
		want        any
	}{
		// Per channel on axis 0: row 0 scale 0.5, row 1 scale 2; 2.5/0.5 =
		// 5, 1.25/0.5 = 2.5 → 2 (half to even), 300/2 saturates at 127.
		{"int8 per channel", int8sym, []float32{2.5, 1.25, -4, 300, -1, 3}, []int{2, 3}, 0, 0,
			plan.Params{Scales: []float32{0.5, 2}, ZeroPoints: []int32{0, 0}}, []int8{5, 2, -8, 127, 0, 2}},
		// Blocks of 2 along axis 1 of [1, 4]: scales 1 and 0.25; int4 saturates at ±7/-8.
		{"int4 per block", int4, []float32{3, -9, 0.5, -0.25}, []int{1, 4}, 1, 2,
			plan.Params{Scales: []float32{1, 0.25}, ZeroPoints: []int32{0, 0}}, []int8{3, -8, 2, -1}},
		// Asymmetric uint8, zero point 10: 0 → 10, -1/0.1 = -10 → 0, 25.5/0.1 → 265 saturates.
		{"uint8 asymmetric", uint8a, []float32{0, -1, 25.5, 0.05}, []int{4}, -1, 0,
			plan.Params{Scales: []float32{0.1}, ZeroPoints: []int32{10}}, []uint8{10, 0, 255, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Quantize(tt.data, tt.shape, tt.axis, tt.block, tt.s, &tt.p)
			if err != nil {
				t.Fatal(err)
			}
			switch want := tt.want.(type) {
			case []int8:
				if got := q.Data.([]int8); !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			case []uint8:
				if got := q.Data.([]uint8); !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			}
		})
	}
}

// TestInt4Packing checks that an int4 weight is stored packed two per byte,
// low nibble first, through pkg/tensor.
func TestInt4Packing(t *testing.T) {
	s := &spec.QuantizationSpec{DType: spec.Int4, QScheme: spec.Symmetric}
	q, err := Quantize([]float32{1, 2, 3, -3, -8}, []int{5}, -1, 0, s, &plan.Params{Scales: []float32{1}, ZeroPoints: []int32{0}})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := tensor.ToProto(q, "w")
	if err != nil {
		t.Fatal(err)
	}
	// (2<<4)|1 = 0x21, (-3&0xF)<<4 | 3 = 0xD3, -8 & 0xF = 0x08.
	if want := []byte{0x21, 0xD3, 0x08}; !slices.Equal(tp.RawData, want) {
		t.Errorf("packed % x, want % x", tp.RawData, want)
	}
}

// biasModel loads testmodels.ConvBias.
func biasModel(t *testing.T, bias []float32) *onnxgraph.Model {
	t.Helper()
	m, err := onnxgraph.LoadBytes(testmodels.ConvBias(bias).Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func biasPlan(wScales []float32, axis int) *plan.Plan {
	act := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric}
	w := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric, Granularity: spec.Granularity{Type: spec.PerChannel, Axis: intPtr(0)}}
	p := &plan.Plan{Stage: plan.Calibrated}
	for _, tp := range []*plan.TensorPlan{
		{Value: "x", Role: plan.Activation, Spec: act, Nodes: []string{"conv"}, Axis: -1,
			Params: &plan.Params{Scales: []float32{0.01}, ZeroPoints: []int32{0}}},
		{Value: "W", Role: plan.Weight, Spec: w, Nodes: []string{"conv"}, Axis: axis, Shape: []int{2, 1, 1, 1},
			Params: &plan.Params{Scales: wScales, ZeroPoints: make([]int32, len(wScales))}},
		{Value: "B", Role: plan.Bias, Nodes: []string{"conv"}, Input: "x", Weight: "W", Axis: axis,
			Params: biasParams(0.01, wScales, axis)},
	} {
		if err := p.Add(tp); err != nil {
			panic(err)
		}
	}
	return p
}

// biasParams are the int32 bias qparams the qparams pass decides: input
// scale × weight scale, in float32.
func biasParams(in float32, w []float32, axis int) *plan.Params {
	if axis < 0 {
		w = w[:1]
	}
	p := &plan.Params{ZeroPoints: make([]int32, len(w))}
	for _, s := range w {
		p.Scales = append(p.Scales, in*s)
	}
	return p
}

func initData(t *testing.T, m *onnxgraph.Model, name string) *tensor.Tensor {
	t.Helper()
	v := m.Graph.Value(name)
	if v == nil || v.Const == nil {
		t.Fatalf("no initializer %q", name)
	}
	x, err := tensor.FromProto(v.Const, m)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestBiasInt32 checks the int32 codes of a bias written with the plan's
// scales: 0.3 / (0.01·0.004) = 7500, -0.2 / (0.01·0.008) = -2500.
func TestBiasInt32(t *testing.T) {
	m := biasModel(t, []float32{0.3, -0.2})
	r, err := Write(m, biasPlan([]float32{0.004, 0.008}, 0), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := initData(t, r.Model, "B_quantized").Data.([]int32); !slices.Equal(got, []int32{7500, -2500}) {
		t.Errorf("bias codes %v, want [7500 -2500]", got)
	}
	if got := initData(t, r.Model, "W_quantized").Data.([]int8); !slices.Equal(got, []int8{125, -125}) {
		t.Errorf("weight codes %v, want [125 -125]", got)
	}
}

// TestOpsetRaise checks the opset policy: raised only as far as the
// content needs, refused when an op of the model changed meaning on the
// way, and com.microsoft Q/DQ when a pin is below 21 for int4.
func TestOpsetRaise(t *testing.T) {
	build := func(opset int64, softmax bool) *onnxgraph.Model {
		b := testmodels.New("m", opset)
		b.Input("x", tensor.Float, 4, 4).Output("y", tensor.Float, 4, 4)
		b.RandomInit("W", 0.5, 4, 4)
		out := "y"
		if softmax {
			out = "h"
		}
		b.Node("MatMul", "mm", []string{"x", "W"}, []string{out})
		if softmax {
			b.Node("Softmax", "sm", []string{"h"}, []string{"y"})
		}
		m, err := onnxgraph.LoadBytes(b.Bytes(), "")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	weightPlan := func(m *onnxgraph.Model, dt spec.DType, g spec.Granularity, axis, block int) *plan.Plan {
		s := &spec.QuantizationSpec{DType: dt, QScheme: spec.Symmetric, Granularity: g}
		v := m.Graph.Value("W")
		x, _ := tensor.FromProto(v.Const, m)
		data, _ := x.AsFloat32()
		mins, maxs, err := GroupRanges(data, x.Shape, axis, block)
		if err != nil {
			t.Fatal(err)
		}
		sc, zp, err := s.QParams(mins, maxs)
		if err != nil {
			t.Fatal(err)
		}
		p := &plan.Plan{Stage: plan.Calibrated}
		_ = p.Add(&plan.TensorPlan{Value: "W", Role: plan.Weight, Spec: s, Nodes: []string{"mm"}, Axis: axis, BlockSize: block,
			Shape: x.Shape, Params: &plan.Params{Scales: sc, ZeroPoints: zp}})
		return p
	}
	perChannel := spec.Granularity{Type: spec.PerChannel, Axis: intPtr(1)}
	tests := []struct {
		name      string
		opset     int64
		softmax   bool
		dt        spec.DType
		g         spec.Granularity
		axis, blk int
		pin       int64
		wantOpset int64
		wantIR    int64
		wantMS    bool
		wantErr   string
	}{
		{"int8 per channel raises 11 to 13", 11, false, spec.Int8, perChannel, 1, 0, 0, 13, 8, false, ""},
		{"int8 per tensor keeps 11", 11, false, spec.Int8, spec.Granularity{}, -1, 0, 0, 11, 8, false, ""},
		{"softmax adapted from 11 to 13", 11, true, spec.Int8, perChannel, 1, 0, 0, 13, 8, false, ""},
		{"int4 per channel raises to 21", 17, true, spec.Int4, perChannel, 1, 0, 0, 21, 10, false, ""},
		{"int4 pinned at 17 uses com.microsoft", 17, true, spec.Int4, perChannel, 1, 0, 17, 17, 10, true, ""},
		{"int4 per block cannot pin 17", 17, true, spec.Int4, spec.Granularity{Type: spec.PerBlock, Axis: intPtr(0), BlockSize: 2}, 0, 2, 17, 0, 0, false, "needs opset 21"},
		{"fp8 raises to 19", 17, false, spec.Float8E4M3FN, spec.Granularity{}, -1, 0, 0, 19, 9, false, ""},
		{"pin below the model", 17, false, spec.Int8, spec.Granularity{}, -1, 0, 13, 0, 0, false, "does not lower"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := build(tt.opset, tt.softmax)
			r, err := Write(m, weightPlan(m, tt.dt, tt.g, tt.axis, tt.blk), Options{Opset: tt.pin})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Opset != tt.wantOpset || r.IRVersion != tt.wantIR {
				t.Errorf("opset %d IR %d, want %d and %d", r.Opset, r.IRVersion, tt.wantOpset, tt.wantIR)
			}
			var dq string
			for _, n := range r.Model.Graph.Nodes {
				if n.OpType == "DequantizeLinear" {
					dq = n.Domain
				}
			}
			if (dq == "com.microsoft") != tt.wantMS {
				t.Errorf("DequantizeLinear domain %q, com.microsoft wanted: %v", dq, tt.wantMS)
			}
			if tt.wantMS && r.Model.Opset("com.microsoft") != 1 {
				t.Errorf("com.microsoft opset %d, want 1", r.Model.Opset("com.microsoft"))
			}
		})
	}
}

// TestWriteLeavesInputAlone checks that Write edits neither the model nor
// the plan it is given.
func TestWriteLeavesInputAlone(t *testing.T) {
	m := biasModel(t, []float32{100, 0.5})
	before := m.Proto.String()
	p := biasPlan([]float32{1e-9, 0.008}, 0)
	if _, err := Write(m, p, Options{}); err != nil {
		t.Fatal(err)
	}
	if m.Proto.String() != before {
		t.Error("Write changed the input model")
	}
	if p.Tensor("W").Params.Scales[0] != 1e-9 || p.Tensor("B").Params.Scales[0] != float32(0.01)*1e-9 {
		t.Error("Write changed the plan's qparams")
	}
}

// TestWriteNeedsStats checks the error when activations have no qparams.
func TestWriteNeedsStats(t *testing.T) {
	m := biasModel(t, []float32{0, 0})
	p := biasPlan([]float32{0.1, 0.1}, 0)
	p.Tensor("x").Params = nil
	_, err := Write(m, p, Options{})
	if err == nil || !strings.Contains(err.Error(), "calibration") {
		t.Fatalf("error %v, want one asking for calibration statistics", err)
	}
}

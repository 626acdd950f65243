package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// validPlan is a decided plan of Conv(x, W, B) → Relu → y: x and y int8
// per tensor, y's consumer sharing its qparams as z, W int8 per channel
// along axis 0 of [2, 1, 1, 1], B an int32 bias.
func validPlan() *Plan {
	axis := 0
	act := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric}
	w := &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric, Granularity: spec.Granularity{Type: spec.PerChannel, Axis: &axis}}
	p := &Plan{Stage: QParamsDecided}
	for _, t := range []*TensorPlan{
		{Value: "x", Role: Activation, Spec: act, Nodes: []string{"conv"}, Axis: -1,
			Params: &Params{Scales: []float32{0.5}, ZeroPoints: []int32{0}}},
		{Value: "W", Role: Weight, Spec: w, Nodes: []string{"conv"}, Axis: 0, Shape: []int{2, 1, 1, 1},
			Params: &Params{Scales: []float32{0.25, 0.125}, ZeroPoints: []int32{0, 0}}},
		{Value: "B", Role: Bias, Nodes: []string{"conv"}, Input: "x", Weight: "W", Axis: 0, Shape: []int{2},
			Params: &Params{Scales: []float32{0.125, 0.0625}, ZeroPoints: []int32{0, 0}}},
		{Value: "y", Role: Activation, Spec: act, Nodes: []string{"relu"}, Axis: -1,
			Params: &Params{Scales: []float32{0.1}, ZeroPoints: []int32{-3}}},
		{Value: "z", Role: Activation, Spec: act, Nodes: []string{"out"}, Axis: -1, SharedWith: "y"},
	} {
		t.Rule = config.Rule{File: "test.yaml", Line: 1}
		if err := p.Add(t); err != nil {
			panic(err)
		}
	}
	return p
}

func TestCheckValid(t *testing.T) {
	if err := validPlan().Check(); err != nil {
		t.Fatalf("a valid plan: %v", err)
	}
	// Before the qparams pass, activations and biases may lack params.
	p := validPlan()
	p.Stage = Calibrated
	p.Tensor("x").Params, p.Tensor("y").Params, p.Tensor("B").Params = nil, nil, nil
	if err := p.Check(); err != nil {
		t.Fatalf("a calibrated plan without activation params: %v", err)
	}
	// A per-block weight spec applied per channel (one block covers the
	// input channels) is valid.
	p = validPlan()
	axis := 1
	p.Tensor("W").Spec = &spec.QuantizationSpec{DType: spec.Int4, QScheme: spec.Symmetric,
		Granularity: spec.Granularity{Type: spec.PerBlock, Axis: &axis, BlockSize: 32}}
	if err := p.Check(); err != nil {
		t.Fatalf("a per-block spec applied per channel: %v", err)
	}
}

// TestCheckCatches breaks one invariant of a valid plan per case; Check
// must report it, naming the tensor.
func TestCheckCatches(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(p *Plan)
		want    string
	}{
		{"planned twice", func(p *Plan) { p.Tensors = append(p.Tensors, p.Tensors[0]) }, `activation "x": planned twice`},
		{"no node", func(p *Plan) { p.Tensor("y").Nodes = nil }, `activation "y": quantized for no node`},
		{"only float nodes", func(p *Plan) { p.Skipped = []Skip{{Node: "relu", OpType: "Relu", Reason: "excluded"}} },
			`activation "y": quantized only for nodes left in float`},
		{"palettized and quantized", func(p *Plan) { p.Palettes = []*PalettePlan{{Value: "W"}} }, `weight "W" is both palettized and quantized`},
		{"activation without spec", func(p *Plan) { p.Tensor("x").Spec = nil }, `activation "x": no spec`},
		{"bias with spec", func(p *Plan) { p.Tensor("B").Spec = p.Tensor("x").Spec }, `bias "B": an int32 bias with a spec`},
		{"bias input not planned", func(p *Plan) { p.Tensor("B").Input = "nope" }, `bias "B": input "nope" is not a planned activation`},
		{"bias weight is an activation", func(p *Plan) { p.Tensor("B").Weight = "y" }, `bias "B": weight "y" is not a planned weight`},
		{"per tensor with an axis", func(p *Plan) { p.Tensor("x").Axis = 0 }, `activation "x": per tensor along axis 0`},
		{"axis beyond the rank", func(p *Plan) { p.Tensor("W").Axis = 4 }, `weight "W": axis 4 of shape [2 1 1 1]`},
		{"per channel weight without axis", func(p *Plan) { p.Tensor("W").Axis = -1 }, `weight "W": a per channel weight without an axis`},
		{"block size per channel", func(p *Plan) { p.Tensor("W").BlockSize = 2 }, `weight "W": block size 2 along axis 0 under per_channel`},
		{"fixed range on a weight", func(p *Plan) { p.Tensor("W").Fixed = &Range{Min: 0, Max: 1} }, `weight "W": fixed range [0, 1] on a weight`},
		{"reversed fixed range", func(p *Plan) { p.Tensor("y").Fixed = &Range{Min: 1, Max: 0} }, `activation "y": fixed range [1, 0]`},
		{"shared root not planned", func(p *Plan) { p.Tensor("z").SharedWith = "gone" }, `activation "z": shares qparams with "gone", whose group root is not planned`},
		{"sharing cycle", func(p *Plan) {
			p.Tensor("y").SharedWith = "z"
			p.Tensor("y").Params = nil
		}, `shares qparams in a cycle`},
		{"weight shares", func(p *Plan) { p.Tensor("z").SharedWith = "W" }, `activation "z": a activation sharing the qparams of weight "W"`},
		{"shared spec differs", func(p *Plan) {
			p.Tensor("z").Spec = &spec.QuantizationSpec{DType: spec.UInt8, QScheme: spec.Asymmetric}
		}, `activation "z": spec uint8`},
		{"shared with own params", func(p *Plan) {
			p.Tensor("z").Params = &Params{Scales: []float32{0.1}, ZeroPoints: []int32{-3}}
		}, `activation "z": holds params of its own`},
		{"decided without params", func(p *Plan) { p.Tensor("x").Params = nil }, `activation "x": no qparams at stage qparams`},
		{"decided root without params", func(p *Plan) { p.Tensor("y").Params = nil }, `activation "z": no qparams at stage qparams: its group root "y" has none`},
		{"scale and zero point counts", func(p *Plan) { p.Tensor("x").Params.ZeroPoints = nil }, `activation "x": 1 scales and 0 zero points`},
		{"per channel count", func(p *Plan) {
			p.Tensor("W").Params = &Params{Scales: []float32{0.25}, ZeroPoints: []int32{0}}
		}, `weight "W": 1 scales, want 2`},
		{"per block count", func(p *Plan) {
			axis := 1
			w := p.Tensor("W")
			w.Spec = &spec.QuantizationSpec{DType: spec.Int4, QScheme: spec.Symmetric,
				Granularity: spec.Granularity{Type: spec.PerBlock, Axis: &axis, BlockSize: 32}}
			w.Shape, w.Axis, w.BlockSize = []int{2, 64}, 1, 32
		}, `weight "W": 2 scales, want 4`},
		{"zero scale", func(p *Plan) { p.Tensor("y").Params.Scales[0] = 0 }, `activation "y": scale 0 is 0, not finite and positive`},
		{"NaN scale", func(p *Plan) { p.Tensor("W").Params.Scales[1] = float32(math.NaN()) }, `weight "W": scale 1 is NaN`},
		{"infinite scale", func(p *Plan) { p.Tensor("y").Params.Scales[0] = float32(math.Inf(1)) }, `activation "y": scale 0 is +Inf`},
		{"zero point out of int8", func(p *Plan) { p.Tensor("y").Params.ZeroPoints[0] = 128 }, `activation "y": zero point 0 is 128, outside [-128, 127] of int8`},
		{"zero point of a float dtype", func(p *Plan) {
			y := p.Tensor("y")
			y.Spec = &spec.QuantizationSpec{DType: spec.Float8E4M3FN, QScheme: spec.Symmetric}
			p.Tensor("z").Spec = y.Spec
		}, `activation "y": zero point 0 is -3, outside [0, 0] of float8_e4m3fn`},
		{"bias zero point", func(p *Plan) { p.Tensor("B").Params.ZeroPoints[1] = 1 }, `bias "B": zero point 1 is 1, outside [0, 0] of int32 bias`},
		{"bias scale is not the product", func(p *Plan) { p.Tensor("W").Params.Scales[1] = 0.5 }, `bias "B": scale 1 is 0.0625, not input scale × weight scale = 0.25`},
		{"bias input per channel", func(p *Plan) {
			x := p.Tensor("x")
			x.Params = &Params{Scales: []float32{0.5, 0.5}, ZeroPoints: []int32{0, 0}}
		}, `bias "B": input "x" is not quantized per tensor`},
		{"bias without input params", func(p *Plan) {
			p.Stage = Calibrated
			p.Tensor("x").Params = nil
		}, `bias "B": qparams without those of input "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPlan()
			tt.corrupt(p)
			p.reindex()
			err := p.Check()
			if err == nil {
				t.Fatalf("Check passed a plan with %s", tt.name)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "test.yaml:1") && tt.name != "palettized and quantized" {
				t.Errorf("error %q, want it to contain %q and the rule test.yaml:1", err, tt.want)
			}
		})
	}
}

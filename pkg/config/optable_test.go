package config

import (
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/ops/opstest"
)

// TestFakeOpFromTable checks that an op table entry alone makes an op
// type known to the config language: its torch name is a valid op type key
// that selects its nodes, its state names select its constants, and a
// per-channel weight without an axis takes the entry's default axis.
func TestFakeOpFromTable(t *testing.T) {
	const text = `
quantization_config:
  global_config:
    op_type_config:
      fake_linear:
        op_state_spec:
          weight: {dtype: int8, granularity: {type: per_channel}}
          bias: null
        op_input_spec: {X: {dtype: int8}}
`
	if _, err := Parse([]byte(text), "c.yaml"); err == nil || !strings.Contains(err.Error(), "fake_linear") {
		t.Fatalf("before the entry is added, fake_linear should be an unknown op type; got %v", err)
	}
	opstest.Register(t)
	cfg := mustParse(t, "c.yaml", text)
	res, err := Resolve(cfg.Quant, opstest.Model(t).Graph)
	if err != nil {
		t.Fatal(err)
	}
	nr := res.Node("fake_linear")
	if nr == nil || nr.Call == nil || nr.Call.Type != "fake_linear" {
		t.Fatalf("node fake_linear: call %+v, want type fake_linear", nr)
	}
	if rr := res.Node("fake_relu"); rr == nil || rr.Call == nil || rr.Call.Type != "fake_relu" {
		t.Fatalf("node fake_relu: call %+v, want type fake_relu", rr)
	}
	if len(nr.Tensors) == 0 {
		t.Fatal("fake_linear resolved no tensors")
	}
	for _, tr := range nr.Tensors {
		switch {
		case tr.Value == "w":
			if tr.Key != "weight" || tr.Spec == nil || tr.Spec.Granularity.Axis == nil || *tr.Spec.Granularity.Axis != 1 {
				t.Errorf("weight: key %q spec %v, want key weight, per_channel axis 1 (the entry's default)", tr.Key, tr.Spec)
			}
		case tr.Value == "b":
			if tr.Key != "bias" || tr.Spec != nil {
				t.Errorf("bias: key %q spec %v, want key bias, not quantized", tr.Key, tr.Spec)
			}
		case tr.Value == "r":
			if tr.Spec == nil {
				t.Errorf("input X: not quantized, want int8 from op_input_spec X")
			}
		}
	}
}

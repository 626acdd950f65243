package finalize

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/config"
)

// TestRuleMetadata: every inserted QuantizeLinear and DequantizeLinear
// records the config rule of its tensor under RuleMetadataKey.
func TestRuleMetadata(t *testing.T) {
	m := biasModel(t, []float32{0.3, -0.2})
	p := biasPlan([]float32{0.004, 0.008}, 0)
	rules := map[string]config.Rule{
		"x": {File: "q.yaml", Line: 7, Path: "quantization_config.global_config.op_input_spec"},
		"W": {File: "q.yaml", Line: 12, Path: "quantization_config.global_config.op_state_spec.weight"},
		"B": {File: "q.yaml", Line: 12, Path: "quantization_config.global_config.op_state_spec.weight"},
	}
	for v, r := range rules {
		p.Tensor(v).Rule = r
	}
	r, err := Write(m, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"x_QuantizeLinear":   "q.yaml:7 (quantization_config.global_config.op_input_spec)",
		"x_DequantizeLinear": "q.yaml:7 (quantization_config.global_config.op_input_spec)",
		"W_DequantizeLinear": "q.yaml:12 (quantization_config.global_config.op_state_spec.weight)",
		"B_DequantizeLinear": "q.yaml:12 (quantization_config.global_config.op_state_spec.weight)",
	}
	seen := 0
	for _, n := range r.Model.Graph.Nodes {
		if n.OpType != "QuantizeLinear" && n.OpType != "DequantizeLinear" {
			continue
		}
		seen++
		got, ok := n.Metadata(RuleMetadataKey)
		if w, known := want[n.Name]; !known || !ok || got != w {
			t.Errorf("node %q: %s = %q (present %v), want %q", n.Name, RuleMetadataKey, got, ok, want[n.Name])
		}
	}
	if seen != len(want) {
		t.Errorf("%d Q/DQ nodes, want %d", seen, len(want))
	}
}

// TestRandomDataMetadata: Options.RandomData marks the written model, and
// only then.
func TestRandomDataMetadata(t *testing.T) {
	m := biasModel(t, []float32{0.3, -0.2})
	for _, random := range []bool{false, true} {
		r, err := Write(m, biasPlan([]float32{0.004, 0.008}, 0), Options{RandomData: random})
		if err != nil {
			t.Fatal(err)
		}
		marked := 0
		for _, kv := range r.Model.Proto.GetMetadataProps() {
			if kv.GetKey() == CalibrationDataMetadataKey && kv.GetValue() == "random" {
				marked++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[random]; marked != want {
			t.Errorf("RandomData %v: %d markers, want %d", random, marked, want)
		}
	}
}

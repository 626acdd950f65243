package config

import (
	"testing"

	"github.com/coreaiq/coreaiq/pkg/spec"
)

// TestTargetConfigs: each target's default config gives its activation
// spec to every activation and its weight spec to every weight (generic:
// the default preset), and the ort-x86 preset is the ort-x86 target's
// defaults written out.
func TestTargetConfigs(t *testing.T) {
	for _, name := range TargetNames() {
		t.Run(name, func(t *testing.T) {
			target := Targets[name]
			cfg, err := target.Config()
			if err != nil {
				t.Fatal(err)
			}
			res := mustResolve(t, cfg, false)
			want := map[bool]spec.QuantizationSpec{false: target.Activation, true: target.Weight}
			checked := map[bool]int{}
			for _, nr := range res.Nodes {
				for _, tr := range nr.Tensors {
					if tr.Spec == nil || tr.Label() == "bias" {
						continue
					}
					isWeight := tr.Label() == "weight"
					checked[isWeight]++
					w := want[isWeight]
					got := tr.Spec.Clone()
					got.Granularity.Axis = w.Granularity.Axis
					if g, w := got.String(), w.Resolved(isWeight).String(); g != w {
						t.Errorf("%s %s: %s, want %s", nr.Node.Name, tr.Label(), g, w)
					}
				}
			}
			if checked[false] == 0 || checked[true] == 0 {
				t.Errorf("%d activations and %d weights checked, want some of each", checked[false], checked[true])
			}
		})
	}
	p, err := Preset("ort-x86")
	if err != nil {
		t.Fatal(err)
	}
	x86, err := Targets["ort-x86"].Config()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := specsOf(mustResolve(t, p, false)), specsOf(mustResolve(t, x86, false)); a != b {
		t.Errorf("preset ort-x86 resolves differently from target ort-x86's defaults:\n%s\nvs\n%s", a, b)
	}
}

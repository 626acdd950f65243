package passes

import (
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/ops/opstest"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// TestFakeOpFromTable checks that an op table entry alone is enough for
// prepare to quantize an op type: the compute op's weight per channel on
// the entry's axis and its bias as int32, and the activation's
// op-intrinsic qscheme and its fusion after the Conv (no Q/DQ between).
func TestFakeOpFromTable(t *testing.T) {
	before := preparePreset(t, opstest.Model(t), "w8a8", PrepareOptions{})
	if before.Tensor("w") != nil {
		t.Fatalf("before the entries are added, prepare quantizes FakeLinear's weight: %+v", before.Tensor("w"))
	}
	opstest.Register(t)
	plan := preparePreset(t, opstest.Model(t), "w8a8", PrepareOptions{})
	w := plan.Tensor("w")
	if w == nil || w.Role != Weight || w.Axis != 1 {
		t.Fatalf("weight w: %+v, want a weight quantized on axis 1 (the entry's per-channel axis)", w)
	}
	if b := plan.Tensor("b"); b == nil || b.Role != Bias || b.Weight != "w" {
		t.Errorf("bias b: %+v, want the int32 bias of w", b)
	}
	r := plan.Tensor("r")
	if r == nil || r.Role != Activation {
		t.Fatalf("FakeRelu output r: %+v, want a quantized activation", r)
	}
	if r.Spec.QScheme != spec.Asymmetric || !strings.Contains(r.Intrinsic, "FakeRelu output is non-negative") {
		t.Errorf("r: %s, intrinsic %q; want asymmetric by FakeRelu's op-intrinsic rule", r.Spec, r.Intrinsic)
	}
	if c := plan.Tensor("c"); c != nil {
		t.Errorf("Conv output c is quantized (%+v); the FakeRelu after it is an activation fused into the Conv", c)
	}
	if got := SupportedOps(); !hasOp(got, "FakeLinear") || !hasOp(got, "FakeRelu") {
		t.Errorf("SupportedOps does not list the fake ops")
	}
}

func hasOp(list []OpSupport, op string) bool {
	for _, s := range list {
		if s.OpType == op {
			return true
		}
	}
	return false
}

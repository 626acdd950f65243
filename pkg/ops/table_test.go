package ops

import (
	"reflect"
	"testing"
)

// TestTableConsistent checks the facts that entries must agree on.
func TestTableConsistent(t *testing.T) {
	for i := 1; i < len(entries); i++ {
		if entries[i-1].Type >= entries[i].Type {
			t.Errorf("entries out of order: %s before %s", entries[i-1].Type, entries[i].Type)
		}
	}
	torch := map[string]Torch{}
	for _, op := range All() {
		if !IsONNX(op.Type) {
			t.Errorf("%s: not an ONNX op type", op.Type)
		}
		if q := op.Quant; q != nil && q.Kind == Compute {
			if op.Weight == nil || op.States[1] != "weight" {
				t.Errorf("%s: a compute op needs weight axes and input 1 named weight", op.Type)
			}
			if q.Bias > 0 && op.States[q.Bias] != "bias" {
				t.Errorf("%s: bias input %d is not named bias", op.Type, q.Bias)
			}
		}
		if op.Weight != nil && !hasState(op, "weight") {
			t.Errorf("%s: weight axes without a weight state", op.Type)
		}
		for _, x := range op.Torch {
			prev, seen := torch[x.Name]
			if seen && (!reflect.DeepEqual(prev.Args, x.Args) || !reflect.DeepEqual(prev.States, x.States) || !reflect.DeepEqual(prev.Targets, x.Targets)) {
				t.Errorf("torch op %s: entries disagree on its arguments", x.Name)
			}
			torch[x.Name] = x
		}
	}
	for _, p := range Patterns() {
		for _, op := range p.OpTypes() {
			if _, ok := Lookup(op); !ok {
				t.Errorf("pattern %s: op %s has no entry", p.Name, op)
			}
		}
	}
}

func hasState(op *Op, name string) bool {
	for _, s := range op.States {
		if s == name {
			return true
		}
	}
	return false
}

// TestRegisterRestores checks that Register's restore undoes an addition
// and a replacement.
func TestRegisterRestores(t *testing.T) {
	restore := Register(Op{Type: "NotAnOp"})
	if _, ok := Lookup("NotAnOp"); !ok {
		t.Fatal("registered op not found")
	}
	restore()
	if _, ok := Lookup("NotAnOp"); ok {
		t.Fatal("restore left the op in the table")
	}
	orig, _ := Lookup("Relu")
	restore = Register(Op{Type: "Relu"})
	if op, _ := Lookup("Relu"); op.Quant != nil {
		t.Fatal("replacement not seen")
	}
	restore()
	if op, _ := Lookup("Relu"); op != orig {
		t.Fatal("restore did not bring the entry back")
	}
}

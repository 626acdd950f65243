package passes

import (
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestShapeArithmeticNotQuantized: values without value_info computed from
// Shape are int64; the w8a8 plan must not put Q/DQ on them, while the float
// path through the same op types is quantized.
func TestShapeArithmeticNotQuantized(t *testing.T) {
	b := testmodels.New("shapes", 17)
	b.Input("x", tensor.Float, "N", 4).Output("y", tensor.Float, "N", 4)
	b.InitInt64("two", []int64{1}, []int64{2}).InitInt64("idx", []int64{}, []int64{0})
	b.Init("k", []int64{1}, []float32{0.5})
	b.Node("Shape", "shape", []string{"x"}, []string{"s"})
	b.Node("Mul", "mul_int", []string{"s", "two"}, []string{"s2"})
	b.Node("Cast", "cast", []string{"s2"}, []string{"sf"}, testmodels.AttrInt("to", int64(tensor.Float)))
	b.Node("Mul", "mul_float", []string{"x", "sf"}, []string{"xm"})
	b.Node("Add", "add", []string{"xm", "k"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	types := elemTypes(m.Graph)
	for v, want := range map[string]tensor.DType{"s": tensor.Int64, "s2": tensor.Int64, "sf": tensor.Float, "xm": tensor.Float} {
		if types[v] != want {
			t.Errorf("value %q: type %s, want %s", v, types[v], want)
		}
	}
	cfg, err := config.Preset("w8a8")
	if err != nil {
		t.Fatal(err)
	}
	res, err := config.Resolve(cfg, m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(m, res, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"s", "s2"} {
		if plan.Tensor(v) != nil {
			t.Errorf("int64 value %q is planned for quantization", v)
		}
	}
	for _, v := range []string{"x", "sf", "xm"} {
		if plan.Tensor(v) == nil {
			t.Errorf("float value %q is not planned", v)
		}
	}
}

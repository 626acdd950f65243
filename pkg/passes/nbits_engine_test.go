package passes

import (
	"context"
	"fmt"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels/llama"
	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// nbitsCase is a model and inputs for the MatMulNBits tests.
type nbitsCase struct {
	name  string
	model func(t *testing.T) *onnxgraph.Model
	input func(m *onnxgraph.Model) map[string]*tensor.Tensor
}

func nbitsCases() []nbitsCase {
	var cases []nbitsCase
	for _, n := range []string{"mlp.onnx", "attention.onnx", "dynamo.onnx"} {
		cases = append(cases, nbitsCase{n, func(t *testing.T) *onnxgraph.Model { return loadTestModel(t, n) },
			func(m *onnxgraph.Model) map[string]*tensor.Tensor { return randomInputs(m, 3) }})
	}
	for _, fp16 := range []bool{false, true} {
		c := llama.Tiny()
		c.FP16, c.Tied = fp16, fp16
		cases = append(cases, nbitsCase{fmt.Sprintf("llama fp16=%v", fp16), func(t *testing.T) *onnxgraph.Model {
			b, err := llama.Bytes(c)
			if err != nil {
				t.Fatal(err)
			}
			m, err := onnxgraph.LoadBytes(b, "")
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, func(*onnxgraph.Model) map[string]*tensor.Tensor {
			return map[string]*tensor.Tensor{"input_ids": tensor.FromInt64([]int64{3, 14, 15, 92, 65, 35}, 2, 3)}
		}})
	}
	return cases
}

// nbitsConfigs are the w4 preset (symmetric: MatMulNBits' implicit zero
// point 8) and asymmetric uint4 blocks of 16 (packed zero points).
func nbitsConfigs(t *testing.T) map[string]*config.QuantizerConfig {
	asym, err := config.Parse([]byte(`quantization_spec:
  weight: &weight
    dtype: uint4
    qscheme: asymmetric
    granularity: { type: per_block, block_size: 16 }
quantization_config:
  global_config:
    op_input_spec: null
    op_output_spec: null
    op_state_spec:
      weight: *weight
`), "asym.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w4, err := config.Preset("w4")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*config.QuantizerConfig{"w4": w4, "uint4-asymmetric": asym.Quant}
}

func writeFormat(t *testing.T, m *onnxgraph.Model, cfg *config.QuantizerConfig, f finalize.Format) *onnxgraph.Model {
	t.Helper()
	u := &Unit{Model: m, Config: cfg, Write: finalize.Options{Format: f}}
	if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return u.Result.Model
}

// TestEngineRunsMatMulNBits: the built-in engine runs the MatMulNBits
// model coreaiq writes and gets exactly what it gets from the QDQ model of
// the same weights (the same dequantized weights, the same GEMM).
func TestEngineRunsMatMulNBits(t *testing.T) {
	for _, c := range nbitsCases() {
		for qn, cfg := range nbitsConfigs(t) {
			t.Run(c.name+"/"+qn, func(t *testing.T) {
				m := c.model(t)
				qdq, nb := writeFormat(t, m, cfg, finalize.FormatQDQ), writeFormat(t, m, cfg, finalize.FormatORTNBits)
				count := 0
				for _, n := range nb.Graph.Nodes {
					if n.OpType == "MatMulNBits" {
						count++
					}
				}
				if count == 0 {
					t.Fatal("no MatMulNBits written")
				}
				in := c.input(m)
				want, got := enginetest.Run(t, qdq, in), enginetest.Run(t, nb, in)
				for name, w := range want {
					a, err := w.AsFloat32()
					if err != nil {
						t.Fatal(err)
					}
					b, err := got[name].AsFloat32()
					if err != nil {
						t.Fatal(err)
					}
					for i := range a {
						if a[i] != b[i] {
							t.Fatalf("output %q[%d]: QDQ %g, MatMulNBits %g", name, i, a[i], b[i])
						}
					}
				}
			})
		}
	}
}

//go:build ort

package passes

import (
	"context"
	"math"
	"sort"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestMatMulNBitsMatchesQDQ writes the w4 preset in the ort-nbits format
// and checks, in ONNX Runtime, that the MatMulNBits model computes what the
// QDQ int4 model computes: the QDQ model runs unoptimized (DequantizeLinear
// then a float MatMul), the MatMulNBits model with accuracy_level 0 (float
// compute), so they agree to float rounding. Every 4-bit MatMul/Gemm
// weight of these models must be written as MatMulNBits.
func TestMatMulNBitsMatchesQDQ(t *testing.T) {
	lib := ortLibrary(t)
	type tc struct {
		name  string
		model func(t *testing.T) *onnxgraph.Model
		input func(m *onnxgraph.Model) map[string]*tensor.Tensor
	}
	var cases []tc
	for _, n := range []string{"mlp.onnx", "attention.onnx", "dynamo.onnx"} {
		cases = append(cases, tc{n, func(t *testing.T) *onnxgraph.Model { return loadTestModel(t, n) },
			func(m *onnxgraph.Model) map[string]*tensor.Tensor { return randomInputs(m, 3) }})
	}
	dir, _ := sharedModelNames(t)
	for _, n := range []string{"digits_mlp", "digits_lenet", "gpt_decoder", "bert_encoder"} {
		cases = append(cases, tc{n, func(t *testing.T) *onnxgraph.Model {
			if n == "gpt_decoder" || n == "bert_encoder" {
				isShortSkip(t, n)
			}
			return loadShared(t, dir, n, false).model
		}, func(m *onnxgraph.Model) map[string]*tensor.Tensor {
			s := loadShared(t, dir, n, false)
			k := fixedBatch(m, 2)
			for _, v := range s.ref {
				k = min(k, v.Shape[0])
			}
			return batchOf(s.ref, 0, k)
		}})
	}
	configs := nbitsConfigs(t)
	for _, c := range cases {
		for _, q := range []struct {
			name string
			cfg  *config.QuantizerConfig
		}{{"w4", configs["w4"]}, {"uint4-asymmetric", configs["uint4-asymmetric"]}} {
			t.Run(c.name+"/"+q.name, func(t *testing.T) {
				m := c.model(t)
				cfg := q.cfg
				write := func(f finalize.Format) *Unit {
					u := &Unit{Model: m, Config: cfg, Write: finalize.Options{Format: f}}
					if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
						t.Fatal(err)
					}
					return u
				}
				qdq, nb := write(finalize.FormatQDQ), write(finalize.FormatORTNBits)
				nbits, mm := 0, 0
				for _, n := range nb.Result.Model.Graph.Nodes {
					switch {
					case n.OpType == "MatMulNBits" && n.Domain == "com.microsoft":
						nbits++
					case n.OpType == "DequantizeLinear":
						for _, c := range n.Outputs[0].Consumers {
							if c.OpType == "MatMul" || c.OpType == "Gemm" {
								t.Errorf("%s still reads a 4-bit weight through %s", c, n)
							}
						}
					}
				}
				for _, n := range qdq.Result.Model.Graph.Nodes {
					if n.OpType == "MatMul" || n.OpType == "Gemm" {
						if w := n.Inputs[1]; w != nil && w.Producer != nil && w.Producer.OpType == "DequantizeLinear" {
							mm++
						}
					}
				}
				if nbits == 0 || nbits != mm {
					t.Errorf("%d MatMulNBits nodes for %d MatMul/Gemm nodes with 4-bit weights; notes %v", nbits, mm, nb.Result.Notes)
				}
				in := c.input(m)
				ref := runORT(t, lib, qdq.Result.Model, in, ort.SessionOptions{IntraOpThreads: 1, Optimization: ort.OptimizeNone})
				got := runORT(t, lib, nb.Result.Model, in, ort.SessionOptions{IntraOpThreads: 1, Optimization: ort.OptimizeAll})
				names := make([]string, 0, len(ref))
				for n := range ref {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					r, g := ref[n].Float32s(), got[n].Float32s()
					var maxAbs, maxDiff float64
					for i := range r {
						maxAbs = max(maxAbs, math.Abs(float64(r[i])))
						maxDiff = max(maxDiff, math.Abs(float64(r[i])-float64(g[i])))
					}
					t.Logf("%s: max |QDQ − MatMulNBits| %.3g (max |QDQ| %.3g)", n, maxDiff, maxAbs)
					if maxDiff > 1e-4*max(maxAbs, 1) || math.IsNaN(maxDiff) {
						t.Errorf("output %q: MatMulNBits and QDQ differ by %.3g (largest value %.3g)", n, maxDiff, maxAbs)
					}
				}
			})
		}
	}
}

//go:build ort

package passes

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
)

// ortOptimized opens m in ONNX Runtime with every graph optimization on
// and returns the optimized graph ONNX Runtime writes out.
func ortOptimized(t *testing.T, lib *ort.Library, m *onnxgraph.Model) *onnxgraph.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), "optimized.onnx")
	so := ort.SessionOptions{IntraOpThreads: 1, InterOpThreads: 1, Optimization: ort.OptimizeAll, OptimizedModelPath: path}
	e, err := lib.Open(m, so)
	if err != nil {
		t.Fatalf("onnxruntime: %v", err)
	}
	e.Close()
	om, err := onnxgraph.Load(path)
	if err != nil {
		t.Fatalf("optimized model: %v", err)
	}
	return om
}

// opCounts counts op types, with the domain prefixed outside the default.
func opCounts(m *onnxgraph.Model) map[string]int {
	c := map[string]int{}
	for _, n := range m.Graph.Nodes {
		op := n.OpType
		if n.Domain != "" {
			op = n.Domain + "." + op
		}
		c[op]++
	}
	return c
}

func sortedKeys(m map[string]int) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// TestORTFusesX86 quantizes the shared CNNs with the ort-x86 preset and
// checks, in the graph ONNX Runtime optimizes for its CPU provider (its
// optimized-model output), that every Conv, MatMul and Gemm became an
// integer kernel (QLinearConv, QGemm, QLinearMatMul, MatMulIntegerToFloat):
// no float Conv, MatMul or Gemm is left and the only Q/DQ nodes left are
// at the graph's inputs and outputs. research/onnx-format.md §4 lists what
// the fusions need; bench/ortquant measures what they buy.
func TestORTFusesX86(t *testing.T) {
	lib := ortLibrary(t)
	dir, _ := sharedModelNames(t)
	for _, name := range []string{"digits_lenet", "digits_resnet", "digits_mlp", "mobilenetv2", "resnet18"} {
		t.Run(name, func(t *testing.T) {
			if name == "mobilenetv2" || name == "resnet18" {
				isShortSkip(t, name)
			}
			s := loadShared(t, dir, name, false)
			u := quantizeWithData(t, s.model, "ort-x86", s.calib, 16, 8, finalize.Options{})
			om := ortOptimized(t, lib, u.Result.Model)
			c := opCounts(om)
			var ops []string
			for _, op := range sortedKeys(c) {
				ops = append(ops, fmt.Sprintf("%s×%d", op, c[op]))
			}
			t.Logf("optimized graph: %s", strings.Join(ops, " "))
			for _, op := range []string{"Conv", "MatMul", "Gemm", "com.microsoft.FusedConv", "com.microsoft.FusedGemm", "com.microsoft.FusedMatMul"} {
				if c[op] > 0 {
					t.Errorf("%d float %s left unfused", c[op], op)
				}
			}
			fused := c["com.microsoft.QLinearConv"] + c["QLinearConv"] + c["QLinearMatMul"] + c["com.microsoft.QGemm"] + c["com.microsoft.MatMulIntegerToFloat"]
			if fused == 0 {
				t.Errorf("no QLinearConv, QLinearMatMul, QGemm or MatMulIntegerToFloat in the optimized graph")
			}
			// What stays in QDQ form is the graph's boundary: one
			// QuantizeLinear per graph input, one DequantizeLinear per
			// graph output.
			if c["QuantizeLinear"] > len(om.Graph.Inputs) || c["DequantizeLinear"] > len(om.Graph.Outputs) {
				t.Errorf("%d QuantizeLinear and %d DequantizeLinear left for %d inputs and %d outputs: a Q/DQ group was not fused",
					c["QuantizeLinear"], c["DequantizeLinear"], len(om.Graph.Inputs), len(om.Graph.Outputs))
			}
		})
	}
}

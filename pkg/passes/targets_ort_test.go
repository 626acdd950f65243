//go:build ort

package passes

import (
	"context"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

// TestORTTargetX86 quantizes the shared CNNs and transformers for target
// ort-x86 with its defaults and checks in the graph ONNX Runtime optimizes
// (its optimized-model output) that every Conv, MatMul and Gemm became an
// integer kernel, and that every float node ONNX Runtime left between a
// DequantizeLinear and a QuantizeLinear is one the lint reported (nodes
// ONNX Runtime made by fusing float nodes, which the written model does
// not name, are logged).
func TestORTTargetX86(t *testing.T) {
	lib := ortLibrary(t)
	dir, _ := sharedModelNames(t)
	target := config.Targets["ort-x86"]
	heavy := map[string]bool{"mobilenetv2": true, "resnet18": true, "squeezenet1.0-fp32": true, "shufflenet-v2": true,
		"yolox-nano": true, "ppocrv3-det": true, "bert_encoder": true, "gpt_decoder": true}
	for _, name := range []string{"digits_lenet", "digits_resnet", "digits_mlp", "mobilenetv2", "resnet18", "squeezenet1.0-fp32",
		"shufflenet-v2", "yolox-nano", "ppocrv3-det", "bert_encoder", "gpt_decoder"} {
		t.Run(name, func(t *testing.T) {
			if heavy[name] {
				isShortSkip(t, name)
			}
			s := loadShared(t, dir, name, false)
			cfg, err := target.Config()
			if err != nil {
				t.Fatal(err)
			}
			batch := 4
			for _, v := range s.model.Graph.Inputs {
				if dims, ok := v.Shape(); ok && len(dims) > 0 && dims[0].Size > 0 {
					batch = int(dims[0].Size)
				}
			}
			u := &Unit{Model: s.model, Config: cfg, Prepare: PrepareOptions{Target: target},
				Calibrate: EngineCalibrator("go", runtime.Options{}, newMemSource(s.calib, 4),
					calibrate.Options{BatchSize: batch}, nil)}
			if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
				t.Fatal(err)
			}
			om := ortOptimized(t, lib, u.Result.Model)
			c := opCounts(om)
			for _, op := range []string{"Conv", "MatMul", "Gemm", "com.microsoft.FusedConv", "com.microsoft.FusedGemm", "com.microsoft.FusedMatMul"} {
				if c[op] > 0 {
					t.Errorf("%d float %s left unfused", c[op], op)
				}
			}
			linted := map[string]bool{}
			for _, f := range Lint(u.Result.Model, target) {
				linted[f.Node] = true
			}
			for _, f := range OptimizedFindings(om) {
				switch {
				case f.OpType == "ConvTranspose":
					// no integer kernel; the placement leaves it without Q/DQ
				case u.Result.Model.Graph.Node(f.Node) == nil:
					t.Logf("ONNX Runtime's fused node %s: %s", f.Node, f.Reason)
				case !linted[f.Node]:
					t.Errorf("ONNX Runtime leaves %s (%s) in float and the lint did not report it: %s", f.Node, f.OpType, f.Reason)
				}
			}
		})
	}
}

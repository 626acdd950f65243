package passes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testmodels/torchexport"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// guidePlan resolves a config on the guide-shaped torch export and
// prepares it.
func guidePlan(t *testing.T, m *onnxgraph.Model, text string) (*config.Resolution, *Plan) {
	t.Helper()
	return guidePlanNamed(t, m, "g.yaml", text)
}

func guidePlanNamed(t *testing.T, m *onnxgraph.Model, file, text string) (*config.Resolution, *Plan) {
	t.Helper()
	cfg, err := config.Parse([]byte(text), file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(cfg.Quant, m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(m, res, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res, plan
}

func torchExport(t *testing.T, dynamo bool) *onnxgraph.Model {
	t.Helper()
	m, err := onnxgraph.LoadBytes(torchexport.GuideNet(dynamo), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// planned lists the plan's tensors (value and role) that some node of the
// modules asked for.
func planned(plan *Plan, m *onnxgraph.Model, modules ...string) []string {
	in := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		for _, mod := range modules {
			if n.Module == mod {
				in[n.Name] = true
			}
		}
	}
	var out []string
	for _, tp := range plan.Tensors {
		for _, n := range tp.Nodes {
			if in[n] {
				out = append(out, fmt.Sprintf("%s %s", tp.Value, tp.Role))
				break
			}
		}
	}
	return out
}

// TestLinearOpEqualsModule: the guide's two ways to skip linear give the
// same Q/DQ on the Linear modules of a dynamo export, where a Linear on a
// 3-D input is MatMul + Add (no Q/DQ is left between them).
func TestLinearOpEqualsModule(t *testing.T) {
	m := torchExport(t, true)
	_, op := guidePlan(t, m, "quantization_config:\n  global_config:\n    op_type_config:\n      linear: null\n")
	_, mod := guidePlan(t, m, "quantization_config:\n  module_type_configs:\n    torch.nn.modules.linear.Linear: null\n")
	a, b := planned(op, m, "fc", "model.lm_head"), planned(mod, m, "fc", "model.lm_head")
	if strings.Join(a, ",") != strings.Join(b, ",") || len(a) != 0 {
		t.Errorf("op form plans %v, module form %v; want both empty", a, b)
	}
	_, def := guidePlan(t, m, "")
	for _, tp := range def.Tensors {
		if tp.Value == "val_3" { // node_MatMul_5 → node_linear
			t.Errorf("the edge between fc's MatMul and its bias Add is quantized: %+v", tp)
		}
	}
}

// TestResolutionAgreesWithPlan: every activation the resolution shows as
// quantized is planned, or a note says why not (fused activation,
// constant, element type).
func TestResolutionAgreesWithPlan(t *testing.T) {
	for _, dynamo := range []bool{true, false} {
		m := torchExport(t, dynamo)
		res, plan := guidePlan(t, m, "")
		notes := strings.Join(plan.Notes, "\n")
		for _, nr := range res.Nodes {
			for _, tr := range nr.Tensors {
				if tr.Spec == nil || tr.Role == config.RoleState {
					continue
				}
				if plan.Tensor(tr.Value) == nil && !strings.Contains(notes, fmt.Sprintf("%q", tr.Value)) {
					t.Errorf("dynamo=%v: %s %s %q shows as %s but is not planned", dynamo, nr.Node, tr.Label(), tr.Value, tr.Spec)
				}
			}
		}
	}
}

// TestModuleSpecsReachOpsWithoutRule: module_*_spec apply whether or not
// the op has a quantization rule; op-level specs on such an op show as not
// quantized, with the reason, and the entry is warned about.
func TestModuleSpecsReachOpsWithoutRule(t *testing.T) {
	b := testmodels.New("erf", 17)
	b.Input("x", tensor.Float, 1, 8).Output("y", tensor.Float, 1, 8)
	b.Node("Erf", "/blk/Erf", []string{"x"}, []string{"e"})
	b.Node("Relu", "/Relu", []string{"e"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, plan := guidePlan(t, m, "quantization_config:\n  module_name_configs:\n    blk:\n      module_input_spec: {0: {dtype: int8}}\n")
	if tp := plan.Tensor("x"); tp == nil || tp.Role != Activation {
		t.Errorf("module_input_spec on Erf's input: x not planned (%+v)", plan.Tensors)
	}
	res, plan := guidePlan(t, m, "quantization_config:\n  global_config:\n    op_type_config:\n      erf: {op_input_spec: {input: {dtype: int16}}}\n")
	if plan.Tensor("x") != nil {
		t.Error("op-level spec on Erf's input was planned")
	}
	tr := res.Node("/blk/Erf").Tensors[0]
	if tr.Spec != nil || !strings.Contains(tr.Reason, "Erf has no quantization rule") {
		t.Errorf("Erf input 0: spec %v, reason %q", tr.Spec, tr.Reason)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0].Error(), "specs not applied: Erf has no quantization rule") {
		t.Errorf("warnings = %v", res.Warnings)
	}
}

// TestExplicitBiasNull: op_state_spec {bias: null} keeps a bias in float;
// without it the bias is int32.
func TestExplicitBiasNull(t *testing.T) {
	m := torchExport(t, false)
	_, plan := guidePlan(t, m, "")
	if tp := plan.Tensor("conv1.bias"); tp == nil || tp.Role != Bias {
		t.Fatalf("default: conv1.bias = %+v, want an int32 bias", tp)
	}
	_, plan = guidePlan(t, m, "quantization_config:\n  global_config:\n    op_type_config:\n      conv2d: {op_state_spec: {weight: {dtype: int8, granularity: per_channel}, bias: null}}\n")
	if tp := plan.Tensor("conv1.bias"); tp != nil {
		t.Errorf("bias: null: conv1.bias planned as %s (rule %s)", tp.Role, tp.Rule)
	}
}

// TestGuideExamplePlans: every example of the guide (configs/guide)
// prepares to a golden plan on the guide-shaped model as torch's dynamo and
// TorchScript exporters write it.
func TestGuideExamplePlans(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(), "configs", "guide", "*.yaml"))
	if err != nil || len(files) < 11 {
		t.Fatalf("want the guide's 11 examples, found %d (%v)", len(files), err)
	}
	for _, f := range files {
		for _, variant := range []string{"dynamo", "torchscript"} {
			name := strings.TrimSuffix(filepath.Base(f), ".yaml")
			t.Run(name+"/"+variant, func(t *testing.T) {
				text, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				_, plan := guidePlanNamed(t, torchExport(t, variant == "dynamo"), "configs/guide/"+filepath.Base(f), string(text))
				var b bytes.Buffer
				if err := plan.Dump(&b); err != nil {
					t.Fatal(err)
				}
				testutil.Golden(t, filepath.Join("testdata", "guide", name+"."+variant+".txt"), b.Bytes())
			})
		}
	}
}

package passes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// prepareForTarget runs inspect and prepare on m with target's default
// config (or cfg when given) and placement.
func prepareForTarget(t *testing.T, m *onnxgraph.Model, target *config.Target, cfg *config.QuantizerConfig) *Unit {
	t.Helper()
	if cfg == nil {
		var err error
		if cfg, err = target.Config(); err != nil {
			t.Fatal(err)
		}
	}
	u := &Unit{Model: m, Config: cfg, Prepare: PrepareOptions{Target: target}}
	if _, err := Run(context.Background(), u, RunOptions{Until: "prepare"}); err != nil {
		t.Fatalf("target %s: %v", target.Name, err)
	}
	return u
}

// placementSummary is what a placement golden records for one target:
// the planned tensors by role, and by op type the nodes left in float
// with the first node's reason.
func placementSummary(u *Unit, target string) string {
	roles := map[Role]int{}
	for _, tp := range u.Plan.Tensors {
		roles[tp.Role]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "target %s: activations %d, weights %d, biases %d\n", target,
		roles[Activation], roles[Weight], roles[Bias])
	type group struct {
		n     int
		first string
	}
	byOp := map[string]*group{}
	for _, s := range u.Plan.Skipped {
		if s.OpType == "Constant" || strings.HasPrefix(s.Reason, "no quantization rule") {
			continue // the same for every target
		}
		g := byOp[s.OpType]
		if g == nil {
			g = &group{first: s.Node + ": " + s.Reason}
			byOp[s.OpType] = g
		}
		g.n++
	}
	ops := make([]string, 0, len(byOp))
	for op := range byOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		fmt.Fprintf(&b, "  float %s ×%d, e.g. %s\n", op, byOp[op].n, byOp[op].first)
	}
	return b.String()
}

// TestTargetPlacementGolden prepares every shared model for every target
// and compares the placement (planned tensors, nodes left in float and
// why) with testdata/targets/<model>.txt.
func TestTargetPlacementGolden(t *testing.T) {
	dir := testutil.SharedModels(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), "model.onnx")
		if _, err := os.Stat(path); !e.IsDir() || err != nil {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			m, err := onnxgraph.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, name := range config.TargetNames() {
				tg := config.Targets[name]
				b.WriteString(placementSummary(prepareForTarget(t, m, tg, nil), name))
			}
			testutil.Golden(t, filepath.Join("testdata", "targets", e.Name()+".txt"), []byte(b.String()))
		})
	}
}

// TestFastPathWarningNamesRule: a config that forces int8 symmetric
// activations under ort-x86 wins over the target's uint8 default, and the
// warning names its rule (file:line), on a model whose activations have
// several readers (digits_resnet's residual blocks).
func TestFastPathWarningNamesRule(t *testing.T) {
	dir := testutil.SharedModels(t)
	m, err := onnxgraph.Load(filepath.Join(dir, "digits_resnet", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	const yaml = `quantization_config:
  global_config:
    op_input_spec:
      "*": { dtype: int8, qscheme: symmetric, granularity: { type: per_tensor } }
    op_output_spec:
      "*": { dtype: int8, qscheme: symmetric, granularity: { type: per_tensor } }
    op_state_spec:
      weight: { dtype: int8, qscheme: symmetric, granularity: { type: per_channel } }
`
	cfg, err := config.Parse([]byte(yaml), "forced-int8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	target := config.Targets["ort-x86"]
	u := prepareForTarget(t, m, target, cfg.Quant)
	got := FastPathWarnings(u.Model, u.Plan, target)
	if len(got) == 0 {
		t.Fatal("no warning for int8 symmetric activations under ort-x86")
	}
	for _, w := range got {
		if !strings.Contains(w, "forced-int8.yaml:") || !strings.Contains(w, "ort-x86") {
			t.Errorf("warning does not name the rule's file:line and the target: %s", w)
		}
	}
	t.Logf("%s", strings.Join(got, "\n"))
	// The target's own defaults draw no warning.
	if w := FastPathWarnings(u.Model, prepareForTarget(t, m, target, nil).Plan, target); len(w) > 0 {
		t.Errorf("ort-x86 defaults warned: %v", w)
	}
}

// TestFastPathWarningsCountManyRules: a config with an op_name_config
// entry per node, as the accuracy search writes one, draws one warning
// line per file and type once more than fastPathRulesNamed of its rules
// give that type, naming the first rules' lines in order; fewer rules
// keep a line each.
func TestFastPathWarningsCountManyRules(t *testing.T) {
	b := testmodels.New("chain", 17)
	b.Input("x", tensor.Float, "N", 8).Output("y7", tensor.Float, "N", 8)
	in := "x"
	for i := 1; i <= 7; i++ {
		out, w := fmt.Sprintf("y%d", i), fmt.Sprintf("w%d", i)
		b.RandomInit(w, 0.5, 8, 8)
		b.Node("MatMul", fmt.Sprintf("/r%d", i), []string{in, w}, []string{out})
		in = out
	}
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	entry := func(node, dtype string) string {
		return fmt.Sprintf("      /%s:\n        op_output_spec:\n          0: { dtype: %s, qscheme: symmetric, granularity: { type: per_tensor } }\n", node, dtype)
	}
	text := `quantization_config:
  global_config:
    op_input_spec:
      "*": { dtype: uint8, qscheme: asymmetric, granularity: { type: per_tensor } }
    op_output_spec:
      "*": { dtype: uint8, qscheme: asymmetric, granularity: { type: per_tensor } }
    op_state_spec:
      weight: { dtype: int8, qscheme: symmetric, granularity: { type: per_channel } }
    op_name_config:
` + entry("r1", "int16") + entry("r2", "int16") + entry("r3", "int16") + entry("r4", "int16") + entry("r5", "uint16") + entry("r6", "uint16")
	cfg, err := config.Parse([]byte(text), "searched.yaml")
	if err != nil {
		t.Fatal(err)
	}
	target := config.Targets["ort-x86"]
	got := FastPathWarnings(m, prepareForTarget(t, m, target, cfg.Quant).Plan, target)
	want := []string{
		`4 rules of searched.yaml (lines 12, 15, 18, ...) give 4 activations (first "y1") int16`,
		`rule searched.yaml:24 (quantization_config.global_config.op_name_config["/r5"].op_output_spec.0) gives 1 activations (first "y5") uint16`,
		`rule searched.yaml:27 (quantization_config.global_config.op_name_config["/r6"].op_output_spec.0) gives 1 activations (first "y6") uint16`,
	}
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d lines", strings.Join(got, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("warning %d:\n%s\nwant it to start with\n%s", i, got[i], w)
		}
	}
}

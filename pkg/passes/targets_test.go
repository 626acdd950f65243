package passes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
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

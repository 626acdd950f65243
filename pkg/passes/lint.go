package passes

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Finding is one node a target will not run as an integer kernel, and why.
type Finding struct {
	Node   string `json:"node"`
	OpType string `json:"op_type"`
	Reason string `json:"reason"`
}

func (f Finding) String() string { return fmt.Sprintf("%s (%s): %s", f.Node, f.OpType, f.Reason) }

// LintTargetOf is the target whose kernels the lint checks for t: t
// itself, or for a target without an op table, config.LintTarget (the
// model is an ONNX Runtime model).
func LintTargetOf(t *config.Target) *config.Target {
	if t == nil || t.Ops == nil {
		return config.Targets[config.LintTarget]
	}
	return t
}

// Lint lists the nodes of a written QDQ model that target t will run in
// float although they touch quantized tensors, or that are compute ops
// (Conv, MatMul, Gemm) left in float: an integer kernel missing a
// DequantizeLinear on an input or the QuantizeLinear after it, activations
// of a dtype the kernel does not take, and ops without an integer kernel
// between DequantizeLinear and QuantizeLinear (an island that only adds
// work). Findings are in graph order.
func Lint(m *onnxgraph.Model, t *config.Target) []Finding {
	t = LintTargetOf(t)
	var out []Finding
	for _, n := range m.Graph.Nodes {
		if isQDQ(n) {
			continue
		}
		var dqIn []int
		for i, v := range n.Inputs {
			if v != nil && v.Producer != nil && isOp(v.Producer, "DequantizeLinear") {
				dqIn = append(dqIn, i)
			}
		}
		qOut := len(n.Outputs) > 0 && n.Outputs[0] != nil && quantizedAfter(n.Outputs[0])
		if isFusedActivation(n) {
			continue // checked with its producer, whose output it is
		}
		op, ok := t.Ops[n.OpType]
		if n.Domain != "" {
			ok = false
		}
		if !ok {
			if len(dqIn) > 0 && qOut {
				out = append(out, Finding{n.Name, n.OpType, fmt.Sprintf("%s has no integer kernel in %s: it runs in float between DequantizeLinear and QuantizeLinear", n.OpType, t.Runtime)})
			}
			continue
		}
		if len(dqIn) == 0 && !qOut && !op.Anchor {
			continue // an op left in float by placement, between float ops
		}
		if why := kernelBlocker(n, op, t, qOut); why != "" {
			out = append(out, Finding{n.Name, n.OpType, fmt.Sprintf("not run as %s: %s", op.Kernel, why)})
		}
	}
	return out
}

// runsAsKernel reports whether target t runs node n of a written QDQ
// model as its integer kernel: every input the kernel needs comes out of a
// DequantizeLinear, the output is quantized, and nothing else blocks it.
func runsAsKernel(n *onnxgraph.Node, t *config.Target) bool {
	op, ok := t.Ops[n.OpType]
	if !ok || n.Domain != "" || len(n.Outputs) == 0 || n.Outputs[0] == nil {
		return false
	}
	qOut := quantizedAfter(n.Outputs[0])
	return (qOut || op.OptionalOutput) && kernelBlocker(n, op, t, qOut) == ""
}

// kernelBlocker says why integer kernel op cannot take n as written.
func kernelBlocker(n *onnxgraph.Node, op config.IntegerOp, t *config.Target, qOut bool) string {
	if op.Check != nil {
		if why := op.Check(n); why != "" {
			return why
		}
	}
	var dts []tensor.DType
	for i, v := range n.Inputs {
		if v == nil || !op.NeedsInput(i) {
			continue
		}
		if v.Producer == nil || !isOp(v.Producer, "DequantizeLinear") {
			return fmt.Sprintf("input %d %q has no DequantizeLinear", i, v.Name)
		}
		dt := qdqDType(v.Producer)
		if dt.Bits() != 8 {
			return fmt.Sprintf("input %d %q is %s; the kernel takes 8-bit integers", i, v.Name, dt)
		}
		if !v.Producer.Inputs[0].IsConst() {
			dts = append(dts, dt)
			if why := activationBlocker(v.Producer, dt, t); why != "" {
				return fmt.Sprintf("input %d %q: %s", i, v.Name, why)
			}
		}
	}
	for _, dt := range dts[min(1, len(dts)):] {
		if dt != dts[0] && n.OpType != "MatMul" && n.OpType != "Gemm" {
			return fmt.Sprintf("inputs mix %s and %s activations", dts[0], dt)
		}
	}
	if !op.OptionalOutput && !qOut {
		return fmt.Sprintf("output %q has no QuantizeLinear", n.Outputs[0].Name)
	}
	if op.SameParams && qOut && len(n.Inputs) > 0 && n.Inputs[0] != nil {
		dq := n.Inputs[0].Producer
		for _, q := range n.Outputs[0].Consumers {
			if isOp(q, "QuantizeLinear") && !sameQParams(dq, q) {
				return fmt.Sprintf("the QuantizeLinear after it (%s) has other qparams than the DequantizeLinear before it (%s)", q, dq)
			}
		}
	}
	return ""
}

// sameQParams reports whether two Q/DQ nodes have the same constant scale
// and zero point.
func sameQParams(a, b *onnxgraph.Node) bool {
	for i := 1; i <= 2; i++ {
		var va, vb *onnxgraph.Value
		if i < len(a.Inputs) {
			va = a.Inputs[i]
		}
		if i < len(b.Inputs) {
			vb = b.Inputs[i]
		}
		switch {
		case va == nil || vb == nil:
			if va != vb {
				return false
			}
		case va.Name != vb.Name && !sameConst(va, vb):
			return false
		}
	}
	return true
}

// sameConst reports whether two constants hold the same values.
func sameConst(a, b *onnxgraph.Value) bool {
	if a.Const == nil || b.Const == nil {
		return false
	}
	ta, errA := tensor.FromProto(a.Const, nil)
	tb, errB := tensor.FromProto(b.Const, nil)
	if errA != nil || errB != nil || ta.DType != tb.DType {
		return false
	}
	fa, errA := ta.AsFloat32()
	fb, errB := tb.AsFloat32()
	return errA == nil && errB == nil && slices.Equal(fa, fb)
}

// activationBlocker says why an activation DequantizeLinear of dtype dt
// defeats t's kernels, "" when it does not.
func activationBlocker(dq *onnxgraph.Node, dt tensor.DType, t *config.Target) string {
	sd := specDType(dt)
	if t.Fast(sd) {
		return ""
	}
	if t.Int8OneConsumer && sd == spec.Int8 {
		if q := dq.Inputs[0].Producer; q != nil && isOp(q, "QuantizeLinear") && readers(q.Outputs[0]) == 1 {
			return "" // converted to uint8
		}
		return fmt.Sprintf("int8 activation; %s converts int8 Q/DQ pairs to uint8 only when the QuantizeLinear has one consumer", t.Runtime)
	}
	return fmt.Sprintf("%s activation; %s's integer kernels take %s", sd, t.Runtime, fastNames(t))
}

func fastNames(t *config.Target) string {
	var s []string
	for _, d := range t.FastActivations {
		s = append(s, d.String())
	}
	return strings.Join(s, " or ")
}

func specDType(dt tensor.DType) spec.DType {
	d, err := spec.ParseDType(strings.ToLower(dt.String()))
	if err != nil {
		return spec.DType(0)
	}
	return d
}

// qdqDType is the integer type of a QuantizeLinear/DequantizeLinear: its
// zero point's, uint8 when it has none.
func qdqDType(n *onnxgraph.Node) tensor.DType {
	if len(n.Inputs) > 2 && n.Inputs[2] != nil {
		if dt := n.Inputs[2].DType(); dt != tensor.Undefined {
			return dt
		}
	}
	if isOp(n, "DequantizeLinear") && n.Inputs[0] != nil {
		if dt := n.Inputs[0].DType(); dt != tensor.Undefined {
			return dt
		}
	}
	return tensor.Uint8
}

func isOp(n *onnxgraph.Node, op string) bool { return n.Domain == "" && n.OpType == op }

func isQDQ(n *onnxgraph.Node) bool {
	return isOp(n, "QuantizeLinear") || isOp(n, "DequantizeLinear")
}

// quantizedAfter reports whether v is quantized right after it is made:
// every consumer is a QuantizeLinear, or a lone Relu or Clip whose output
// is (ONNX Runtime folds the activation into the QuantizeLinear's clamp).
func quantizedAfter(v *onnxgraph.Value) bool {
	if feedsOnlyQ(v) {
		return true
	}
	if len(v.Consumers) != 1 || v.IsGraphOutput {
		return false
	}
	c := v.Consumers[0]
	return (isOp(c, "Relu") || isOp(c, "Clip")) && len(c.Outputs) > 0 && c.Outputs[0] != nil && feedsOnlyQ(c.Outputs[0])
}

// isFusedActivation reports a Relu or Clip that alone reads the output of
// a computing node (not a DequantizeLinear) and is quantized after.
func isFusedActivation(n *onnxgraph.Node) bool {
	if !isOp(n, "Relu") && !isOp(n, "Clip") || len(n.Inputs) == 0 || n.Inputs[0] == nil {
		return false
	}
	in := n.Inputs[0]
	return in.Producer != nil && !isQDQ(in.Producer) && len(in.Consumers) == 1 && quantizedAfter(in)
}

// feedsOnlyQ reports whether every consumer of v is a QuantizeLinear (and
// there is one).
func feedsOnlyQ(v *onnxgraph.Value) bool {
	if len(v.Consumers) == 0 || v.IsGraphOutput {
		return false
	}
	for _, c := range v.Consumers {
		if !isOp(c, "QuantizeLinear") {
			return false
		}
	}
	return true
}

// FastPathWarnings names the config rules whose explicit activation specs
// defeat t's integer kernels: specs the plan took from a config or preset
// rule, not from the target's defaults.
func FastPathWarnings(m *onnxgraph.Model, plan *Plan, t *config.Target) []string {
	if t == nil || t.Ops == nil && len(t.FastActivations) == 0 {
		return nil
	}
	// A config the accuracy search wrote has one op_name_config entry per
	// raised node: past fastPathRulesNamed rules of one file giving one
	// type, the rules are counted on one line instead of one line each.
	type fileType struct{ file, dtype string }
	byRule := map[string][]string{}
	ruleOf := map[string]config.Rule{}
	perFile := map[fileType][]string{}
	var rules []string
	for _, tp := range plan.Tensors {
		if tp.Role != Activation || tp.SharedWith != "" || t.Fast(tp.Spec.DType) {
			continue
		}
		if t.Int8OneConsumer && tp.Spec.DType == spec.Int8 {
			// Fast only on a QuantizeLinear with one consumer; the lint
			// names the others.
			if v := m.Graph.Value(tp.Value); v != nil && len(v.Consumers) <= 1 {
				continue
			}
		}
		key := tp.Rule.String() + "\x00" + tp.Spec.DType.String()
		if _, seen := byRule[key]; !seen {
			rules = append(rules, key)
			ruleOf[key] = tp.Rule
			ft := fileType{tp.Rule.File, tp.Spec.DType.String()}
			perFile[ft] = append(perFile[ft], key)
		}
		byRule[key] = append(byRule[key], tp.Value)
	}
	sort.Strings(rules)
	for _, keys := range perFile {
		sort.SliceStable(keys, func(i, j int) bool { return ruleOf[keys[i]].Line < ruleOf[keys[j]].Line })
	}
	tail := fmt.Sprintf("which defeats target %s's fast path: %s's integer kernels take %s; the config wins over the target's default", t.Name, t.Runtime, fastNames(t))
	var out []string
	done := map[fileType]bool{}
	for _, key := range rules {
		rule, dt, _ := strings.Cut(key, "\x00")
		ft := fileType{ruleOf[key].File, dt}
		if keys := perFile[ft]; len(keys) > fastPathRulesNamed {
			if done[ft] {
				continue
			}
			done[ft] = true
			var lines []string
			n := 0
			for _, k := range keys {
				n += len(byRule[k])
				if len(lines) < fastPathRulesNamed {
					lines = append(lines, fmt.Sprint(ruleOf[k].Line))
				}
			}
			out = append(out, fmt.Sprintf("%d rules of %s (lines %s, ...) give %d activations (first %q) %s, %s",
				len(keys), ft.file, strings.Join(lines, ", "), n, byRule[keys[0]][0], dt, tail))
			continue
		}
		vals := byRule[key]
		out = append(out, fmt.Sprintf("rule %s gives %d activations (first %q) %s, %s", rule, len(vals), vals[0], dt, tail))
	}
	return out
}

// fastPathRulesNamed is how many rules of one file FastPathWarnings names
// one line each.
const fastPathRulesNamed = 3

// readers counts the nodes that read a quantized value through the
// DequantizeLinear nodes after its QuantizeLinear: ONNX Runtime gives each
// its own DequantizeLinear, so each is an edge of the QuantizeLinear.
func readers(q *onnxgraph.Value) int {
	n := 0
	for _, dq := range q.Consumers {
		if !isOp(dq, "DequantizeLinear") {
			n++
			continue
		}
		n += len(dq.Outputs[0].Consumers)
	}
	return n
}

// floatCompute are the ops of an ONNX Runtime optimized graph that do a
// model's heavy work in float.
var floatCompute = map[string]bool{"Conv": true, "MatMul": true, "Gemm": true, "ConvTranspose": true,
	"com.microsoft.FusedConv": true, "com.microsoft.FusedGemm": true, "com.microsoft.FusedMatMul": true}

// OptimizedFindings reads the graph ONNX Runtime optimized a QDQ model
// into (its optimized-model output) and lists what it left in float: the
// Conv, MatMul and Gemm nodes that did not become integer kernels, and the
// float nodes still between a DequantizeLinear and a QuantizeLinear.
func OptimizedFindings(om *onnxgraph.Model) []Finding {
	var out []Finding
	for _, n := range om.Graph.Nodes {
		op := n.OpType
		if n.Domain != "" {
			op = n.Domain + "." + op
		}
		if isQDQ(n) || strings.HasPrefix(n.OpType, "QLinear") {
			continue
		}
		dqIn := false
		for _, v := range n.Inputs {
			dqIn = dqIn || v != nil && v.Producer != nil && isOp(v.Producer, "DequantizeLinear")
		}
		qOut := len(n.Outputs) > 0 && n.Outputs[0] != nil && feedsOnlyQ(n.Outputs[0])
		switch {
		case floatCompute[op]:
			out = append(out, Finding{n.Name, op, "ONNX Runtime runs it in float"})
		case dqIn && qOut:
			out = append(out, Finding{n.Name, op, "ONNX Runtime runs it in float between DequantizeLinear and QuantizeLinear"})
		}
	}
	return out
}

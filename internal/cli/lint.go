package cli

import (
	"fmt"
	"io"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

// deployability is the lint of a written model for its target.
type deployability struct {
	// Target is the target the model was written for; Checked the one
	// whose kernels the lint checked (ort-x86 for generic).
	Target  string `json:"target"`
	Checked string `json:"checked_against"`
	// Warnings name the config rules that defeat the target's fast path.
	Warnings []string `json:"warnings,omitempty"`
	// Float lists the nodes the target runs in float, and why.
	Float []passes.Finding `json:"float_nodes"`
	// ORT is what ONNX Runtime's own optimized graph left in float (nil
	// when this binary has no ONNX Runtime); ORTNote says why it is absent.
	ORT     []passes.Finding `json:"ort_float_nodes,omitempty"`
	ORTNote string           `json:"ort_note,omitempty"`
}

// lintModel lints the model quantize or finalize wrote.
func lintModel(t *config.Target, prepared, written *onnxgraph.Model, plan *passes.Plan) *deployability {
	checked := passes.LintTargetOf(t)
	d := &deployability{Target: t.Name, Checked: checked.Name,
		Warnings: passes.FastPathWarnings(prepared, plan, checked),
		Float:    passes.Lint(written, t)}
	if d.Float == nil {
		d.Float = []passes.Finding{}
	}
	if checked.ORT {
		d.ORT, d.ORTNote = ortFindings(written)
	}
	return d
}

// maxLintLines caps the float nodes the stderr summary lists.
const maxLintLines = 20

func (d *deployability) write(w io.Writer, reportPath string) {
	for _, s := range d.Warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
	if d.Target != d.Checked {
		fmt.Fprintf(w, "target %s places Q/DQ wherever the config asks; checked against %s (--target %s places them for it):\n", d.Target, d.Checked, d.Checked)
	}
	fmt.Fprintf(w, "lint: %s runs %d quantized-neighbour node(s) in float\n", config.Targets[d.Checked].Runtime, len(d.Float))
	for i, f := range d.Float {
		if i == maxLintLines {
			more := "the JSON report (--report) lists them all"
			if reportPath != "" {
				more = reportPath + " lists them all"
			}
			fmt.Fprintf(w, "lint: ... and %d more; %s\n", len(d.Float)-i, more)
			break
		}
		fmt.Fprintf(w, "lint: %s\n", f)
	}
	if d.ORTNote != "" {
		fmt.Fprintf(w, "lint: %s\n", d.ORTNote)
		return
	}
	if d.ORT == nil {
		return // not an ONNX Runtime target
	}
	fmt.Fprintf(w, "lint: ONNX Runtime's optimized graph leaves %d node(s) in float among quantized ones\n", len(d.ORT))
	for i, f := range d.ORT {
		if i == maxLintLines {
			fmt.Fprintf(w, "lint: ... and %d more\n", len(d.ORT)-i)
			break
		}
		fmt.Fprintf(w, "lint: onnxruntime: %s\n", f)
	}
}

package compare

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

// Gates are quality thresholds; a nil field is not checked.
type Gates struct {
	// MinSQNR is the lowest acceptable SQNR in dB of every output.
	MinSQNR *float64 `json:"min_sqnr_db,omitempty"`
	// MinTop1Agreement is the lowest acceptable top-1 agreement in percent
	// of every logits-like output.
	MinTop1Agreement *float64 `json:"min_top1_agreement,omitempty"`
}

// Violation is one failed gate.
type Violation struct {
	Output string `json:"output"`
	// Metric is "sqnr_db" or "top1_agreement".
	Metric    string  `json:"metric"`
	Value     float64 `json:"-"`
	Threshold float64 `json:"threshold"`
	// Message says it in words, e.g. `output "logits": SQNR 12.31 dB is
	// below the minimum of 20 dB`.
	Message string `json:"message"`
}

// ErrNoLogits is returned by Check when a top-1 agreement gate is set but no
// output is logits-like: the gate could never fail, which is a usage error.
var ErrNoLogits = errors.New("no output is logits-like ([batch, classes], or [batch, classes, 1, ...]), so top-1 agreement cannot be measured")

// Check applies g to the report, records the gates and the violations in r,
// and returns the violations (empty when every gate passes).
func (r *Report) Check(g Gates) ([]Violation, error) {
	if g.MinSQNR == nil && g.MinTop1Agreement == nil {
		return nil, nil
	}
	r.Gates = &g
	r.Violations = nil
	logits := false
	for _, o := range r.Outputs {
		if g.MinSQNR != nil && !(float64(o.SQNR) >= *g.MinSQNR) {
			r.Violations = append(r.Violations, Violation{Output: o.Name, Metric: "sqnr_db", Value: float64(o.SQNR), Threshold: *g.MinSQNR,
				Message: fmt.Sprintf("output %q: SQNR %s dB is below the minimum of %s dB", o.Name, o.SQNR, DB(*g.MinSQNR))})
		}
		if o.Top1Agreement == nil {
			continue
		}
		logits = true
		if g.MinTop1Agreement != nil && *o.Top1Agreement < *g.MinTop1Agreement {
			r.Violations = append(r.Violations, Violation{Output: o.Name, Metric: "top1_agreement", Value: *o.Top1Agreement, Threshold: *g.MinTop1Agreement,
				Message: fmt.Sprintf("output %q: top-1 agreement %s%% is below the minimum of %s%%", o.Name, pct(*o.Top1Agreement), pct(*g.MinTop1Agreement))})
		}
	}
	if g.MinTop1Agreement != nil && !logits {
		return nil, ErrNoLogits
	}
	return r.Violations, nil
}

// GateError joins the messages of violations into one error, or returns
// nil when there are none.
func GateError(vs []Violation) error {
	if len(vs) == 0 {
		return nil
	}
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = errors.New(v.Message)
	}
	return fmt.Errorf("quality gate failed: %w", errors.Join(errs...))
}

func pct(p float64) string {
	if p == math.Trunc(p) {
		return fmt.Sprintf("%.0f", p)
	}
	return fmt.Sprintf("%.2f", p)
}

// Evaluate is the quality check of `coreaiq quantize --eval-samples N
// --min-sqnr DB`: it runs the float model and the quantized model it was
// made from on the held-out data with the named engine, compares their
// outputs and applies the gates. A non-nil error means the comparison could
// not run; failed gates are in the report's Violations (see GateError).
func Evaluate(ctx context.Context, engine string, float, quantized *onnxgraph.Model, threads int, data iter.Seq2[Batch, error], g Gates) (*Report, error) {
	ref, err := runtime.Open(engine, float, runtime.Options{Threads: threads})
	if err != nil {
		return nil, fmt.Errorf("float model: %w", err)
	}
	defer ref.Close()
	cand, err := runtime.Open(engine, quantized, runtime.Options{Threads: threads})
	if err != nil {
		return nil, fmt.Errorf("quantized model: %w", err)
	}
	defer cand.Close()
	r, err := Run(ctx, ref, cand, data, Options{})
	if err != nil {
		return nil, err
	}
	if _, err := r.Check(g); err != nil {
		return nil, err
	}
	return r, nil
}

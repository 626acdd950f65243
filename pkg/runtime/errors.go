package runtime

import (
	"fmt"
	"strings"
)

// Unsupported is one node the built-in engine cannot run.
type Unsupported struct {
	Node    string
	OpType  string
	Domain  string
	Opset   int64
	Feature string
}

func (u Unsupported) String() string {
	domain := u.Domain
	if domain == "" {
		domain = "ai.onnx"
	}
	return fmt.Sprintf("node %q: %s (domain %s, opset %d): %s", u.Node, u.OpType, domain, u.Opset, u.Feature)
}

// UnsupportedError lists every node of a model that the built-in engine
// cannot run. Compile returns it before anything runs.
type UnsupportedError struct {
	Items []Unsupported
}

func (e *UnsupportedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the built-in engine cannot run %d node(s) of this model:", len(e.Items))
	for _, u := range e.Items {
		b.WriteString("\n  ")
		b.WriteString(u.String())
	}
	b.WriteString("\nhint: try --engine ort (ONNX Runtime), which supports more operators")
	return b.String()
}

// featureError is what an op builder returns for an attribute or variant it
// does not implement.
type featureError struct{ msg string }

func (e *featureError) Error() string { return e.msg }

func unsupportedf(format string, args ...any) error {
	return &featureError{msg: fmt.Sprintf(format, args...)}
}

// InputError reports input data that does not fit the model.
type InputError struct {
	Input    string
	Expected string
	Given    string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("input %q: expected %s, given %s", e.Input, e.Expected, e.Given)
}

package finalize

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/ops"
)

// MaxOpset is the newest default-domain opset coreaiq writes: the last
// one irForOpset and the table of operator changes know.
const MaxOpset = 25

// minQDQOpset is the first opset with QuantizeLinear and DequantizeLinear.
const minQDQOpset = 10

// CheckOpset checks a pinned output opset (0: none) against a model
// importing modelOpset, before any work: it may not lower the model's
// opset, and must lie between the first Q/DQ opset and MaxOpset.
func CheckOpset(modelOpset, pinned int64) error {
	switch {
	case pinned == 0:
		return nil
	case pinned < 0 || pinned > MaxOpset:
		return fmt.Errorf("opset %d: coreaiq writes opsets %d to %d", pinned, minQDQOpset, MaxOpset)
	case pinned < minQDQOpset:
		return fmt.Errorf("opset %d is too low: QuantizeLinear and DequantizeLinear need opset %d or later", pinned, minQDQOpset)
	case pinned < modelOpset:
		return fmt.Errorf("opset %d is below the model's opset %d; coreaiq does not lower opsets", pinned, modelOpset)
	}
	return nil
}

// irForOpset is the IR version of the ONNX release that introduced each
// default-domain opset (docs/Versioning.md): the lowest IR a model
// importing that opset can declare.
func irForOpset(opset int64) int64 {
	switch {
	case opset <= 8:
		return 3
	case opset == 9:
		return 4
	case opset == 10:
		return 5
	case opset == 11:
		return 6
	case opset <= 14:
		return 7
	case opset <= 18:
		return 8
	case opset <= 20:
		return 9
	case opset <= 22:
		return 10
	case opset == 23:
		return 11
	case opset == 24:
		return 12
	}
	return 13
}

// meaningChanges returns the opsets at which op's meaning changed (the op
// table's Changes); known is false for an op the table does not know, whose
// opset raise is refused, since nothing says it is safe. A listed change is
// rewritten by the op's version adapter (adapt.go) when it has one, and
// refused otherwise.
func meaningChanges(op string) (versions []int64, known bool) {
	entry, ok := ops.Lookup(op)
	if !ok || !entry.Changes.Known {
		return nil, false
	}
	return entry.Changes.At, true
}

// checkOpsetRaise returns an error naming every op of the model (in the
// default domain, subgraphs included) whose meaning changed between opset
// from and opset to and that has no version adapter, or that the table
// above does not know.
func checkOpsetRaise(m *onnxpb.ModelProto, from, to int64) error {
	if to <= from {
		return nil
	}
	changed := map[string]string{}
	var walk func(g *onnxpb.GraphProto)
	walk = func(g *onnxpb.GraphProto) {
		for _, n := range g.GetNode() {
			if d := n.GetDomain(); d != "" && d != "ai.onnx" {
				continue
			}
			op := n.GetOpType()
			if _, seen := changed[op]; !seen {
				versions, known := meaningChanges(op)
				switch {
				case !known:
					changed[op] = "not in coreaiq's table of operator changes"
				case adapters[op] != nil:
					// rewritten by adaptOpset, which names the nodes it cannot rewrite
				default:
					for _, v := range versions {
						if v > from && v <= to {
							changed[op] = fmt.Sprintf("changed meaning at opset %d, no rewrite in coreaiq", v)
							break
						}
					}
				}
			}
			for _, a := range n.GetAttribute() {
				if a.G != nil {
					walk(a.G)
				}
				for _, sg := range a.Graphs {
					walk(sg)
				}
			}
		}
	}
	walk(m.GetGraph())
	if len(changed) == 0 {
		return nil
	}
	ops := make([]string, 0, len(changed))
	for op := range changed {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var parts []string
	for _, op := range ops {
		parts = append(parts, op+" ("+changed[op]+")")
	}
	return fmt.Errorf("the quantized model needs opset %d but the model imports opset %d, and raising it is not safe for: %s; convert the model to opset %d first (e.g. onnx.version_converter) and quantize the result",
		to, from, strings.Join(parts, ", "), to)
}

package compare

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// RuleMetadataKey is the node metadata_props key under which a quantized
// model records the config rule (file:line) that chose a tensor's spec on
// its QuantizeLinear node; the per-layer report shows it when present. The
// writer (pkg/finalize) defines it.
const RuleMetadataKey = finalize.RuleMetadataKey

// RescaledMetadataKey is the key under which a quantized model records how
// an algorithm rescaled an activation (finalize.RescaledMetadataKey).
const RescaledMetadataKey = finalize.RescaledMetadataKey

// FlooredMetadataKey marks a SiLU input quantized from its floor
// (finalize.FlooredMetadataKey).
const FlooredMetadataKey = finalize.FlooredMetadataKey

// Pair links one quantized activation of a QDQ candidate to the float value
// of the reference it approximates: in the candidate, Quantized →
// QuantizeLinear → DequantizeLinear → Dequantized; in the reference, Tensor.
type Pair struct {
	// Tensor is the float value in the reference.
	Tensor string `json:"tensor"`
	// Quantized is the candidate value entering QuantizeLinear and
	// Dequantized the DequantizeLinear output that consumers read.
	Quantized   string `json:"quantized"`
	Dequantized string `json:"dequantized"`
	// Node, OpType and Module describe the reference node producing Tensor
	// (Node is "" and OpType "graph input" for graph inputs).
	Node   string `json:"node"`
	OpType string `json:"op_type"`
	Module string `json:"module"`
	// Rule is the config rule the candidate recorded, "" when it has none.
	Rule string `json:"rule,omitempty"`
	// DType is the quantized element type.
	DType string `json:"dtype"`
	// ClipMin and ClipMax are the float range the quantization grid covers,
	// (qmin−zp)·scale to (qmax−zp)·scale (the union over channels for
	// per-channel scales); nil when the scale is not a constant.
	ClipMin *float64 `json:"clip_min,omitempty"`
	ClipMax *float64 `json:"clip_max,omitempty"`
	// Factor is the DequantizeLinear's scale over the QuantizeLinear's
	// when they differ (a Div or Mul folded into the QuantizeLinear's
	// scale): the dequantized value approximates Factor times the
	// QuantizeLinear's input. 0 when the scales are the same.
	Factor float64 `json:"factor,omitempty"`
	// Rescaled is how an algorithm changed the value in the candidate
	// (finalize.RescaledMetadataKey): the per-layer SQNR sets the
	// dequantized value, with the change undone, against the reference.
	Rescaled   *plan.Rescale `json:"-"`
	IsRescaled bool          `json:"rescaled,omitempty"`
	// Floored marks a SiLU input whose grid starts at the floor below
	// which the SiLU's quantized output is 0 (finalize.FlooredMetadataKey):
	// the per-layer SQNRs set it against values clamped at ClipMin, as
	// the inputs clipped there do not reach the SiLU's output.
	Floored bool `json:"floored,omitempty"`
}

// Unpaired is a quantized value of the candidate that has no float
// counterpart, with the reason; reports list them so nothing is left out
// silently.
type Unpaired struct {
	Value  string `json:"value"`
	Reason string `json:"reason"`
}

// Pairing is the result of PairActivations.
type Pairing struct {
	Pairs    []Pair
	Unpaired []Unpaired
	// Weights counts DequantizeLinear nodes on constants (weights and
	// biases): they are not activations and get no per-layer entry.
	Weights int
}

// PairActivations finds every quantized activation of cand (a QDQ model made
// from ref) and the value of ref it approximates. A DequantizeLinear whose
// input comes from a QuantizeLinear of a non-constant value X is a quantized
// activation; its counterpart is the reference value named like the
// DequantizeLinear output, which is what it holds, or, when the quantizer
// renamed it (a quantized graph input), the reference value named X. The
// output's name wins because a scale can hold a factor: a Div or Mul by a
// constant folded into the QuantizeLinear makes X that value times the
// factor (finalize's integer chains under ONNX Runtime targets).
// Pairs come in the candidate's topological order.
func PairActivations(ref, cand *onnxgraph.Model) Pairing {
	var p Pairing
	for _, dq := range cand.Graph.AllNodes() {
		if dq.OpType != "DequantizeLinear" || dq.Domain != "" || len(dq.Inputs) == 0 || dq.Inputs[0] == nil || len(dq.Outputs) == 0 {
			continue
		}
		in := dq.Inputs[0]
		out := dq.Outputs[0].Name
		if in.IsConst() {
			p.Weights++
			continue
		}
		q := in.Producer
		if q == nil || q.OpType != "QuantizeLinear" || len(q.Inputs) == 0 || q.Inputs[0] == nil {
			p.Unpaired = append(p.Unpaired, Unpaired{Value: out, Reason: fmt.Sprintf("the input %q of DequantizeLinear %q is not produced by a QuantizeLinear", in.Name, dq.Name)})
			continue
		}
		x := q.Inputs[0]
		if x.IsConst() {
			p.Weights++
			continue
		}
		if owner := dq.Graph.Owner; owner != nil {
			p.Unpaired = append(p.Unpaired, Unpaired{Value: out, Reason: fmt.Sprintf("inside the subgraph of %s, where it takes a value per iteration or only on one branch; per-layer SQNR compares one tensor per run", owner)})
			continue
		}
		rv := floatValue(ref.Graph, out)
		if rv == nil {
			rv = floatValue(ref.Graph, x.Name)
		}
		if rv == nil {
			p.Unpaired = append(p.Unpaired, Unpaired{Value: out, Reason: fmt.Sprintf("neither %q (the input of QuantizeLinear %q) nor %q is a computed value of the reference model", x.Name, q.Name, out)})
			continue
		}
		pair := Pair{Tensor: rv.Name, Quantized: x.Name, Dequantized: out, OpType: "graph input"}
		if n := rv.Producer; n != nil {
			pair.Node, pair.OpType, pair.Module = n.Name, n.OpType, n.Module
		}
		if r, ok := q.Metadata(RuleMetadataKey); ok {
			pair.Rule = r
		} else if r, ok := dq.Metadata(RuleMetadataKey); ok {
			pair.Rule = r
		}
		// The DequantizeLinear's scale is the one of the values it holds
		// (a folded factor gives the QuantizeLinear another).
		pair.DType, pair.ClipMin, pair.ClipMax = clipRange(cand, dq)
		pair.Factor = scaleRatio(cand, q, dq)
		if _, ok := q.Metadata(FlooredMetadataKey); ok && pair.ClipMin != nil {
			pair.Floored = true
		}
		if r, ok := q.Metadata(RescaledMetadataKey); ok {
			var rs plan.Rescale
			if json.Unmarshal([]byte(r), &rs) == nil && len(rs.Scale) > 0 && (rs.Shift == nil || len(rs.Shift) == len(rs.Scale)) {
				pair.Rescaled, pair.IsRescaled = &rs, true
			}
		}
		p.Pairs = append(p.Pairs, pair)
	}
	return p
}

// floatValue returns the non-constant value called name in g, or nil.
func floatValue(g *onnxgraph.Graph, name string) *onnxgraph.Value {
	v := g.Value(name)
	if v == nil || v.IsConst() || (v.Producer == nil && !v.IsGraphInput) {
		return nil
	}
	return v
}

// scaleRatio is the scale of dq over that of q when both are constant
// scalars that differ, 0 otherwise.
func scaleRatio(m *onnxgraph.Model, q, dq *onnxgraph.Node) float64 {
	if len(q.Inputs) < 2 || len(dq.Inputs) < 2 || q.Inputs[1] == nil || dq.Inputs[1] == nil ||
		q.Inputs[1] == dq.Inputs[1] || !q.Inputs[1].IsConst() || !dq.Inputs[1].IsConst() {
		return 0
	}
	sq, errQ := constFloats(m, q.Inputs[1])
	sdq, errDQ := constFloats(m, dq.Inputs[1])
	if errQ != nil || errDQ != nil || len(sq) != 1 || len(sdq) != 1 || sq[0] == 0 || sq[0] == sdq[0] {
		return 0
	}
	return float64(sdq[0]) / float64(sq[0])
}

// clipRange returns the quantized dtype of a QuantizeLinear or
// DequantizeLinear q and the float range its grid covers, when scale (and
// zero point) are constants.
func clipRange(m *onnxgraph.Model, q *onnxgraph.Node) (string, *float64, *float64) {
	dt := tensor.Uint8
	var zp *onnxgraph.Value
	if len(q.Inputs) > 2 && q.Inputs[2] != nil {
		zp = q.Inputs[2]
		if d := zp.DType(); d != tensor.Undefined {
			dt = d
		}
	} else if a := q.Attr("output_dtype"); a != nil && a.GetI() != 0 {
		dt = tensor.DType(a.GetI())
	} else if q.OpType == "DequantizeLinear" && q.Inputs[0] != nil && q.Inputs[0].DType() != tensor.Undefined {
		dt = q.Inputs[0].DType()
	}
	qmin, qmax, ok := gridRange(dt)
	if !ok || len(q.Inputs) < 2 || q.Inputs[1] == nil || !q.Inputs[1].IsConst() {
		return dt.String(), nil, nil
	}
	scales, err := constFloats(m, q.Inputs[1])
	if err != nil || len(scales) == 0 {
		return dt.String(), nil, nil
	}
	zps := make([]float32, len(scales))
	if zp != nil {
		if !zp.IsConst() {
			return dt.String(), nil, nil
		}
		z, err := constFloats(m, zp)
		if err != nil || (len(z) != 1 && len(z) != len(scales)) {
			return dt.String(), nil, nil
		}
		for i := range zps {
			zps[i] = z[min(i, len(z)-1)]
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range scales {
		a := (qmin - float64(zps[i])) * float64(s)
		b := (qmax - float64(zps[i])) * float64(s)
		lo, hi = math.Min(lo, math.Min(a, b)), math.Max(hi, math.Max(a, b))
	}
	return dt.String(), &lo, &hi
}

func constFloats(m *onnxgraph.Model, v *onnxgraph.Value) ([]float32, error) {
	t, err := tensor.FromProto(v.Const, m)
	if err != nil {
		return nil, err
	}
	return t.AsFloat32()
}

// gridRange is the representable range of a quantized element type.
func gridRange(dt tensor.DType) (lo, hi float64, ok bool) {
	switch dt {
	case tensor.Int8:
		return -128, 127, true
	case tensor.Uint8:
		return 0, 255, true
	case tensor.Int16:
		return -32768, 32767, true
	case tensor.Uint16:
		return 0, 65535, true
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32, true
	case tensor.Int4:
		return -8, 7, true
	case tensor.Uint4:
		return 0, 15, true
	case tensor.Int2:
		return -2, 1, true
	case tensor.Uint2:
		return 0, 3, true
	case tensor.Float8E4M3FN:
		return -448, 448, true
	case tensor.Float8E4M3FNUZ:
		return -240, 240, true
	case tensor.Float8E5M2, tensor.Float8E5M2FNUZ:
		return -57344, 57344, true
	case tensor.Float4E2M1:
		return -6, 6, true
	}
	return 0, 0, false
}

// sortLayers orders layer reports worst first: lowest SQNR, ties by tensor
// name so the order never depends on map iteration or run timing.
func sortLayers(ls []LayerReport) {
	sort.SliceStable(ls, func(i, j int) bool {
		a, b := float64(ls[i].SQNR), float64(ls[j].SQNR)
		if a != b {
			return a < b
		}
		return ls[i].Tensor+"\x00"+ls[i].Dequantized < ls[j].Tensor+"\x00"+ls[j].Dequantized
	})
}

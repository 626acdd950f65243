// Package finalize writes the quantized model: it turns a Plan (one entry
// per quantization point, with qparams) into a new ONNX model with integer
// initializers, QuantizeLinear/DequantizeLinear nodes and the opset and IR
// version the content needs. It is the only package that edits a model.
package finalize

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Options control Write.
type Options struct {
	// Opset pins the default-domain opset of the output (0: the lowest
	// opset at or above the model's that the content needs). A pin below
	// 21 with int4/uint4/int16/uint16 tensors writes com.microsoft Q/DQ.
	// A pin at 24 or above keeps float8e8m0 scales as float8e8m0; below,
	// they are written as float scales (see keepE8M0).
	Opset int64
	// FP4AsFP8 writes float4 e2m1 weights as float8 e4m3fn codes of the
	// same values, with the same scales: the dequantized weights are
	// identical, at twice the bytes. ONNX Runtime 1.23's CPU provider
	// cannot load float4 initializers ("tensor type 23 is not supported").
	FP4AsFP8 bool
	// Format is the form of quantized weights: QDQ (the default), or
	// ONNX Runtime's MatMulNBits for 4-bit MatMul/Gemm weights.
	Format Format
	// Threads bounds the threads that cluster palettized weights (0: one).
	Threads int
	// Scratch, when set, receives the bytes of every large initializer the
	// writer makes as soon as it is made, so that the quantized weights of
	// a model larger than memory are never all held at once. The result's
	// model reads them from there; the caller closes it after saving.
	Scratch *onnxgraph.Scratch
	// RandomData marks the model as calibrated on random inputs, only good
	// for testing: CalibrationDataMetadataKey = "random" in its
	// metadata_props.
	RandomData bool
	// IntegerChains rewrites the clamp chains of the written model
	// (HardSwish and HardSigmoid written out as Add, Clip, Div, Mul) into
	// the form ONNX Runtime's QDQ fusions run on integers (chains.go),
	// folds scalar factors into scales (factors.go), keeps nearest Resizes
	// by powers of 2 channels-first (resize.go) and pads the 3×3
	// convolutions of 1 to 3 channels to 4 (stem.go).
	IntegerChains bool
}

// CalibrationDataMetadataKey is the model metadata_props key whose value
// "random" marks a model whose activation ranges came from random
// calibration data (Options.RandomData).
const CalibrationDataMetadataKey = "coreaiq.calibration_data"

// keepE8M0 reports whether float8e8m0 scales are written as such. They
// need opset 24 and IR 12, which ONNX Runtime 1.23 cannot load ("Unsupported
// model IR version: 12, max supported IR version: 11"), so by default they
// are written in the float type as the same powers of two: the dequantized
// values are identical and the model stays at opset 23. Pinning --opset 24
// or above keeps the e8m0 encoding (a quarter of the scale bytes).
func (o Options) keepE8M0() bool { return o.Opset >= 24 }

// storedDType is the element type t's codes are written in: the spec's,
// except float4 e2m1 weights under FP4AsFP8, which are written as the
// float8 e4m3fn codes of the same values (every e2m1 value is exact in
// e4m3fn).
func (o Options) storedDType(t *plan.TensorPlan) spec.DType {
	if o.FP4AsFP8 && t.Spec.DType == spec.Float4E2M1 {
		return spec.Float8E4M3FN
	}
	return t.Spec.DType
}

// Result is the quantized model and what Write decided.
type Result struct {
	Model *onnxgraph.Model
	// Opset and IRVersion are the stamped default-domain opset and IR.
	Opset     int64
	IRVersion int64
	// Tensors are the written quantization points with their final
	// qparams (biases and enlarged weight scales included), sorted by name.
	Tensors []*plan.TensorPlan
	// Notes record adjustments (enlarged weight scales, raised opset).
	Notes []string
	// Palettes are the palettized weights with their reports.
	Palettes []*plan.PalettePlan
	// Rewritten are the nodes Options.IntegerChains rewrote: they run on
	// integers now, or were folded into a scale (Notes say which).
	Rewritten []string
}

// ValueNaming documents how the written model names tensors, so that a
// per-layer comparison can pair each quantized activation with its float
// counterpart: the value named V in the quantized model is what V's
// consumers read — the dequantized tensor (DequantizeLinear's output) —
// and V's producer now writes V_QuantizeLinear_Input. Graph inputs keep
// their name on the float side; their dequantized copy is
// V_DequantizeLinear_Output. Weights keep their name on the
// DequantizeLinear output; the integers are V_quantized.
const ValueNaming = "dequantized tensors keep the float value name; producers write <name>_QuantizeLinear_Input"

// writer holds the state of one Write.
type writer struct {
	src   *onnxgraph.Model
	plan  *plan.Plan
	out   *onnxpb.ModelProto
	opts  Options
	used  map[string]bool
	notes []string

	opset    int64
	msDomain bool // Q/DQ with int4/16-bit types go to com.microsoft
	// e8m0AsFloat counts weights whose e8m0 scales are written as float.
	e8m0AsFloat int
	// nbits are the weights written as MatMulNBits (FormatORTNBits), with
	// their initializer names (B, scales, zero points or "").
	nbits      map[string]nbitsLayout
	nbitsInits map[string][3]string
	// msImport adds the com.microsoft opset import (contrib ops).
	msImport bool
	// palettes are the written palettized weights, with their reports.
	palettes []*plan.PalettePlan

	prologue []*onnxpb.NodeProto
	after    map[string][]*onnxpb.NodeProto // Q/DQ nodes to insert after a producer's output
	inits    []*onnxpb.TensorProto
	removed  map[string]bool // initializers replaced by quantized ones
	rename   map[string]string

	// inner holds what goes into an If/Loop/Scan subgraph: the integer
	// initializers and DequantizeLinear of its own weights, and the Q/DQ
	// of its graph inputs. Scales and zero points stay in the main graph,
	// which every subgraph sees.
	inner map[*onnxgraph.Graph]*innerGraph
	// values and nodes index every graph of the source model by name.
	values map[string]*onnxgraph.Value
	nodes  map[string]*onnxgraph.Node
}

// innerGraph is what Write adds to one subgraph.
type innerGraph struct {
	prologue []*onnxpb.NodeProto
	inits    []*onnxpb.TensorProto
}

// Write builds the quantized model of m under plan: weights become integer
// initializers followed by DequantizeLinear, activations get a shared
// QuantizeLinear → DequantizeLinear pair, biases of Conv/ConvTranspose/Gemm
// become int32, each with the qparams the plan holds (passes.DecideQParams
// decides them). Neither m nor plan is modified.
func Write(m *onnxgraph.Model, pl *plan.Plan, opts Options) (*Result, error) {
	w := &writer{src: m, plan: pl, opts: opts,
		after: map[string][]*onnxpb.NodeProto{}, removed: map[string]bool{}, rename: map[string]string{},
		nbitsInits: map[string][3]string{}}
	w.out = onnxgraph.CloneSharingData(m.Proto)
	w.index()
	w.collectNames()
	if err := w.checkParams(); err != nil {
		return nil, err
	}
	w.chooseNBits()
	if err := w.chooseOpset(); err != nil {
		return nil, err
	}
	tensors := slices.Clone(pl.Tensors)
	slices.SortStableFunc(tensors, func(a, b *plan.TensorPlan) int { return strings.Compare(a.Value, b.Value) })
	var final []*plan.TensorPlan
	for _, t := range tensors {
		var err error
		switch _, nb := w.nbits[t.Value]; {
		case nb:
			err = w.writeNBits(t)
		case t.Role == plan.Weight || t.Role == plan.Bias:
			err = w.writeConst(t)
		case t.Role == plan.Activation:
			err = w.writeActivation(t)
		}
		if err != nil {
			return nil, err
		}
		c := *t
		c.Params = w.paramsOf(t)
		final = append(final, &c)
	}
	clusters, err := w.clusterPalettes()
	if err != nil {
		return nil, err
	}
	for i, p := range pl.Palettes {
		if err := w.writePalette(p, clusters[i]); err != nil {
			return nil, err
		}
	}
	if w.e8m0AsFloat > 0 {
		w.notes = append(w.notes, fmt.Sprintf("float8e8m0 scales of %d weights written as float powers of two at opset %d (ONNX Runtime 1.23 reads IR ≤ 11, opset ≤ 23; --opset 24 keeps float8e8m0)",
			w.e8m0AsFloat, w.opset))
	}
	labels := viewLabels(m, w.out)
	if err := w.assemble(); err != nil {
		return nil, err
	}
	adapted, err := adaptOpset(w.out, m.Opset(""), w.opset, w.name, labels)
	if err != nil {
		return nil, err
	}
	w.notes = append(w.notes, adapted...)
	ir, err := w.stamp()
	if err != nil {
		return nil, err
	}
	if opts.RandomData {
		w.out.MetadataProps = append(w.out.MetadataProps, &onnxpb.StringStringEntryProto{
			Key: proto.String(CalibrationDataMetadataKey), Value: proto.String("random")})
	}
	qm, err := m.Derive(w.out, opts.Scratch)
	if err != nil {
		return nil, fmt.Errorf("quantized model is not valid: %w", err)
	}
	var rewritten []string
	if opts.IntegerChains {
		for _, lower := range []func(*onnxgraph.Model) (*onnxgraph.Model, []string, []string, error){lowerClampChains, foldScalarFactors, keepNearestChannelsFirst, padStemChannels} {
			var notes, nodes []string
			if qm, notes, nodes, err = lower(qm); err != nil {
				return nil, err
			}
			w.notes = append(w.notes, notes...)
			rewritten = append(rewritten, nodes...)
		}
	}
	return &Result{Model: qm, Opset: w.opset, IRVersion: ir, Tensors: final, Notes: w.notes, Palettes: w.palettes, Rewritten: rewritten}, nil
}

// index maps the names of every graph's values and nodes, subgraphs
// included (value names are unique across a model's scopes).
func (w *writer) index() {
	w.values, w.nodes, w.inner = map[string]*onnxgraph.Value{}, map[string]*onnxgraph.Node{}, map[*onnxgraph.Graph]*innerGraph{}
	for _, g := range w.src.Graph.Graphs() {
		for _, v := range g.Values() {
			if _, ok := w.values[v.Name]; !ok || v.Defined() {
				w.values[v.Name] = v
			}
		}
		for _, n := range g.Nodes {
			w.nodes[n.Name] = n
		}
	}
}

// value returns the source value called name, in whichever graph defines it.
func (w *writer) value(name string) *onnxgraph.Value { return w.values[name] }

// innerOf returns the additions to v's graph when v is defined inside a
// subgraph, nil for the main graph.
func (w *writer) innerOf(v *onnxgraph.Value) *innerGraph {
	if v.Graph == w.src.Graph {
		return nil
	}
	ig := w.inner[v.Graph]
	if ig == nil {
		ig = &innerGraph{}
		w.inner[v.Graph] = ig
	}
	return ig
}

// collectNames records every node and value name of the model so that
// inserted names are unique.
func (w *writer) collectNames() { w.used = usedNames(w.out.GetGraph()) }

// usedNames returns every node and value name of g and its subgraphs.
func usedNames(g *onnxpb.GraphProto) map[string]bool {
	used := map[string]bool{}
	walkGraphs(g, func(g *onnxpb.GraphProto) {
		for _, t := range g.GetInitializer() {
			used[t.GetName()] = true
		}
		for _, vs := range [][]*onnxpb.ValueInfoProto{g.GetInput(), g.GetOutput(), g.GetValueInfo()} {
			for _, v := range vs {
				used[v.GetName()] = true
			}
		}
		for _, n := range g.GetNode() {
			used[n.GetName()] = true
			for _, s := range n.GetInput() {
				used[s] = true
			}
			for _, s := range n.GetOutput() {
				used[s] = true
			}
		}
	})
	return used
}

// name returns base, or base_1, base_2, ... : the first unused one.
func (w *writer) name(base string) string { return uniqueIn(w.used, base) }

// uniqueIn returns the first of base, base_1, base_2, ... not in used,
// and marks it used.
func uniqueIn(used map[string]bool, base string) string {
	n := base
	for i := 1; used[n]; i++ {
		n = fmt.Sprintf("%s_%d", base, i)
	}
	used[n] = true
	return n
}

// checkParams checks that every tensor has its qparams, through its
// group's root when it shares them.
func (w *writer) checkParams() error {
	for _, t := range w.plan.Tensors {
		root := w.plan.Root(t)
		if root == nil || root.SharedWith != "" {
			return fmt.Errorf("tensor %q: shares qparams with %q, which is not planned", t.Value, t.SharedWith)
		}
		if root.Params == nil {
			return fmt.Errorf("tensor %q: no qparams in the plan (activations need calibration statistics: run calibrate, or use a weight-only preset)", t.Value)
		}
	}
	return nil
}

// paramsOf returns the params t uses (its root's when shared).
func (w *writer) paramsOf(t *plan.TensorPlan) *plan.Params {
	if r := w.plan.Root(t); r != nil {
		return r.Params
	}
	return nil
}

// constData reads the float data of a constant value of the source model.
func (w *writer) constData(name string) ([]float32, error) {
	v := w.value(name)
	if v == nil || v.Const == nil {
		return nil, fmt.Errorf("tensor %q: not a constant of the model", name)
	}
	t, err := tensor.FromProto(v.Const, w.src)
	if err != nil {
		return nil, err
	}
	f, err := t.AsFloat32()
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return f, nil
}

// needs is the default-domain opset a quantized tensor needs with
// standard ONNX Q/DQ, and whether com.microsoft Q/DQ (contrib opset 1:
// per-tensor or per-axis int8/16 and int4) can serve it at any opset.
func needs(t *plan.TensorPlan, floatType tensor.DType, o Options) (opset int64, msOK bool) {
	opset = 10
	if t.Axis >= 0 {
		opset = 13
	}
	if floatType == tensor.Float16 || floatType == tensor.BFloat16 {
		opset = 19
	}
	if t.Spec == nil { // bias: int32
		return opset, false
	}
	msOK = floatType == tensor.Float || floatType == tensor.Float16
	switch o.storedDType(t) {
	case spec.Float8E4M3FN, spec.Float8E5M2:
		opset, msOK = max(opset, 19), false
	case spec.Int16, spec.UInt16, spec.Int4, spec.UInt4:
		opset = max(opset, 21)
	case spec.Float4E2M1:
		opset, msOK = max(opset, 23), false
	case spec.Int2, spec.UInt2:
		opset, msOK = max(opset, 25), false
	default:
		msOK = false
	}
	if t.BlockSize > 0 {
		opset, msOK = max(opset, 21), false
	}
	if t.Role == plan.Weight {
		switch t.Spec.ScaleDType {
		case spec.Float8E8M0FNU:
			if o.keepE8M0() {
				opset, msOK = max(opset, 24), false
			}
		case spec.Float16, spec.BFloat16:
			if sd, _ := t.Spec.ScaleDType.TensorType(); sd != floatType {
				opset, msOK = max(opset, 23), false
			}
		}
	}
	return opset, msOK
}

func floatTypeOf(t *plan.TensorPlan) tensor.DType {
	if t.FloatType == 0 {
		return tensor.Float
	}
	return tensor.DType(t.FloatType)
}

// qdqFloatType is the float type of t's Q/DQ pair. An activation of
// float16 or bfloat16 is cast to float32 around its QuantizeLinear →
// DequantizeLinear: ONNX Runtime fuses Q/DQ pairs around Concat, Add, Mul
// and pools into QLinear* nodes that take float32 scales only, and refuses
// the whole model when the scales are float16. Behind a Cast the pair is
// no fusion's pattern and runs as written. Weights keep their type: their
// DequantizeLinear feeds the op directly.
func qdqFloatType(t *plan.TensorPlan) tensor.DType {
	ft := floatTypeOf(t)
	if t.Role == plan.Activation && (ft == tensor.Float16 || ft == tensor.BFloat16) {
		return tensor.Float
	}
	return ft
}

// chooseOpset picks the output opset: the model's, raised as far as the
// content needs, or the pinned one, with com.microsoft Q/DQ for int4 and
// 16-bit types below opset 21.
func (w *writer) chooseOpset() error {
	cur := w.src.Opset("")
	var needStd, needMS int64 // with standard Q/DQ only; with com.microsoft where it can serve
	var why, whyMS string
	for _, t := range w.plan.Tensors {
		if _, nb := w.nbits[t.Value]; nb {
			continue // a contrib op input, not a Q/DQ
		}
		o, ms := needs(t, qdqFloatType(t), w.opts)
		if o > needStd {
			needStd, why = o, fmt.Sprintf("tensor %q (%s)", t.Value, t.SpecString())
		}
		if !ms && o > needMS {
			needMS, whyMS = o, fmt.Sprintf("tensor %q (%s)", t.Value, t.SpecString())
		}
	}
	for _, p := range w.plan.Palettes {
		if o := paletteOpset(p); o > needStd {
			needStd, why = o, fmt.Sprintf("palettized weight %q (%s)", p.Value, p.Palette)
		}
		if o := paletteOpset(p); o > needMS {
			needMS, whyMS = o, fmt.Sprintf("palettized weight %q (%s)", p.Value, p.Palette)
		}
	}
	target := max(cur, needStd)
	if w.opts.Opset > 0 {
		if err := CheckOpset(cur, w.opts.Opset); err != nil {
			return err
		}
		target = w.opts.Opset
		if target < needStd {
			if target < needMS {
				return fmt.Errorf("opset %d is too low: %s needs opset %d", target, whyMS, needMS)
			}
			w.msDomain = true
			w.notes = append(w.notes, fmt.Sprintf("opset pinned at %d: int4/16-bit Q/DQ written in domain com.microsoft", target))
		}
	}
	if err := checkOpsetRaise(w.src.Proto, cur, target); err != nil {
		return err
	}
	if target > cur {
		w.notes = append(w.notes, fmt.Sprintf("opset raised from %d to %d for %s", cur, target, why))
	}
	w.opset = target
	return nil
}

// msType reports whether a Q/DQ of dtype d goes to com.microsoft.
func (w *writer) msType(t *plan.TensorPlan) bool {
	if !w.msDomain || t.Spec == nil {
		return false
	}
	switch t.Spec.DType {
	case spec.Int16, spec.UInt16, spec.Int4, spec.UInt4:
		return true
	}
	return false
}

// servedNode returns the source node a tensor is quantized for.
func (w *writer) servedNode(t *plan.TensorPlan) *onnxgraph.Node {
	for _, n := range t.Nodes {
		if node := w.nodes[n]; node != nil {
			return node
		}
	}
	return nil
}

func (w *writer) node(op, name string, in, out []string, t *plan.TensorPlan, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	n := &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(w.name(name)), Input: in, Output: out, Attribute: attrs}
	if w.msType(t) {
		n.Domain = proto.String("com.microsoft")
	}
	if src := w.servedNode(t); src != nil {
		for _, kv := range src.Proto.GetMetadataProps() {
			if kv.GetKey() != RuleMetadataKey { // a re-quantized model's old rule
				n.MetadataProps = append(n.MetadataProps, proto.CloneOf(kv))
			}
		}
	}
	if r := t.Rule; r.File != "" || r.Path != "" {
		v := r.String()
		if t.Intrinsic != "" {
			v += "; op-intrinsic: " + t.Intrinsic
		}
		n.MetadataProps = append(n.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(RuleMetadataKey), Value: proto.String(v)})
	}
	if t.Rescaled != nil && t.Role == plan.Activation {
		if b, err := json.Marshal(t.Rescaled); err == nil {
			n.MetadataProps = append(n.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(RescaledMetadataKey), Value: proto.String(string(b))})
		}
	}
	if t.Floored {
		n.MetadataProps = append(n.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(FlooredMetadataKey), Value: proto.String("silu")})
	}
	return n
}

// FlooredMetadataKey marks the QuantizeLinear and DequantizeLinear of a
// SiLU's input whose grid starts at the floor below which the SiLU's
// quantized output is 0 (plan.TensorPlan.Floored): compare --per-layer
// sets it against the float value clamped at the grid's lowest value,
// since the inputs clipped there do not reach the SiLU's output.
const FlooredMetadataKey = "coreaiq.floored"

// RescaledMetadataKey is the node metadata_props key under which the
// QuantizeLinear and DequantizeLinear of an activation that an algorithm
// rescaled (plan.TensorPlan.Rescaled) record how, as plan.Rescale's JSON:
// the value is the float model's divided by scale and minus shift, channel
// by channel along axis. compare --per-layer undoes it before setting the
// value against the float model.
const RescaledMetadataKey = "coreaiq.rescaled"

// RuleMetadataKey is the node metadata_props key under which every
// inserted QuantizeLinear and DequantizeLinear records the config rule that
// chose its tensor's spec, as "file:line (yaml.path)", followed by
// "; op-intrinsic: …" when an op-intrinsic rule changed it; `compare
// --per-layer` shows it. It lives here, below pkg/compare, so that the
// writer and the reader share one spelling.
const RuleMetadataKey = "coreaiq.rule"

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func (w *writer) addInit(t *tensor.Tensor, name string) error { return w.addInitIn(nil, t, name) }

// addInitIn adds an initializer to subgraph ig, or to the main graph when
// ig is nil.
func (w *writer) addInitIn(ig *innerGraph, t *tensor.Tensor, name string) error {
	tp, err := tensor.ToProto(t, name)
	if err != nil {
		return err
	}
	if err := w.opts.Scratch.Move(tp); err != nil {
		return err
	}
	if ig != nil {
		ig.inits = append(ig.inits, tp)
	} else {
		w.inits = append(w.inits, tp)
	}
	return nil
}

// qparamInits writes the scale and zero point initializers of t (once per
// group: shared tensors reuse their root's) and returns their names.
func (w *writer) qparamInits(t *plan.TensorPlan, scaleType tensor.DType, withZP bool) (scale, zp string, err error) {
	root := w.plan.Root(t)
	key := root.Value
	if s, ok := w.rename["scale:"+key]; ok {
		return s, w.rename["zp:"+key], nil
	}
	p := root.Params
	shape := quant.ParamShape(t.Shape, t.Axis, t.BlockSize)
	st, err := scaleTensor(scaleType, shape, p.Scales)
	if err != nil {
		return "", "", fmt.Errorf("tensor %q: %w", t.Value, err)
	}
	scale = w.name(key + "_scale")
	if err := w.addInit(st, scale); err != nil {
		return "", "", err
	}
	if withZP {
		zt, err := zeroPointTensor(w.opts.storedDType(t), shape, p.ZeroPoints)
		if err != nil {
			return "", "", fmt.Errorf("tensor %q: %w", t.Value, err)
		}
		zp = w.name(key + "_zero_point")
		if err := w.addInit(zt, zp); err != nil {
			return "", "", err
		}
	}
	w.rename["scale:"+key], w.rename["zp:"+key] = scale, zp
	return scale, zp, nil
}

// writeConst writes a weight or bias: integer initializer → DequantizeLinear
// whose output keeps the float initializer's name.
func (w *writer) writeConst(t *plan.TensorPlan) error {
	data, err := w.constData(t.Value)
	if err != nil {
		return err
	}
	v := w.value(t.Value)
	shape := make([]int, len(v.Const.GetDims()))
	for i, d := range v.Const.GetDims() {
		shape[i] = int(d)
	}
	p := t.Params
	var q *tensor.Tensor
	var scaleType tensor.DType
	ft := floatTypeOf(t)
	attrs := []*onnxpb.AttributeProto{}
	axis := t.Axis
	if t.Role == plan.Bias {
		if len(p.Scales) == 1 {
			axis = -1
		}
		beta := t.BiasBeta
		if beta == 0 {
			beta = 1
		}
		q = tensor.New(tensor.Int32, shape...)
		codes := q.Data.([]int32)
		for i, x := range data {
			codes[i] = int32(quant.Int(x*beta, p.Scales[min(i, len(p.Scales)-1)], 0, math.MinInt32, math.MaxInt32))
		}
		scaleType = ft
	} else {
		q, err = Quantize(data, shape, t.Axis, t.BlockSize, t.Spec, p)
		if err != nil {
			return fmt.Errorf("weight %q: %w", t.Value, err)
		}
		if w.opts.storedDType(t) != t.Spec.DType {
			q = fp4AsFP8(q)
		}
		scaleType, _ = t.Spec.ScaleDType.TensorType()
		if scaleType == tensor.Float8E8M0 && !w.opts.keepE8M0() {
			scaleType = tensor.Float // written as exact powers of two (scaleTensor)
			w.e8m0AsFloat++
		}
		if scaleType == tensor.Undefined || scaleType == tensor.Float {
			scaleType = ft
		}
		if scaleType != ft {
			attrs = append(attrs, attrInt("output_dtype", int64(ft)))
		}
	}
	if axis >= 0 {
		attrs = append(attrs, attrInt("axis", int64(axis)))
		if t.BlockSize > 0 {
			attrs = append(attrs, attrInt("block_size", int64(t.BlockSize)))
		}
	}
	qname := w.name(t.Value + "_quantized")
	ig := w.innerOf(v) // a subgraph's weight stays in its subgraph
	if err := w.addInitIn(ig, q, qname); err != nil {
		return err
	}
	tt := *t
	tt.Shape, tt.Axis = shape, axis
	scale, zp, err := w.qparamInits(&tt, scaleType, t.Role != plan.Bias)
	if err != nil {
		return err
	}
	in := []string{qname, scale}
	if zp != "" {
		in = append(in, zp)
	}
	dq := w.node("DequantizeLinear", t.Value+"_DequantizeLinear", in, []string{t.Value}, t, attrs...)
	if ig != nil {
		ig.prologue = append(ig.prologue, dq)
	} else {
		w.prologue = append(w.prologue, dq)
	}
	w.removed[t.Value] = true
	return nil
}

// writeActivation inserts QuantizeLinear → DequantizeLinear on a value:
// one pair shared by all consumers. The dequantized output keeps the value's
// name (so graph outputs keep theirs); the producer's output is renamed.
func (w *writer) writeActivation(t *plan.TensorPlan) error {
	v := w.value(t.Value)
	if v == nil {
		return fmt.Errorf("activation %q: no such value in the model", t.Value)
	}
	qType := qdqFloatType(t)
	scale, zp, err := w.qparamInits(t, qType, true)
	if err != nil {
		return err
	}
	qOut := w.name(t.Value + "_QuantizeLinear_Output")
	var qIn, dqOut string
	if v.Producer == nil {
		// A graph input keeps its name on the float side; its consumers
		// read the dequantized copy.
		qIn, dqOut = t.Value, w.name(t.Value+"_DequantizeLinear_Output")
		w.rename["in:"+t.Value] = dqOut
	} else {
		qIn, dqOut = w.name(t.Value+"_QuantizeLinear_Input"), t.Value
		w.rename["out:"+t.Value] = qIn
	}
	var pre, post []*onnxpb.NodeProto
	if ft := floatTypeOf(t); qType != ft {
		castIn, castOut := w.name(t.Value+"_Cast_Float"), w.name(t.Value+"_DequantizeLinear_Float")
		pre = append(pre, w.castNode(t.Value+"_CastToFloat", qIn, castIn, tensor.Float, t))
		post = append(post, w.castNode(t.Value+"_CastBack", castOut, dqOut, ft, t))
		qIn, dqOut = castIn, castOut
	}
	q := w.node("QuantizeLinear", t.Value+"_QuantizeLinear", []string{qIn, scale, zp}, []string{qOut}, t)
	dq := w.node("DequantizeLinear", t.Value+"_DequantizeLinear", []string{qOut, scale, zp}, []string{dqOut}, t)
	nodes := append(append(append(pre, q), dq), post...)
	switch {
	case v.Producer != nil:
		w.after[t.Value] = append(w.after[t.Value], nodes...)
	case v.Graph != w.src.Graph: // an input of a Loop or Scan body
		ig := w.innerOf(v)
		ig.prologue = append(ig.prologue, nodes...)
	default:
		w.prologue = append(w.prologue, nodes...)
	}
	return nil
}

// castNode casts in to dt as part of t's Q/DQ (default domain, whatever
// domain t's Q/DQ take).
func (w *writer) castNode(name, in, out string, dt tensor.DType, t *plan.TensorPlan) *onnxpb.NodeProto {
	n := w.node("Cast", name, []string{in}, []string{out}, t, attrInt("to", int64(dt)))
	n.Domain = nil
	return n
}

// assemble rebuilds the node and initializer lists of the main graph and
// of every subgraph: weight DequantizeLinear nodes and graph-input Q/DQ
// first, then the source nodes in topological order, each followed by the
// Q/DQ of its outputs.
func (w *writer) assemble() error {
	// The output's subgraphs, found before any node list is reordered.
	graphs := w.src.Graph.Graphs()
	outOf := map[*onnxgraph.Graph]*onnxpb.GraphProto{}
	for _, g := range graphs {
		if g.Owner == nil {
			outOf[g] = w.out.Graph
			continue
		}
		sg, err := subgraphProto(outOf[g.Parent].GetNode()[g.Owner.Index], g.Attr)
		if err != nil {
			return fmt.Errorf("%s: %w", g.Owner, err)
		}
		outOf[g] = sg
	}
	// Subgraphs first: a MatMulNBits inside one adds its initializers to
	// the main graph.
	for i := len(graphs) - 1; i >= 0; i-- {
		if err := w.assembleGraph(graphs[i], outOf[graphs[i]]); err != nil {
			return err
		}
	}
	return nil
}

// subgraphProto returns the GRAPH attribute of np that Graph.Attr names
// ("body", or "name[i]" for a GRAPHS attribute).
func subgraphProto(np *onnxpb.NodeProto, key string) (*onnxpb.GraphProto, error) {
	name, index := key, -1
	if i := strings.IndexByte(key, '['); i >= 0 && strings.HasSuffix(key, "]") {
		n, err := strconv.Atoi(key[i+1 : len(key)-1])
		if err != nil {
			return nil, fmt.Errorf("subgraph key %q: %w", key, err)
		}
		name, index = key[:i], n
	}
	for _, a := range np.GetAttribute() {
		switch {
		case a.GetName() != name:
		case index < 0 && a.G != nil:
			return a.G, nil
		case index >= 0 && index < len(a.Graphs):
			return a.Graphs[index], nil
		}
	}
	return nil, fmt.Errorf("no subgraph attribute %q in the written model", key)
}

// additions returns the nodes Write puts first in src and the
// initializers it adds there.
func (w *writer) additions(src *onnxgraph.Graph) ([]*onnxpb.NodeProto, []*onnxpb.TensorProto) {
	if src.Owner == nil {
		return w.prologue, w.inits
	}
	if ig := w.inner[src]; ig != nil {
		return ig.prologue, ig.inits
	}
	return nil, nil
}

// assembleGraph rebuilds gp, the written copy of src.
func (w *writer) assembleGraph(src *onnxgraph.Graph, gp *onnxpb.GraphProto) error {
	prologue, _ := w.additions(src)
	nodesIn := gp.GetNode()
	var nodes []*onnxpb.NodeProto
	nodes = append(nodes, prologue...)
	for _, n := range src.Nodes {
		np := nodesIn[n.Index]
		// A Constant node whose output became a quantized weight is
		// replaced by the weight's DequantizeLinear.
		if n.OpType == "Constant" && n.Domain == "" && len(np.Output) == 1 && w.removed[np.Output[0]] {
			continue
		}
		for i, in := range np.Input {
			if r, ok := w.rename["in:"+in]; ok {
				np.Input[i] = r
			}
		}
		var tail []*onnxpb.NodeProto
		for i, out := range np.Output {
			if r, ok := w.rename["out:"+out]; ok {
				np.Output[i] = r
				tail = append(tail, w.after[out]...)
			}
		}
		if n.OpType == "Gemm" && n.Domain == "" {
			w.foldGemmBeta(np)
		}
		nb, err := w.nbitsNode(n, np)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if nb != nil {
			np = nb
		}
		nodes = append(nodes, np)
		nodes = append(nodes, tail...)
	}
	gp.Node = nodes
	var inits []*onnxpb.TensorProto
	for _, t := range gp.GetInitializer() {
		if !w.removed[t.GetName()] {
			inits = append(inits, t)
		}
	}
	_, added := w.additions(src) // after the nodes: nbitsNode adds some
	gp.Initializer = append(inits, added...)
	var inputs []*onnxpb.ValueInfoProto
	for _, in := range gp.GetInput() {
		if !w.removed[in.GetName()] { // an initializer listed as input (IR < 4)
			inputs = append(inputs, in)
		}
	}
	gp.Input = inputs
	return nil
}

// foldGemmBeta resets beta to 1 on a Gemm whose bias was quantized with
// beta folded in.
func (w *writer) foldGemmBeta(np *onnxpb.NodeProto) {
	if len(np.Input) < 3 {
		return
	}
	b := w.plan.Tensor(np.Input[2])
	if b == nil || b.Role != plan.Bias || b.BiasBeta == 0 || b.BiasBeta == 1 {
		return
	}
	for _, a := range np.Attribute {
		if a.GetName() == "beta" {
			a.F = proto.Float32(1)
		}
	}
}

// stamp writes the opset imports and the lowest IR version that covers
// the content, never lowering the model's.
func (w *writer) stamp() (int64, error) {
	setDefaultOpset(w.out, w.opset)
	if w.msDomain || w.msImport {
		has := false
		for _, o := range w.out.OpsetImport {
			if o.GetDomain() == "com.microsoft" {
				has = true
			}
		}
		if !has {
			w.out.OpsetImport = append(w.out.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("com.microsoft"), Version: proto.Int64(1)})
		}
	}
	ir := max(w.out.GetIrVersion(), irForOpset(w.opset))
	for _, t := range w.plan.Tensors {
		if _, nb := w.nbits[t.Value]; t.Spec == nil || nb {
			continue
		}
		switch w.opts.storedDType(t) {
		case spec.Float8E4M3FN, spec.Float8E5M2:
			ir = max(ir, 9)
		case spec.Int4, spec.UInt4:
			ir = max(ir, 10)
		case spec.Float4E2M1:
			ir = max(ir, 11)
		case spec.Int2, spec.UInt2:
			ir = max(ir, 13)
		}
		if t.Spec.ScaleDType == spec.Float8E8M0FNU && w.opts.keepE8M0() {
			ir = max(ir, 12)
		}
	}
	for _, p := range w.plan.Palettes {
		if p.Palette.NBits <= 4 {
			ir = max(ir, 10) // uint4 indices
		}
	}
	if ir > 13 {
		return 0, errors.New("the quantized model needs an IR version above 13, which this build does not know")
	}
	w.out.IrVersion = proto.Int64(ir)
	return ir, nil
}

// addInitializer adds t to g's initializers under a name made unique from
// base among used, and returns the name.
func addInitializer(g *onnxpb.GraphProto, used map[string]bool, t *tensor.Tensor, base string) (string, error) {
	nm := uniqueIn(used, base)
	tp, err := tensor.ToProto(t, nm)
	if err != nil {
		return "", err
	}
	g.Initializer = append(g.Initializer, tp)
	return nm, nil
}

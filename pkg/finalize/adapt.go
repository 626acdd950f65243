package finalize

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// An adapter rewrites one node written for opset c.from so that it means
// the same at opset c.to. It edits n in place (the node keeps its name and
// metadata_props) and returns the nodes to insert before and after it. It
// is called only when one of the op's versions in the op table (ops.Op.Changes)
// lies in (from, to], and must handle every such version.
type adapter func(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error)

// adapters are the version adapters: ops whose change between opsets has a
// faithful rewrite. Ops of the table without one are refused by
// checkOpsetRaise.
var adapters = map[string]adapter{
	"Dropout":            adaptDropout,
	"Softmax":            adaptSoftmax,
	"LogSoftmax":         adaptSoftmax,
	"Hardmax":            adaptSoftmax,
	"Clip":               adaptClip,
	"Squeeze":            attrsToInputs("axes"),
	"Unsqueeze":          attrsToInputs("axes"),
	"Split":              attrsToInputs("split"),
	"ReduceSum":          attrsToInputs("axes"),
	"ReduceMean":         attrsToInputs("axes"),
	"ReduceMax":          attrsToInputs("axes"),
	"ReduceMin":          attrsToInputs("axes"),
	"ReduceProd":         attrsToInputs("axes"),
	"ReduceL1":           attrsToInputs("axes"),
	"ReduceL2":           attrsToInputs("axes"),
	"ReduceLogSum":       attrsToInputs("axes"),
	"ReduceLogSumExp":    attrsToInputs("axes"),
	"ReduceSumSquare":    attrsToInputs("axes"),
	"Slice":              attrsToInputs("starts", "ends", "axes"),
	"Reshape":            attrsToInputs("shape"),
	"TopK":               adaptTopK,
	"Pad":                adaptPad,
	"Concat":             adaptConcat,
	"BatchNormalization": adaptBatchNorm,
	"GroupNormalization": adaptGroupNorm,
	"RoiAlign":           adaptRoiAlign,
	"GridSample":         adaptGridSample,
	"Resize":             adaptResize,
	"Upsample":           adaptUpsample,
	"Sum":                adaptVariadic, "Max": adaptVariadic, "Min": adaptVariadic, "Mean": adaptVariadic,
	"Add": adaptBroadcast, "Sub": adaptBroadcast, "Mul": adaptBroadcast, "Div": adaptBroadcast,
	"Pow": adaptBroadcast, "Equal": adaptBroadcast, "Greater": adaptBroadcast, "Less": adaptBroadcast,
	"And": adaptBroadcast, "Or": adaptBroadcast, "Xor": adaptBroadcast,
}

// adaptCtx is the state of one opset raise of a model.
type adaptCtx struct {
	from, to int64
	name     func(base string) string
	// types and shapes are the declared element types and shapes by value
	// name (graph inputs, outputs, value_info, initializers, Constant
	// outputs), over every graph of the model.
	types  map[string]int32
	shapes map[string][]int64
	// producer is the node computing each value; read holds the values
	// some node reads or a graph outputs.
	producer map[string]*onnxpb.NodeProto
	read     map[string]bool
	// inits are the initializers to add per graph.
	inits map[*onnxpb.GraphProto][]*onnxpb.TensorProto
	notes []string
	// labels name nodes without a name as the graph view does.
	labels map[*onnxpb.NodeProto]string
}

// label is n's name, or the name the graph view gives an unnamed node.
func (c *adaptCtx) label(n *onnxpb.NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	if l := c.labels[n]; l != "" {
		return l
	}
	return n.GetOpType()
}

// viewLabels maps the main-graph nodes of mp, a copy of m's proto not yet
// reordered, to the names m's graph view gives them.
func viewLabels(m *onnxgraph.Model, mp *onnxpb.ModelProto) map[*onnxpb.NodeProto]string {
	labels := map[*onnxpb.NodeProto]string{}
	nodes := mp.GetGraph().GetNode()
	for _, n := range m.Graph.Nodes {
		if n.Index < len(nodes) {
			labels[nodes[n.Index]] = n.Name
		}
	}
	return labels
}

// adaptOpset rewrites every default-domain node of m (subgraphs included)
// whose op changed meaning between opsets from and to, with its adapter.
// name hands out unused value and node names; labels name unnamed nodes
// in notes and errors. It returns a note per
// rewritten node, and an error naming every node that has no faithful
// rewrite. Ops without an adapter must have been refused before
// (checkOpsetRaise).
func adaptOpset(m *onnxpb.ModelProto, from, to int64, name func(string) string, labels map[*onnxpb.NodeProto]string) ([]string, error) {
	if to <= from {
		return nil, nil
	}
	c := &adaptCtx{from: from, to: to, name: name, types: map[string]int32{}, shapes: map[string][]int64{},
		producer: map[string]*onnxpb.NodeProto{}, read: map[string]bool{}, inits: map[*onnxpb.GraphProto][]*onnxpb.TensorProto{}, labels: labels}
	walkGraphs(m.GetGraph(), c.index)
	var errs []error
	walkGraphs(m.GetGraph(), func(g *onnxpb.GraphProto) {
		var nodes []*onnxpb.NodeProto
		for _, n := range g.GetNode() {
			ad := adapters[n.GetOpType()]
			if d := n.GetDomain(); (d != "" && d != "ai.onnx") || ad == nil || !changedBetween(n.GetOpType(), from, to) {
				nodes = append(nodes, n)
				continue
			}
			before, after, err := ad(c, g, n)
			if err != nil {
				errs = append(errs, fmt.Errorf("node %q (%s): %w", c.label(n), n.GetOpType(), err))
				nodes = append(nodes, n)
				continue
			}
			nodes = append(nodes, before...)
			nodes = append(nodes, n)
			nodes = append(nodes, after...)
		}
		g.Node = nodes
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("raising opset %d to %d: %w", from, to, errors.Join(errs...))
	}
	irInputs := max(m.GetIrVersion(), irForOpset(to)) < 4 // IR 3 lists initializers as inputs
	walkGraphs(m.GetGraph(), func(g *onnxpb.GraphProto) {
		for _, t := range c.inits[g] {
			g.Initializer = append(g.Initializer, t)
			if irInputs {
				g.Input = append(g.Input, valueInfo(t.GetName(), t.GetDataType(), t.GetDims()))
			}
		}
	})
	return c.notes, nil
}

// changedBetween reports whether op changed meaning at a version in
// (from, to].
func changedBetween(op string, from, to int64) bool {
	versions, _ := meaningChanges(op)
	for _, v := range versions {
		if v > from && v <= to {
			return true
		}
	}
	return false
}

// walkGraphs calls f on g and every subgraph, parents first.
func walkGraphs(g *onnxpb.GraphProto, f func(*onnxpb.GraphProto)) {
	if g == nil {
		return
	}
	f(g)
	for _, n := range g.GetNode() {
		for _, a := range n.GetAttribute() {
			walkGraphs(a.G, f)
			for _, sg := range a.Graphs {
				walkGraphs(sg, f)
			}
		}
	}
}

// index records the types, shapes, producers and readers of g's values.
func (c *adaptCtx) index(g *onnxpb.GraphProto) {
	for _, vs := range [][]*onnxpb.ValueInfoProto{g.GetInput(), g.GetValueInfo(), g.GetOutput()} {
		for _, v := range vs {
			tt := v.GetType().GetTensorType()
			if tt == nil {
				continue
			}
			if tt.GetElemType() != 0 {
				c.types[v.GetName()] = tt.GetElemType()
			}
			if tt.Shape != nil {
				dims := make([]int64, len(tt.Shape.GetDim()))
				for i, d := range tt.Shape.GetDim() {
					dims[i] = -1
					if d.GetDimValue() > 0 {
						dims[i] = d.GetDimValue()
					}
				}
				c.shapes[v.GetName()] = dims
			}
		}
	}
	for _, t := range g.GetInitializer() {
		c.types[t.GetName()] = t.GetDataType()
		c.shapes[t.GetName()] = t.GetDims()
	}
	for _, o := range g.GetOutput() {
		c.read[o.GetName()] = true
	}
	for _, n := range g.GetNode() {
		for _, in := range n.GetInput() {
			c.read[in] = true
		}
		for _, out := range n.GetOutput() {
			c.producer[out] = n
		}
		if n.GetOpType() == "Constant" && len(n.GetOutput()) == 1 {
			for _, a := range n.GetAttribute() {
				if a.GetName() == "value" && a.T != nil {
					c.types[n.GetOutput()[0]] = a.T.GetDataType()
					c.shapes[n.GetOutput()[0]] = a.T.GetDims()
				}
			}
		}
	}
}

// sameType are ops whose first output has the element type of their first
// input (for the element type of values without a declared type).
var sameType = map[string]bool{
	"Conv": true, "ConvTranspose": true, "Gemm": true, "MatMul": true, "Relu": true, "LeakyRelu": true,
	"PRelu": true, "Sigmoid": true, "Tanh": true, "Elu": true, "Selu": true, "Clip": true, "Softmax": true,
	"LogSoftmax": true, "Hardmax": true, "Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Neg": true,
	"Abs": true, "Exp": true, "Log": true, "Sqrt": true, "Sum": true, "Max": true, "Min": true, "Mean": true,
	"MaxPool": true, "AveragePool": true, "GlobalAveragePool": true, "GlobalMaxPool": true, "LRN": true,
	"BatchNormalization": true, "InstanceNormalization": true, "Dropout": true, "Identity": true,
	"Reshape": true, "Flatten": true, "Transpose": true, "Squeeze": true, "Unsqueeze": true, "Concat": true,
	"Split": true, "Slice": true, "Pad": true, "Gather": true, "Upsample": true, "Resize": true, "Tile": true,
	"ReduceMean": true, "ReduceSum": true, "ReduceMax": true, "ReduceMin": true, "Expand": true,
}

// elemType returns the element type of value v: declared, or found by
// walking back through ops that keep their input's type (a
// DequantizeLinear gives its scale's type). 0 when unknown.
func (c *adaptCtx) elemType(v string) int32 {
	for seen := map[string]bool{}; v != "" && !seen[v]; {
		seen[v] = true
		if t := c.types[v]; t != 0 {
			return t
		}
		p := c.producer[v]
		switch {
		case p == nil || len(p.GetInput()) == 0:
			return 0
		case p.GetOpType() == "DequantizeLinear" && len(p.GetInput()) > 1:
			for _, a := range p.GetAttribute() {
				if a.GetName() == "output_dtype" && a.GetI() != 0 {
					return int32(a.GetI())
				}
			}
			v = p.GetInput()[1]
		case sameType[p.GetOpType()]:
			v = p.GetInput()[0]
		default:
			return 0
		}
	}
	return 0
}

// sameShape are ops whose first output has the shape of their first input.
var sameShape = map[string]bool{
	"Relu": true, "LeakyRelu": true, "Sigmoid": true, "Tanh": true, "Elu": true, "Selu": true, "Clip": true,
	"Softmax": true, "LogSoftmax": true, "Hardmax": true, "Neg": true, "Abs": true, "Exp": true, "Log": true,
	"Sqrt": true, "Dropout": true, "Identity": true, "QuantizeLinear": true, "DequantizeLinear": true,
	"Cast": true, "LRN": true, "BatchNormalization": true, "InstanceNormalization": true,
}

// shapeOf returns the declared shape of v (or of a value it is computed
// from by shape-preserving ops); -1 marks unknown dims, nil an unknown rank.
// onesFrom is, when v comes from a global pooling of unknown rank, the
// axis after which every dim is 1 (-1 otherwise).
func (c *adaptCtx) shapeOf(v string) (dims []int64, onesFrom int) {
	for seen := map[string]bool{}; v != "" && !seen[v]; {
		seen[v] = true
		if s, ok := c.shapes[v]; ok {
			return s, -1
		}
		p := c.producer[v]
		switch {
		case p == nil || len(p.GetInput()) == 0:
			return nil, -1
		case p.GetOpType() == "GlobalAveragePool" || p.GetOpType() == "GlobalMaxPool" || p.GetOpType() == "GlobalLpPool":
			return nil, 1
		case sameShape[p.GetOpType()]:
			v = p.GetInput()[0]
		default:
			return nil, -1
		}
	}
	return nil, -1
}

// addInit adds a constant for node n to graph g and returns its name.
func (c *adaptCtx) addInit(g *onnxpb.GraphProto, n *onnxpb.NodeProto, what string, t *tensor.Tensor) (string, error) {
	name := c.name(c.label(n) + "_" + what)
	tp, err := tensor.ToProto(t, name)
	if err != nil {
		return "", err
	}
	c.inits[g] = append(c.inits[g], tp)
	return name, nil
}

// floatConst is a scalar of element type dt holding v.
func floatConst(v float32, dt int32) (*tensor.Tensor, error) {
	t := tensor.FromFloat32([]float32{v})
	if dt == int32(tensor.Float) {
		return t, nil
	}
	if !tensor.DType(dt).IsFloat() {
		return nil, fmt.Errorf("element type %s is not a float type", tensor.DType(dt))
	}
	return tensor.Cast(t, tensor.DType(dt))
}

func valueInfo(name string, dt int32, dims []int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
		Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(dt), Shape: shape}}}}
}

// takeAttr removes attribute name from n and returns it (nil if absent).
func takeAttr(n *onnxpb.NodeProto, name string) *onnxpb.AttributeProto {
	for i, a := range n.GetAttribute() {
		if a.GetName() == name {
			n.Attribute = slices.Delete(n.Attribute, i, i+1)
			return a
		}
	}
	return nil
}

func getAttr(n *onnxpb.NodeProto, name string) *onnxpb.AttributeProto {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// setInput puts v at input position i, padding skipped optional inputs
// with "".
func setInput(n *onnxpb.NodeProto, i int, v string) {
	for len(n.Input) <= i {
		n.Input = append(n.Input, "")
	}
	n.Input[i] = v
}

// dropUnusedOutputs removes the outputs of n from index i on, which must
// not be read; it returns the first one that is.
func (c *adaptCtx) dropUnusedOutputs(n *onnxpb.NodeProto, i int) (used string) {
	for _, o := range n.GetOutput()[min(i, len(n.GetOutput())):] {
		if o != "" && c.read[o] {
			return o
		}
	}
	if len(n.Output) > i {
		n.Output = n.Output[:i]
	}
	return ""
}

// dropLegacy removes consumed_inputs, an attribute of opsets before 6 that
// only told in-place optimisers what they could overwrite.
func dropLegacy(n *onnxpb.NodeProto) { takeAttr(n, "consumed_inputs") }

// helper makes a new node around n: its name derives from n's and it
// carries n's metadata_props (module scope, exporter's names).
func (c *adaptCtx) helper(n *onnxpb.NodeProto, op string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	h := &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(c.name(c.label(n) + "_" + op)), Input: in, Output: out, Attribute: attrs}
	for _, kv := range n.GetMetadataProps() {
		h.MetadataProps = append(h.MetadataProps, proto.CloneOf(kv))
	}
	return h
}

// adaptDropout: before 7 the op had is_test (training by default); at 10
// the mask became bool; at 12 ratio moved to an input and training_mode
// was added (inference by default). An inference Dropout is the identity
// at every version, so the node keeps its op, loses the old attributes and
// takes ratio as an input.
func adaptDropout(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if c.from < 7 {
		if a := getAttr(n, "is_test"); a == nil || a.GetI() == 0 {
			return nil, nil, fmt.Errorf("training-mode Dropout (is_test=0 at opset %d) has no inference equivalent", c.from)
		}
		takeAttr(n, "is_test")
	}
	dropLegacy(n)
	if c.from < 10 && c.to >= 10 {
		if used := c.dropUnusedOutputs(n, 1); used != "" {
			return nil, nil, fmt.Errorf("mask output %q is read, and its type changed from the input's to bool at opset 10", used)
		}
	}
	if c.to >= 12 {
		if a := takeAttr(n, "ratio"); a != nil {
			dt := c.elemType(n.GetInput()[0])
			if dt == 0 || !tensor.DType(dt).IsFloat() {
				dt = int32(tensor.Float) // ratio's type T1 is any float type, independent of the data's
			}
			t, err := floatConst(a.GetF(), dt)
			if err != nil {
				return nil, nil, err
			}
			name, err := c.addInit(g, n, "ratio", t)
			if err != nil {
				return nil, nil, err
			}
			setInput(n, 1, name)
		}
	}
	c.notes = append(c.notes, fmt.Sprintf("node %q (Dropout): written in the opset %d form (inference: the identity)", c.label(n), c.to))
	return nil, nil, nil
}

// adaptSoftmax: before 13, Softmax, LogSoftmax and Hardmax coerced the
// input to 2-D [d0·…·d(axis−1), d(axis)·…·d(n−1)] (axis 1 by default) and
// normalised each row; from 13 they normalise along the one axis (−1 by
// default). When axis is the last axis or every dim after it is 1 the two
// agree and only the attribute is pinned. Otherwise the old meaning is
// spelled out: Flatten(axis) → op(axis=1) → Reshape to Shape(input).
func adaptSoftmax(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if len(n.GetInput()) != 1 || len(n.GetOutput()) != 1 {
		return nil, nil, fmt.Errorf("has %d inputs and %d outputs, want 1 and 1", len(n.GetInput()), len(n.GetOutput()))
	}
	axis := int64(1)
	if a := takeAttr(n, "axis"); a != nil {
		axis = a.GetI()
	}
	x, y := n.GetInput()[0], n.GetOutput()[0]
	dims, onesFrom := c.shapeOf(x)
	if dims == nil {
		dims, onesFrom = c.shapeOf(y)
	}
	same := false
	switch {
	case dims != nil:
		ax := axis
		if ax < 0 {
			ax += int64(len(dims))
		}
		if ax < 0 || ax >= int64(len(dims)) {
			return nil, nil, fmt.Errorf("axis %d is out of range for rank %d", axis, len(dims))
		}
		same = true
		for _, d := range dims[ax+1:] {
			if d != 1 {
				same = false
			}
		}
	case onesFrom >= 0:
		same = axis == int64(onesFrom)
	}
	if same {
		n.Attribute = append(n.Attribute, attrInt("axis", axis))
		c.notes = append(c.notes, fmt.Sprintf("node %q (%s): axis %d with only size-1 dims after it: same meaning at opset %d", c.label(n), n.GetOpType(), axis, c.to))
		return nil, nil, nil
	}
	shape, flat, out2d := c.name(x+"_shape"), c.name(x+"_2d"), c.name(y+"_2d")
	before = []*onnxpb.NodeProto{
		c.helper(n, "Shape", []string{x}, []string{shape}),
		c.helper(n, "Flatten", []string{x}, []string{flat}, attrInt("axis", axis)),
	}
	n.Input[0], n.Output[0] = flat, out2d
	n.Attribute = append(n.Attribute, attrInt("axis", 1))
	after = []*onnxpb.NodeProto{c.helper(n, "Reshape", []string{out2d, shape}, []string{y})}
	c.notes = append(c.notes, fmt.Sprintf("node %q (%s): the 2-D coercion of opsets before 13 written as Flatten(axis=%d) → %s → Reshape", c.label(n), n.GetOpType(), axis, n.GetOpType()))
	return before, after, nil
}

// adaptClip: at 11, min and max moved from float attributes to inputs of
// the input's type (absent: unbounded, as the attributes' defaults).
func adaptClip(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	dropLegacy(n)
	lo, hi := takeAttr(n, "min"), takeAttr(n, "max")
	if lo == nil && hi == nil {
		return nil, nil, nil
	}
	dt := c.elemType(n.GetInput()[0])
	if dt == 0 {
		return nil, nil, fmt.Errorf("the element type of input %q is unknown (min and max become inputs of that type)", n.GetInput()[0])
	}
	for i, a := range []*onnxpb.AttributeProto{lo, hi} {
		if a == nil {
			continue
		}
		t, err := floatConst(a.GetF(), dt)
		if err != nil {
			return nil, nil, fmt.Errorf("input %q: %w", n.GetInput()[0], err)
		}
		name, err := c.addInit(g, n, a.GetName(), t)
		if err != nil {
			return nil, nil, err
		}
		setInput(n, 1+i, name)
	}
	c.notes = append(c.notes, fmt.Sprintf("node %q (Clip): min/max attributes moved to inputs", c.label(n)))
	return nil, nil, nil
}

// attrsToInputs moves int64-list attributes to inputs 1, 2, … in order
// (Squeeze/Unsqueeze/Split/Reduce* axes, Slice starts/ends/axes, Reshape
// shape): an absent attribute becomes an absent optional input, whose
// meaning in the new version is the old default (reduce over every axis,
// squeeze every 1, split evenly, slice every axis).
func attrsToInputs(names ...string) adapter {
	return func(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
		dropLegacy(n)
		if len(n.GetInput()) > 1 {
			return nil, nil, fmt.Errorf("has %d inputs where the opset %d form has one", len(n.GetInput()), c.from)
		}
		var moved []string
		for i, name := range names {
			a := takeAttr(n, name)
			if a == nil {
				continue
			}
			v := a.GetInts()
			t := &tensor.Tensor{DType: tensor.Int64, Shape: []int{len(v)}, Data: slices.Clone(v)}
			in, err := c.addInit(g, n, name, t)
			if err != nil {
				return nil, nil, err
			}
			setInput(n, 1+i, in)
			moved = append(moved, name)
		}
		if n.GetOpType() == "Slice" && len(moved) > 0 && (len(n.GetInput()) < 3 || n.Input[1] == "" || n.Input[2] == "") {
			return nil, nil, errors.New("starts and ends are required")
		}
		if len(moved) > 0 {
			c.notes = append(c.notes, fmt.Sprintf("node %q (%s): %v moved from attributes to inputs", c.label(n), n.GetOpType(), moved))
		}
		return nil, nil, nil
	}
}

// adaptTopK: at 10, k moved from an attribute to a 1-element int64 input.
func adaptTopK(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	a := takeAttr(n, "k")
	if a == nil {
		return nil, nil, errors.New("no k attribute")
	}
	in, err := c.addInit(g, n, "k", &tensor.Tensor{DType: tensor.Int64, Shape: []int{1}, Data: []int64{a.GetI()}})
	if err != nil {
		return nil, nil, err
	}
	setInput(n, 1, in)
	return nil, nil, nil
}

// adaptPad: at 11, pads (paddings before 2) and the float value moved to
// inputs: int64 pads and a scalar constant_value of the input's type.
func adaptPad(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	pads := takeAttr(n, "pads")
	if pads == nil {
		pads = takeAttr(n, "paddings")
	}
	if pads == nil {
		return nil, nil, errors.New("no pads attribute")
	}
	p := slices.Clone(pads.GetInts())
	in, err := c.addInit(g, n, "pads", &tensor.Tensor{DType: tensor.Int64, Shape: []int{len(p)}, Data: p})
	if err != nil {
		return nil, nil, err
	}
	setInput(n, 1, in)
	if v := takeAttr(n, "value"); v != nil && v.GetF() != 0 {
		dt := c.elemType(n.GetInput()[0])
		if dt == 0 {
			return nil, nil, fmt.Errorf("the element type of input %q is unknown (value becomes an input of that type)", n.GetInput()[0])
		}
		t, err := floatConst(v.GetF(), dt)
		if err != nil {
			return nil, nil, err
		}
		cv, err := c.addInit(g, n, "constant_value", t)
		if err != nil {
			return nil, nil, err
		}
		setInput(n, 2, cv)
	}
	c.notes = append(c.notes, fmt.Sprintf("node %q (Pad): pads and value moved from attributes to inputs", c.label(n)))
	return nil, nil, nil
}

// adaptConcat: at 4, axis became required; it was 1 by default.
func adaptConcat(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if getAttr(n, "axis") == nil {
		n.Attribute = append(n.Attribute, attrInt("axis", 1))
	}
	return nil, nil, nil
}

// adaptBatchNorm: before 7 the op had is_test; at 9 spatial was dropped
// (spatial=1, the default, is the only remaining form); at 14 the extra
// outputs exist only in training mode. The inference form keeps its one
// output.
func adaptBatchNorm(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if c.from < 7 {
		if a := getAttr(n, "is_test"); a == nil || a.GetI() == 0 {
			return nil, nil, fmt.Errorf("training-mode BatchNormalization (is_test=0 at opset %d)", c.from)
		}
		takeAttr(n, "is_test")
	}
	dropLegacy(n)
	if a := takeAttr(n, "spatial"); a != nil && a.GetI() == 0 {
		return nil, nil, errors.New("spatial=0 (statistics per element, not per channel) was removed at opset 9")
	}
	if used := c.dropUnusedOutputs(n, 1); used != "" {
		return nil, nil, fmt.Errorf("training output %q is read", used)
	}
	return nil, nil, nil
}

// adaptGroupNorm: at 21, scale and bias went from one value per group to
// one per channel (ONNX deprecated the per-group form). Constant ones are
// written out per channel, each group's value repeated over its channels;
// the channel count comes from the input's declared shape.
func adaptGroupNorm(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	groups := int64(0)
	if a := getAttr(n, "num_groups"); a != nil {
		groups = a.GetI()
	}
	if len(n.GetInput()) < 3 || groups <= 0 {
		return nil, nil, errors.New("needs X, scale, bias and num_groups")
	}
	dims := c.shapes[n.GetInput()[0]]
	if len(dims) < 2 || dims[1] <= 0 || dims[1]%groups != 0 {
		return nil, nil, fmt.Errorf("the channel count of input %q is not known or not a multiple of num_groups %d (scale and bias become one value per channel)", n.GetInput()[0], groups)
	}
	channels := int(dims[1])
	for i, what := range []string{"scale", "bias"} {
		name := n.GetInput()[1+i]
		var tp *onnxpb.TensorProto
		for _, t := range g.GetInitializer() {
			if t.GetName() == name {
				tp = t
			}
		}
		if tp == nil {
			return nil, nil, fmt.Errorf("%s %q is not a constant of the graph, so it cannot be written per channel", what, name)
		}
		t, err := tensor.FromProto(tp, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %q: %w", what, name, err)
		}
		v, err := t.AsFloat32()
		if err != nil || len(v) != int(groups) {
			return nil, nil, fmt.Errorf("%s %q has %d values for %d groups", what, name, t.Len(), groups)
		}
		per := make([]float32, channels)
		for ch := range per {
			per[ch] = v[ch/(channels/int(groups))]
		}
		pt, err := tensor.Cast(tensor.FromFloat32(per, channels), t.DType)
		if err != nil {
			return nil, nil, err
		}
		in, err := c.addInit(g, n, what, pt)
		if err != nil {
			return nil, nil, err
		}
		setInput(n, 1+i, in)
	}
	c.notes = append(c.notes, fmt.Sprintf("node %q (GroupNormalization): scale and bias written per channel (%d groups of %d)", c.label(n), groups, channels/int(groups)))
	return nil, nil, nil
}

// adaptRoiAlign: at 16, coordinate_transformation_mode arrived, its
// default half_pixel shifting the input coordinates by −0.5; the earlier
// versions did not shift, which output_half_pixel keeps.
func adaptRoiAlign(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if getAttr(n, "coordinate_transformation_mode") == nil {
		n.Attribute = append(n.Attribute, attrStr("coordinate_transformation_mode", "output_half_pixel"))
		c.notes = append(c.notes, fmt.Sprintf("node %q (RoiAlign): coordinate_transformation_mode output_half_pixel, the earlier versions' coordinates", c.label(n)))
	}
	return nil, nil, nil
}

// adaptGridSample: at 20, the modes bilinear and bicubic were renamed
// linear and cubic (linear the default, as bilinear was); on the 2-D
// inputs of the earlier versions they mean the same.
func adaptGridSample(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	a := getAttr(n, "mode")
	if a == nil {
		return nil, nil, nil
	}
	if renamed, ok := map[string]string{"bilinear": "linear", "bicubic": "cubic"}[string(a.GetS())]; ok {
		c.notes = append(c.notes, fmt.Sprintf("node %q (GridSample): mode %s is called %s from opset 20", c.label(n), a.GetS(), renamed))
		a.S = []byte(renamed)
	}
	return nil, nil, nil
}

// attrStr is a string attribute.
func attrStr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// adaptResize: at 11, Resize gained an roi input before scales and the
// coordinate_transformation_mode and nearest_mode attributes, whose
// defaults (half_pixel, round_prefer_floor) are not Resize-10's
// coordinates: those are asymmetric, and its nearest takes the floor. The
// node reads (X, no roi, scales) with both attributes written out.
func adaptResize(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if len(n.GetInput()) != 2 {
		return nil, nil, fmt.Errorf("has %d inputs where the opset %d form has X and scales", len(n.GetInput()), c.from)
	}
	return nil, nil, resize10To11(c, n, "Resize", n.GetInput()[1])
}

// resize10To11 writes a Resize-10 node (or an Upsample, op) reading scales
// as the opset-11 Resize of the same values.
func resize10To11(c *adaptCtx, n *onnxpb.NodeProto, op, scales string) error {
	mode := "nearest"
	if a := getAttr(n, "mode"); a != nil {
		mode = string(a.GetS())
	}
	if mode != "nearest" && mode != "linear" {
		return fmt.Errorf("mode %q is not one of opset 10's nearest and linear", mode)
	}
	n.Input = []string{n.GetInput()[0], "", scales}
	n.Attribute = append(n.Attribute, attrStr("coordinate_transformation_mode", "asymmetric"))
	if mode == "nearest" {
		n.Attribute = append(n.Attribute, attrStr("nearest_mode", "floor"))
	}
	c.notes = append(c.notes, fmt.Sprintf("node %q (%s): written as Resize with an empty roi and asymmetric coordinates%s, as opset 10 computed it",
		c.label(n), op, map[bool]string{true: " rounded down (floor)", false: ""}[mode == "nearest"]))
	return nil
}

// adaptUpsample: Upsample was removed at 10 for Resize, which computes the
// same (asymmetric coordinates, nearest by floor). Upsample-7 holds its
// scales as an attribute, Upsample-9 as its second input; the node becomes
// Resize of the target opset.
func adaptUpsample(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	if c.from < 7 {
		return nil, nil, fmt.Errorf("the opset-%d form (height_scale and width_scale) has no rewrite here", c.from)
	}
	scales := ""
	if a := takeAttr(n, "scales"); a != nil {
		if len(n.GetInput()) != 1 {
			return nil, nil, errors.New("has a scales attribute and more than one input")
		}
		v := a.GetFloats()
		if scales, err = c.addInit(g, n, "scales", tensor.FromFloat32(slices.Clone(v), len(v))); err != nil {
			return nil, nil, err
		}
	} else if len(n.GetInput()) == 2 {
		scales = n.GetInput()[1]
	} else {
		return nil, nil, errors.New("no scales (attribute or second input)")
	}
	n.OpType = proto.String("Resize")
	if c.to < 11 {
		n.Input = []string{n.GetInput()[0], scales}
		c.notes = append(c.notes, fmt.Sprintf("node %q (Upsample): written as Resize, which opset 10 made its replacement", c.label(n)))
		return nil, nil, nil
	}
	return nil, nil, resize10To11(c, n, "Upsample", scales)
}

// adaptVariadic: at 8, Sum/Max/Min/Mean gained numpy broadcasting; their
// inputs had to have one shape before, which broadcasting leaves alone.
func adaptVariadic(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	dropLegacy(n)
	return nil, nil, nil
}

// adaptBroadcast: at 7, the broadcast/axis attributes of binary ops gave
// way to numpy broadcasting. Without broadcast=1 the inputs had one shape,
// which means the same under both rules; legacy broadcasting is refused.
func adaptBroadcast(c *adaptCtx, g *onnxpb.GraphProto, n *onnxpb.NodeProto) (before, after []*onnxpb.NodeProto, err error) {
	dropLegacy(n)
	if a := takeAttr(n, "broadcast"); a != nil && a.GetI() != 0 {
		return nil, nil, errors.New("broadcast=1 (legacy broadcasting of opsets before 7) has no rewrite here")
	}
	takeAttr(n, "axis")
	return nil, nil, nil
}

// RaiseOpset returns a copy of m importing default-domain opset to, with
// every node whose op changed meaning on the way rewritten by its version
// adapter (node names and metadata_props kept), and the IR version raised
// to that opset's release. It fails, naming the ops or nodes, when a
// change has no faithful rewrite. The notes list the rewritten nodes.
func RaiseOpset(m *onnxgraph.Model, to int64) (*onnxgraph.Model, []string, error) {
	from := m.Opset("")
	if to < from {
		return nil, nil, fmt.Errorf("opset %d is below the model's opset %d; coreaiq does not lower opsets", to, from)
	}
	if err := checkOpsetRaise(m.Proto, from, to); err != nil {
		return nil, nil, err
	}
	out := proto.CloneOf(m.Proto)
	used := usedNames(out.GetGraph())
	notes, err := adaptOpset(out, from, to, func(base string) string { return uniqueIn(used, base) }, viewLabels(m, out))
	if err != nil {
		return nil, nil, err
	}
	setDefaultOpset(out, to)
	out.IrVersion = proto.Int64(max(out.GetIrVersion(), irForOpset(to)))
	r, err := m.Derive(out, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("raised model is not valid: %w", err)
	}
	return r, notes, nil
}

// setDefaultOpset stamps the default-domain opset import.
func setDefaultOpset(m *onnxpb.ModelProto, v int64) {
	for _, o := range m.OpsetImport {
		if onnxgraph.NormalizeDomain(o.GetDomain()) == "" {
			o.Version = proto.Int64(v)
			return
		}
	}
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(""), Version: proto.Int64(v)})
}

package finalize

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Tie is an embedding table that a Gather and a vocabulary projection
// (lm_head) both read, as torch exporters write a model whose output
// projection is tied to its input embedding: a MatMul reading the table
// through a Transpose, or a Gemm with transB reading the table itself.
// The head's weight is then no constant of its own, so it can only share
// the table's precision until Untie gives it one.
type Tie struct {
	// Table is the initializer both read (through Identity copies, if any).
	Table *onnxgraph.Value
	// Gathers are the embedding lookups reading it.
	Gathers []*onnxgraph.Node
	// Head is the MatMul or Gemm reading it as its weight (input 1).
	Head *onnxgraph.Node
	// Transpose is the node between the table and Head, nil when Head is
	// a Gemm reading the table itself.
	Transpose *onnxgraph.Node
	// Weight is the name Head's own weight takes when untied: the
	// Transpose's output (the name Head already reads), or the module's
	// weight name ("lm_head.weight") for a Gemm.
	Weight string
}

// TiedTables finds the ties of m's main graph, in node order of the heads.
func TiedTables(m *onnxgraph.Model) []Tie {
	gathers := map[*onnxgraph.Value][]*onnxgraph.Node{}
	for _, n := range m.Graph.Nodes {
		if n.OpType != "Gather" || n.Domain != "" || len(n.Inputs) < 2 {
			continue
		}
		if a := n.Attr("axis"); a != nil && a.GetI() != 0 {
			continue
		}
		if t := initializerOf(n.Inputs[0]); t != nil && len(t.Const.GetDims()) == 2 && t.DType().IsFloat() {
			gathers[t] = append(gathers[t], n)
		}
	}
	if len(gathers) == 0 {
		return nil
	}
	var ties []Tie
	for _, n := range m.Graph.Nodes {
		if (n.OpType != "MatMul" && n.OpType != "Gemm") || n.Domain != "" || len(n.Inputs) < 2 || n.Inputs[1] == nil {
			continue
		}
		w := n.Inputs[1]
		if p := w.Producer; p != nil && isTranspose2D(p) && len(w.Consumers) == 1 && !w.IsGraphOutput {
			if t := initializerOf(p.Inputs[0]); gathers[t] != nil {
				ties = append(ties, Tie{Table: t, Gathers: gathers[t], Head: n, Transpose: p, Weight: w.Name})
			}
			continue
		}
		if a := n.Attr("transB"); n.OpType == "Gemm" && a != nil && a.GetI() == 1 {
			if t := initializerOf(w); gathers[t] != nil {
				base := w.Name + "." + n.Name
				if n.Module != "" {
					base = n.Module + ".weight"
				}
				ties = append(ties, Tie{Table: t, Gathers: gathers[t], Head: n, Weight: uniqueName(m, base)})
			}
		}
	}
	return ties
}

// isTranspose2D reports whether n swaps the two axes of a matrix.
func isTranspose2D(n *onnxgraph.Node) bool {
	if n.OpType != "Transpose" || n.Domain != "" || len(n.Inputs) != 1 || n.Inputs[0] == nil {
		return false
	}
	t := initializerOf(n.Inputs[0])
	if t == nil || len(t.Const.GetDims()) != 2 {
		return false
	}
	perm := n.Attr("perm")
	return perm == nil || (len(perm.GetInts()) == 2 && perm.GetInts()[0] == 1 && perm.GetInts()[1] == 0)
}

// UntieOptions tune Untie.
type UntieOptions struct {
	// Scratch, when set, receives the transposed copies (see
	// onnxgraph.Scratch), so that a large table's copy waits on disk.
	Scratch *onnxgraph.Scratch
	// ShapeOnly gives each head a weight of the right name, type and
	// shape whose bytes are the table's, untransposed: enough to resolve
	// a config against (resolution reads no weight data) without copying
	// the table. Such a model must not be run or written.
	ShapeOnly bool
}

// Untie returns a copy of m in which the head of each tie reads a weight
// of its own, a copy of the table (transposed when the head read it
// through a Transpose, whose node is dropped), so that it can be quantized
// apart from the embedding. The Gathers keep reading the table.
func Untie(m *onnxgraph.Model, ties []Tie, opts UntieOptions) (*onnxgraph.Model, error) {
	if len(ties) == 0 {
		return m, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	drop := map[int]bool{}
	for _, tie := range ties {
		table := tie.Table.Const
		var w *onnxpb.TensorProto
		if tie.Transpose == nil || opts.ShapeOnly {
			// The table's bytes, shared: nothing edits a weight's bytes
			// in place (a changed weight gets new ones).
			raw := table.RawData
			table.RawData = nil
			w = proto.CloneOf(table)
			table.RawData = raw
			w.RawData = raw
			w.Name = proto.String(tie.Weight)
			if tie.Transpose != nil {
				d := table.GetDims()
				w.Dims = []int64{d[1], d[0]}
			}
		} else {
			var err error
			if w, err = transposedCopy(m, table, tie.Weight); err != nil {
				return nil, fmt.Errorf("%s: weight %q from %q: %w", tie.Head, tie.Weight, tie.Table.Name, err)
			}
			if err := opts.Scratch.Move(w); err != nil {
				return nil, err
			}
		}
		if tie.Transpose != nil {
			drop[tie.Transpose.Index] = true
			// Identity copies of the table that only fed the Transpose
			// go with it.
			for v := tie.Transpose.Inputs[0]; v.Producer != nil && len(v.Consumers) == 1 && !v.IsGraphOutput; v = v.Producer.Inputs[0] {
				drop[v.Producer.Index] = true
			}
		}
		g.Initializer = append(g.Initializer, w)
		g.Node[tie.Head.Index].Input[1] = tie.Weight
		if out.GetIrVersion() < 4 {
			// Before IR 4 every initializer is a graph input too.
			g.Input = append(g.Input, tensorInput(w))
		}
	}
	dropNodes(g, drop)
	var vi []*onnxpb.ValueInfoProto
	for _, v := range g.ValueInfo {
		if !isUntied(ties, v.GetName()) {
			vi = append(vi, v)
		}
	}
	g.ValueInfo = vi
	um, err := m.Derive(out, opts.Scratch)
	if err != nil {
		return nil, fmt.Errorf("untying tied weights: %w", err)
	}
	um.Path = m.Path
	return um, nil
}

// isUntied reports whether name is the weight a tie's head now reads as
// an initializer (its value_info, the Transpose output's, goes).
func isUntied(ties []Tie, name string) bool {
	for _, t := range ties {
		if t.Transpose != nil && t.Weight == name {
			return true
		}
	}
	return false
}

// transposedCopy returns the 2-D table t transposed, as an initializer
// called name of the same element type.
func transposedCopy(m *onnxgraph.Model, t *onnxpb.TensorProto, name string) (*onnxpb.TensorProto, error) {
	src, err := tensor.FromProto(t, m)
	if err != nil {
		return nil, err
	}
	rows, cols := src.Shape[0], src.Shape[1]
	dst := tensor.New(src.DType, cols, rows)
	from, to := tensor.ByteView(src.Data), tensor.ByteView(dst.Data)
	size := src.DType.ElemSize()
	if from == nil || size <= 0 || len(from) != rows*cols*size {
		return nil, fmt.Errorf("a %s table cannot be transposed", src.DType)
	}
	for r := range rows {
		for c := range cols {
			copy(to[(c*rows+r)*size:(c*rows+r+1)*size], from[(r*cols+c)*size:(r*cols+c+1)*size])
		}
	}
	return tensor.ToProto(dst, name)
}

// tensorInput declares initializer t as a graph input.
func tensorInput(t *onnxpb.TensorProto) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range t.GetDims() {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(t.GetName()), Type: &onnxpb.TypeProto{
		Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(t.GetDataType()), Shape: shape}},
	}}
}

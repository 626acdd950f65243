package finalize

import (
	"fmt"
	"math/bits"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/quant"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Format is the form quantized weights are written in.
type Format uint8

// The formats.
const (
	// FormatQDQ writes every quantized tensor as integers followed by
	// DequantizeLinear (the default).
	FormatQDQ Format = iota
	// FormatORTNBits writes 4-bit weights of MatMul (and of Gemm with
	// alpha = 1, transA = 0) as ONNX Runtime's com.microsoft MatMulNBits;
	// everything else is written as in FormatQDQ.
	FormatORTNBits
)

var formatNames = [...]string{"qdq", "ort-nbits"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("format(%d)", int(f))
}

// ParseFormat reads a format name ("" is qdq).
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatQDQ, nil
	}
	for i, n := range formatNames {
		if n == s {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("unknown format %q (formats: qdq, ort-nbits)", s)
}

// nbitsBlockSizes are the block sizes ONNX Runtime's CPU MatMulNBits
// kernel accepts (contrib_ops/cpu/quantization/matmul_nbits.cc).
func nbitsBlockSize(b int) bool { return b >= 16 && b <= 256 && bits.OnesCount(uint(b)) == 1 }

// nbitsLayout is how one 4-bit weight maps onto MatMulNBits.
type nbitsLayout struct {
	k, n      int
	transB    bool // the weight is [N, K] (Gemm transB = 1)
	blockSize int
}

// nbitsPlan decides whether weight t can be written as MatMulNBits: every
// node it serves is a MatMul reading it as B, or a Gemm with alpha = 1,
// transA = 0 and a bias that is absent or a [N] constant; the weight is
// 2-D 4-bit with float32/float16 data, blocked along K with a block size
// ONNX Runtime's kernel accepts, or per channel along N with K ≤ 256. It
// returns "" and the layout, or the reason it cannot.
func (w *writer) nbitsPlan(t *plan.TensorPlan) (nbitsLayout, string) {
	var l nbitsLayout
	if t.Role != plan.Weight || (t.Spec.DType != spec.Int4 && t.Spec.DType != spec.UInt4) {
		return l, "not a 4-bit weight"
	}
	if len(t.Shape) != 2 {
		return l, fmt.Sprintf("weight of rank %d, not 2", len(t.Shape))
	}
	if ft := floatTypeOf(t); ft != tensor.Float && ft != tensor.Float16 {
		return l, fmt.Sprintf("%s weight", ft)
	}
	if st, _ := t.Spec.ScaleDType.TensorType(); st != tensor.Undefined && st != tensor.Float && st != floatTypeOf(t) {
		return l, fmt.Sprintf("%s scales", t.Spec.ScaleDType)
	}
	v := w.value(t.Value)
	if v == nil || len(v.Consumers) == 0 {
		return l, "no consumer"
	}
	first := true
	for _, c := range v.Consumers {
		var cl nbitsLayout
		if c.Domain != "" || len(c.Inputs) < 2 || c.Inputs[1] != v || c.Inputs[0] == v {
			return l, fmt.Sprintf("%s does not read it as its B input", c)
		}
		switch c.OpType {
		case "MatMul":
			cl.k, cl.n = t.Shape[0], t.Shape[1]
		case "Gemm":
			if a := c.Attr("alpha"); a != nil && a.GetF() != 1 {
				return l, fmt.Sprintf("%s has alpha %g", c, a.GetF())
			}
			if a := c.Attr("transA"); a != nil && a.GetI() != 0 {
				return l, fmt.Sprintf("%s has transA = 1", c)
			}
			if a := c.Attr("transB"); a != nil && a.GetI() != 0 {
				cl.transB = true
			}
			cl.k, cl.n = t.Shape[0], t.Shape[1]
			if cl.transB {
				cl.k, cl.n = t.Shape[1], t.Shape[0]
			}
			if len(c.Inputs) > 2 && c.Inputs[2] != nil {
				b := c.Inputs[2]
				if b.Const == nil {
					return l, fmt.Sprintf("%s has a computed bias", c)
				}
				if d := b.Const.GetDims(); len(d) != 1 || int(d[0]) != cl.n {
					return l, fmt.Sprintf("%s has a bias of shape %v, not [%d]", c, d, cl.n)
				}
				if w.plan.Tensor(b.Name) != nil {
					return l, fmt.Sprintf("%s has a quantized bias", c)
				}
			}
		default:
			return l, fmt.Sprintf("read by %s", c)
		}
		if !first && cl != l {
			return l, "read with different layouts"
		}
		l, first = cl, false
	}
	kAxis := 0
	if l.transB {
		kAxis = 1
	}
	switch {
	case t.BlockSize > 0 && t.Axis == kAxis:
		if !nbitsBlockSize(t.BlockSize) {
			return l, fmt.Sprintf("block size %d (MatMulNBits needs 16, 32, 64, 128 or 256)", t.BlockSize)
		}
		l.blockSize = t.BlockSize
	case t.BlockSize == 0 && t.Axis == 1-kAxis:
		b := max(16, 1<<bits.Len(uint(l.k-1)))
		if b > 256 {
			return l, fmt.Sprintf("per channel with K = %d (one block of more than 256)", l.k)
		}
		l.blockSize = b
	default:
		return l, "not blocked along K nor per channel along N"
	}
	return l, ""
}

// chooseNBits marks the weights written as MatMulNBits.
func (w *writer) chooseNBits() {
	if w.opts.Format != FormatORTNBits {
		return
	}
	w.nbits = map[string]nbitsLayout{}
	for _, t := range w.plan.Tensors {
		if t.Role != plan.Weight || (t.Spec.DType != spec.Int4 && t.Spec.DType != spec.UInt4) {
			continue
		}
		l, why := w.nbitsPlan(t)
		if why != "" {
			w.notes = append(w.notes, fmt.Sprintf("weight %q: written as QDQ, not MatMulNBits: %s", t.Value, why))
			continue
		}
		w.nbits[t.Value] = l
	}
}

// writeNBits writes weight t as MatMulNBits initializers: B uint8 [N,
// k_blocks, block_size/2] (K packed low nibble first, padded with the zero
// point), scales [N, k_blocks] in the float type, and zero points packed
// per row when they are not all 8 (MatMulNBits' implicit zero point).
func (w *writer) writeNBits(t *plan.TensorPlan) error {
	l := w.nbits[t.Value]
	data, err := w.constData(t.Value)
	if err != nil {
		return err
	}
	p := t.Params
	q, err := Quantize(data, t.Shape, t.Axis, t.BlockSize, t.Spec, p)
	if err != nil {
		return fmt.Errorf("weight %q: %w", t.Value, err)
	}
	// Unsigned codes: int4 q with zero point z is uint4 q+8 with z+8.
	off := int32(0)
	if t.Spec.DType == spec.Int4 {
		off = 8
	}
	code := func(i int) int32 {
		if d, ok := q.Data.([]int8); ok {
			return int32(d[i]) + off
		}
		return int32(q.Data.([]uint8)[i]) + off
	}
	idx, err := quant.NewLayout(t.Shape, t.Axis, t.BlockSize)
	if err != nil {
		return fmt.Errorf("weight %q: %w", t.Value, err)
	}
	elem := func(k, n int) int {
		if l.transB {
			return n*l.k + k
		}
		return k*l.n + n
	}
	kb := (l.k + l.blockSize - 1) / l.blockSize
	blob := l.blockSize / 2
	b := tensor.New(tensor.Uint8, l.n, kb, blob)
	bd := b.Data.([]uint8)
	scales := make([]float32, l.n*kb)
	zps := make([]int32, l.n*kb)
	allEight := true
	for n := range l.n {
		for j := range kb {
			g := idx.Of(elem(j*l.blockSize, n))
			scales[n*kb+j], zps[n*kb+j] = p.Scales[g], p.ZeroPoints[g]+off
			allEight = allEight && zps[n*kb+j] == 8
			for i := range l.blockSize {
				c := zps[n*kb+j] // padding past K dequantizes to 0
				if k := j*l.blockSize + i; k < l.k {
					c = code(elem(k, n))
				}
				at := (n*kb+j)*blob + i/2
				bd[at] |= uint8(c&0xF) << (4 * (i % 2))
			}
		}
	}
	base := t.Value
	bName := w.name(base + "_MatMulNBits_B")
	if err := w.addInit(b, bName); err != nil {
		return err
	}
	st, err := scaleTensor(floatTypeOf(t), []int{l.n, kb}, scales)
	if err != nil {
		return fmt.Errorf("weight %q: %w", t.Value, err)
	}
	sName := w.name(base + "_MatMulNBits_scales")
	if err := w.addInit(st, sName); err != nil {
		return err
	}
	zName := ""
	if !allEight {
		zt := tensor.New(tensor.Uint8, l.n, (kb+1)/2)
		zd := zt.Data.([]uint8)
		for n := range l.n {
			for j := range kb {
				zd[n*((kb+1)/2)+j/2] |= uint8(zps[n*kb+j]&0xF) << (4 * (j % 2))
			}
		}
		zName = w.name(base + "_MatMulNBits_zero_points")
		if err := w.addInit(zt, zName); err != nil {
			return err
		}
	}
	w.nbitsInits[t.Value] = [3]string{bName, sName, zName}
	w.removed[t.Value] = true
	w.msImport = true
	return nil
}

// nbitsNode returns the MatMulNBits node replacing source node n (already
// renamed), or nil when n keeps its form.
func (w *writer) nbitsNode(n *onnxgraph.Node, np *onnxpb.NodeProto) (*onnxpb.NodeProto, error) {
	if w.nbits == nil || len(np.Input) < 2 || n.Domain != "" || (n.OpType != "MatMul" && n.OpType != "Gemm") {
		return nil, nil
	}
	l, ok := w.nbits[n.Inputs[1].Name]
	if !ok {
		return nil, nil
	}
	t := w.plan.Tensor(n.Inputs[1].Name)
	ins := w.nbitsInits[t.Value]
	in := []string{np.Input[0], ins[0], ins[1], ins[2]}
	if n.OpType == "Gemm" && len(np.Input) > 2 && np.Input[2] != "" {
		bias := np.Input[2]
		if a := n.Attr("beta"); a != nil && a.GetF() != 1 {
			// beta folded into a copy of the bias.
			f, err := w.constData(bias)
			if err != nil {
				return nil, err
			}
			for i := range f {
				f[i] *= a.GetF()
			}
			bt := tensor.FromFloat32(f, len(f))
			if ft := floatTypeOf(t); ft != tensor.Float {
				if bt, err = tensor.Cast(bt, ft); err != nil {
					return nil, err
				}
			}
			bias = w.name(bias + "_beta")
			if err := w.addInit(bt, bias); err != nil {
				return nil, err
			}
		}
		in = append(in, "", bias) // g_idx (deprecated) absent
	}
	for len(in) > 0 && in[len(in)-1] == "" {
		in = in[:len(in)-1]
	}
	out := &onnxpb.NodeProto{OpType: proto.String("MatMulNBits"), Domain: proto.String("com.microsoft"),
		Name: proto.String(np.GetName()), Input: in, Output: np.Output,
		Attribute: []*onnxpb.AttributeProto{attrInt("K", int64(l.k)), attrInt("N", int64(l.n)), attrInt("bits", 4),
			attrInt("block_size", int64(l.blockSize))},
		MetadataProps: np.MetadataProps}
	if r := t.Rule; r.File != "" || r.Path != "" {
		out.MetadataProps = append(out.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(RuleMetadataKey), Value: proto.String(r.String())})
	}
	return out, nil
}

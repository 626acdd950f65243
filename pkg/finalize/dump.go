package finalize

import (
	"crypto/sha256"
	"fmt"
	"io"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// DumpModel writes a canonical text form of a model's main graph: IR
// version and opsets, inputs and outputs, nodes in file order with their
// attributes and metadata keys, and each initializer's type, shape and the
// sha256 of its raw bytes. It is what golden tests compare, since protobuf
// bytes are not canonical.
func DumpModel(w io.Writer, m *onnxgraph.Model) error {
	var b strings.Builder
	mp := m.Proto
	fmt.Fprintf(&b, "ir_version %d\n", mp.GetIrVersion())
	var ops []string
	for _, o := range mp.GetOpsetImport() {
		ops = append(ops, fmt.Sprintf("%q:%d", o.GetDomain(), o.GetVersion()))
	}
	sort.Strings(ops)
	fmt.Fprintf(&b, "opsets %s\n", strings.Join(ops, " "))
	g := mp.GetGraph()
	for _, v := range g.GetInput() {
		fmt.Fprintf(&b, "input %q\n", v.GetName())
	}
	for _, v := range g.GetOutput() {
		fmt.Fprintf(&b, "output %q\n", v.GetName())
	}
	for _, n := range g.GetNode() {
		op := n.GetOpType()
		if d := n.GetDomain(); d != "" {
			op = d + "." + op
		}
		fmt.Fprintf(&b, "node %q %s(%s) -> %s", n.GetName(), op, strings.Join(n.GetInput(), ", "), strings.Join(n.GetOutput(), ", "))
		for _, a := range n.GetAttribute() {
			fmt.Fprintf(&b, " %s=%s", a.GetName(), attrString(a))
		}
		for _, kv := range n.GetMetadataProps() {
			fmt.Fprintf(&b, " meta:%s", kv.GetKey())
		}
		b.WriteString("\n")
	}
	inits := append([]*onnxpb.TensorProto(nil), g.GetInitializer()...)
	sort.SliceStable(inits, func(i, j int) bool { return inits[i].GetName() < inits[j].GetName() })
	for _, t := range inits {
		raw, err := rawBytes(m, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "init %q %s%v sha256:%x\n", t.GetName(), tensor.DType(t.GetDataType()), t.GetDims(), sha256.Sum256(raw))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// rawBytes is the raw_data encoding of a tensor, whatever field holds it.
func rawBytes(m *onnxgraph.Model, t *onnxpb.TensorProto) ([]byte, error) {
	if len(t.GetRawData()) > 0 {
		return t.GetRawData(), nil
	}
	tt, err := tensor.FromProto(t, m)
	if err != nil {
		return nil, err
	}
	if tt.DType == tensor.String {
		return proto.Marshal(t)
	}
	return tensor.EncodeRaw(tt)
}

func attrString(a *onnxpb.AttributeProto) string {
	switch a.GetType() {
	case onnxpb.AttributeProto_INT:
		return fmt.Sprint(a.GetI())
	case onnxpb.AttributeProto_FLOAT:
		return fmt.Sprint(a.GetF())
	case onnxpb.AttributeProto_STRING:
		return fmt.Sprintf("%q", a.GetS())
	case onnxpb.AttributeProto_INTS:
		return fmt.Sprint(a.GetInts())
	case onnxpb.AttributeProto_FLOATS:
		return fmt.Sprint(a.GetFloats())
	}
	return a.GetType().String()
}

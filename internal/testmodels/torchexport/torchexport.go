// Package torchexport writes ONNX files laid out as torch's two ONNX
// exporters write them, for one model shaped like the coreai-opt guide's
// examples. Torch is not available to the build, so the files are written
// from the documented formats (docs/RATIONALE.md, "Torch export test
// graphs"), not by torch:
//
//   - Dynamo (torch.onnx.export(..., dynamo=True), torch 2.9, opset 18):
//     graph "main_graph"; node names "node_" + the FX node name; every node
//     carries pkg.torch.onnx.name_scopes (module path, root first, FX op
//     name last), pkg.torch.onnx.class_hierarchy (the classes, aten target
//     last), namespace and pkg.torch.onnx.fx_node; initializers are named
//     by parameter path and carry their graph-signature kind; value names
//     are FX names; the last output is renamed "output". A Linear on a 3-D
//     input is MatMul + Add, every node of which keeps the FX name of the
//     linear in name_scopes.
//   - TorchScript (torch.onnx.export without dynamo, torch 1.13, opset 14):
//     node names are scoped paths (/model/norm/ReduceMean), no metadata; a
//     3-D Linear is MatMul on a pre-transposed initializer renamed
//     onnx::MatMul_N followed by Add(bias, ·); LayerNorm and GELU are
//     decomposed (opset 14 has neither op).
//
// What the notes do not fix is chosen plausibly and said so where it is
// written: the names of the intermediate nodes of a decomposed op
// (node_<OpType>_<index>), folded constants (val_<index>), and
// MultiheadAttention lowered as one head without the exporter's reshapes.
package torchexport

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// GuideNet is the exported model, in torch:
//
//	class TwoAddModule(nn.Module):              # the guide's eager-name example
//	    def forward(self, x):
//	        a = x + x
//	        return a + a
//	class mymodelSelfAttention(nn.Module):
//	    def __init__(self):
//	        self.mha = nn.MultiheadAttention(16, 1, batch_first=True)
//	    def forward(self, h):
//	        return self.mha(h, h, h)[0]
//	class SelfAttention(nn.Module):
//	    def __init__(self):
//	        self.layer = nn.ModuleList([mymodelSelfAttention()])
//	    def forward(self, h):
//	        for l in self.layer:
//	            h = l(h)
//	        return h
//	class Decoder(nn.Module):
//	    def __init__(self):
//	        self.deconv1 = nn.ConvTranspose2d(8, 4, 2, stride=2)
//	class Inner(nn.Module):
//	    def __init__(self):
//	        self.selfattention = SelfAttention()
//	        self.norm, self.act, self.lm_head = nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 8)
//	    def forward(self, h):
//	        h = self.norm(self.selfattention(h) + h)
//	        return self.lm_head(self.act(h))
//	class GuideNet(nn.Module):
//	    def __init__(self):
//	        self.conv1, self.relu = nn.Conv2d(4, 8, 3, padding=1), nn.ReLU()
//	        self.decoder, self.fc, self.embed = Decoder(), nn.Linear(4, 16), nn.Embedding(10, 16)
//	        self.submodule_a, self.submodule_b = TwoAddModule(), TwoAddModule()
//	        self.model = Inner()
//	    def forward(self, x, ids):               # x: [1, 4, 4, 4], ids: [1, 6]
//	        d = self.decoder(self.relu(self.conv1(x)))
//	        t = d.flatten(2).transpose(1, 2)     # [1, 64, 4]
//	        h = torch.cat([self.fc(t), self.embed(ids)], dim=1)
//	        return self.model(self.submodule_b(self.submodule_a(h)))
func GuideNet(dynamo bool) []byte {
	e := newExporter(dynamo)
	root := mod{class: "__main__.GuideNet"}
	conv1 := root.child("conv1", "torch.nn.modules.conv.Conv2d")
	relu := root.child("relu", "torch.nn.modules.activation.ReLU")
	decoder := root.child("decoder", "__main__.Decoder")
	deconv1 := decoder.child("deconv1", "torch.nn.modules.conv.ConvTranspose2d")
	fc := root.child("fc", "torch.nn.modules.linear.Linear")
	embed := root.child("embed", "torch.nn.modules.sparse.Embedding")
	subA := root.child("submodule_a", "__main__.TwoAddModule")
	subB := root.child("submodule_b", "__main__.TwoAddModule")
	model := root.child("model", "__main__.Inner")
	sa := model.child("selfattention", "__main__.SelfAttention")
	layer0 := sa.item("layer", 0, "__main__.mymodelSelfAttention")
	mha := layer0.child("mha", "torch.nn.modules.activation.MultiheadAttention")
	norm := model.child("norm", "torch.nn.modules.normalization.LayerNorm")
	act := model.child("act", "torch.nn.modules.activation.GELU")
	lmHead := model.child("lm_head", "torch.nn.modules.linear.Linear")

	e.b.Input("x", tensor.Float, 1, 4, 4, 4).Input("ids", tensor.Int64, 1, 6)
	e.param("conv1.weight", 8, 4, 3, 3).param("conv1.bias", 8)
	e.param("decoder.deconv1.weight", 8, 4, 2, 2).param("decoder.deconv1.bias", 4)
	e.param("fc.weight", 16, 4).param("fc.bias", 16)
	e.param("embed.weight", 10, 16)
	e.param("model.selfattention.layer.0.mha.in_proj_weight", 48, 16).param("model.selfattention.layer.0.mha.in_proj_bias", 48)
	e.param("model.selfattention.layer.0.mha.out_proj.weight", 16, 16).param("model.selfattention.layer.0.mha.out_proj.bias", 16)
	e.param("model.norm.weight", 16).param("model.norm.bias", 16)
	e.param("model.lm_head.weight", 8, 16).param("model.lm_head.bias", 8)

	c := e.op(conv1, "aten.conv2d.default", []string{"x", "p_conv1_weight", "p_conv1_bias"},
		step{op: "Conv", in: []string{"x", "conv1.weight", "conv1.bias"},
			attrs: []*onnxpb.AttributeProto{testmodels.AttrInts("kernel_shape", 3, 3), testmodels.AttrInts("pads", 1, 1, 1, 1)}})
	c = e.op(relu, "aten.relu.default", []string{c}, step{op: "Relu", in: []string{c}})
	d := e.op(deconv1, "aten.conv_transpose2d.input", []string{c, "p_decoder_deconv1_weight", "p_decoder_deconv1_bias"},
		step{op: "ConvTranspose", in: []string{c, "decoder.deconv1.weight", "decoder.deconv1.bias"},
			attrs: []*onnxpb.AttributeProto{testmodels.AttrInts("kernel_shape", 2, 2), testmodels.AttrInts("strides", 2, 2)}})
	shape := e.constInt64([]int64{1, 4, 64})
	t := e.op(root, "aten.view.default", []string{d}, step{op: "Reshape", in: []string{d, shape}})
	t = e.op(root, "aten.transpose.int", []string{t}, step{op: "Transpose", in: []string{t},
		attrs: []*onnxpb.AttributeProto{testmodels.AttrInts("perm", 0, 2, 1)}})
	h := e.linear(fc, fc, t, "fc.weight", "fc.bias", 16, 4)
	emb := e.op(embed, "aten.embedding.default", []string{"p_embed_weight", "ids"}, step{op: "Gather", in: []string{"embed.weight", "ids"}})
	h = e.op(root, "aten.cat.default", []string{h, emb}, step{op: "Concat", in: []string{h, emb},
		attrs: []*onnxpb.AttributeProto{testmodels.AttrInt("axis", 1)}})
	for _, m := range []mod{subA, subB} {
		a := e.op(m, "aten.add.Tensor", []string{h, h}, step{op: "Add", in: []string{h, h}})
		h = e.op(m, "aten.add.Tensor", []string{a, a}, step{op: "Add", in: []string{a, a}})
	}
	// MultiheadAttention runs F.multi_head_attention_forward, which calls
	// the functional linear on in_proj_weight and out_proj.weight: no
	// Linear module scope. Lowered as one head, without the reshapes.
	qkv := e.linear(mha, mha, h, "model.selfattention.layer.0.mha.in_proj_weight", "model.selfattention.layer.0.mha.in_proj_bias", 48, 16)
	sizes := e.constInt64([]int64{16, 16, 16})
	q, k, v := e.split(mha, qkv, sizes)
	kt := e.op(mha, "aten.transpose.int", []string{k}, step{op: "Transpose", in: []string{k},
		attrs: []*onnxpb.AttributeProto{testmodels.AttrInts("perm", 0, 2, 1)}})
	scale := e.constFloat(0.25)
	qs := e.op(mha, "aten.mul.Tensor", []string{q}, step{op: "Mul", in: []string{q, scale}})
	s := e.op(mha, "aten.bmm.default", []string{qs, kt}, step{op: "MatMul", in: []string{qs, kt}})
	p := e.op(mha, "aten._softmax.default", []string{s}, step{op: "Softmax", in: []string{s},
		attrs: []*onnxpb.AttributeProto{testmodels.AttrInt("axis", -1)}})
	o := e.op(mha, "aten.bmm.default", []string{p, v}, step{op: "MatMul", in: []string{p, v}})
	o = e.linear(mha, mha, o, "model.selfattention.layer.0.mha.out_proj.weight", "model.selfattention.layer.0.mha.out_proj.bias", 16, 16)
	r := e.op(model, "aten.add.Tensor", []string{o, h}, step{op: "Add", in: []string{o, h}})
	n := e.layerNorm(norm, r)
	g := e.gelu(act, n)
	y := e.linear(lmHead, lmHead, g, "model.lm_head.weight", "model.lm_head.bias", 8, 16)
	e.finish(y)
	return e.b.Bytes()
}

// mod is one module: its path, class and TorchScript scope chain.
type mod struct {
	path, class string
	// chain lists the enclosing modules, outermost first, this one last.
	chain []mod
	// scope is the TorchScript scope part: the attribute name, or
	// "parent.index" for a container's item.
	scope string
}

func (m mod) child(attr, class string) mod {
	c := mod{class: class, scope: attr, path: attr}
	if m.path != "" {
		c.path = m.path + "." + attr
	}
	c.chain = append(append([]mod(nil), m.chain...), c)
	return c
}

// item is a ModuleList/Sequential item: the container itself is never
// called, so it is no scope.
func (m mod) item(container string, i int, class string) mod {
	c := m.child(fmt.Sprintf("%s.%d", container, i), class)
	return c
}

type step struct {
	op    string
	in    []string
	attrs []*onnxpb.AttributeProto
	outs  int
}

type exporter struct {
	dynamo bool
	b      *testmodels.Builder
	// fx counts FX names per aten op ("linear", "linear_1", ...).
	fx map[string]int
	// ts counts TorchScript node names per scope and op type.
	ts map[string]int
	// vals numbers intermediate values and folded constants.
	vals      int
	matmulW   int
	lastValue string
}

func newExporter(dynamo bool) *exporter {
	e := &exporter{dynamo: dynamo, fx: map[string]int{}, ts: map[string]int{}}
	if dynamo {
		e.b = testmodels.New("main_graph", 18)
		e.b.Model.ProducerName = proto.String("pytorch")
		e.b.Model.ProducerVersion = proto.String("2.9.0+cpu")
		e.b.Model.IrVersion = proto.Int64(10)
	} else {
		e.b = testmodels.New("torch_jit", 14)
		e.b.Model.ProducerName = proto.String("pytorch")
		e.b.Model.ProducerVersion = proto.String("1.13.1")
		e.b.Model.IrVersion = proto.Int64(7)
	}
	return e
}

// param adds a parameter initializer named by its path; dynamo also records
// its graph-signature kind and FX placeholder name.
func (e *exporter) param(name string, dims ...int64) *exporter {
	e.b.RandomInit(name, 0.3, dims...)
	if e.dynamo {
		init := e.b.Model.Graph.Initializer
		testmodels.TensorMeta(init[len(init)-1],
			"pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER",
			"pkg.torch.onnx.original_node_name", "p_"+strings.ReplaceAll(name, ".", "_"))
	}
	return e
}

func (e *exporter) newVal() string {
	e.vals++
	return fmt.Sprintf("val_%d", e.vals)
}

// constInt64 is a shape constant: a folded initializer (dynamo) or a
// Constant node at the root scope (TorchScript).
func (e *exporter) constInt64(v []int64) string {
	t := testmodels.Int64Tensor("", []int64{int64(len(v))}, v)
	return e.constant(t)
}

func (e *exporter) constFloat(v float32) string {
	t := testmodels.Float32Tensor("", nil, []float32{v})
	return e.constant(t)
}

func (e *exporter) constant(t *onnxpb.TensorProto) string {
	if e.dynamo {
		name := e.newVal()
		t.Name = proto.String(name)
		e.b.Model.Graph.Initializer = append(e.b.Model.Graph.Initializer, t)
		return name
	}
	name := e.tsName(nil, "Constant")
	out := name + "_output_0"
	e.b.Node("Constant", name, nil, []string{out}, testmodels.AttrTensor("value", t))
	return out
}

// tsName is the TorchScript scoped node name: /scope/.../OpType with _N for
// repeats in one scope.
func (e *exporter) tsName(chain []mod, op string) string {
	var b strings.Builder
	for _, m := range chain {
		b.WriteString("/" + m.scope)
	}
	prefix := b.String() + "/" + op
	n := e.ts[prefix]
	e.ts[prefix]++
	if n > 0 {
		return fmt.Sprintf("%s_%d", prefix, n)
	}
	return prefix
}

// fxName is the next FX name for an aten target: "aten.add.Tensor" gives
// add, add_1, ...
func (e *exporter) fxName(target string) string {
	base := strings.Split(target, ".")[1]
	n := e.fx[base]
	e.fx[base]++
	if n > 0 {
		return fmt.Sprintf("%s_%d", base, n)
	}
	return base
}

// op emits one torch op as ONNX nodes: steps run in order, each reading the
// previous step's output where its inputs say "" ; the last step's output
// is the op's. args are the FX arguments recorded in fx_node.
func (e *exporter) op(m mod, target string, args []string, steps ...step) string {
	outs := e.emit(m, target, args, steps)
	return outs[0]
}

func (e *exporter) emit(m mod, target string, args []string, steps []step) []string {
	fx := ""
	if e.dynamo {
		fx = e.fxName(target)
	}
	var prev []string
	for i, s := range steps {
		in := append([]string(nil), s.in...)
		for j := range in {
			if in[j] == "" && len(prev) > 0 {
				in[j] = prev[0]
			}
		}
		nout := max(s.outs, 1)
		last := i == len(steps)-1
		var name string
		outs := make([]string, nout)
		if e.dynamo {
			if last {
				name = "node_" + fx
			} else {
				name = fmt.Sprintf("node_%s_%d", s.op, len(e.b.Model.Graph.Node))
			}
			for k := range outs {
				switch {
				case last && nout == 1:
					outs[k] = fx
				case last:
					outs[k] = "getitem"
					if k > 0 {
						outs[k] = fmt.Sprintf("getitem_%d", k)
					}
				default:
					outs[k] = e.newVal()
				}
			}
		} else {
			name = e.tsName(m.chain, s.op)
			for k := range outs {
				outs[k] = fmt.Sprintf("%s_output_%d", name, k)
			}
		}
		n := e.b.Node(s.op, name, in, outs, s.attrs...)
		if e.dynamo {
			e.meta(n, m, target, fx, args)
		}
		prev = outs
	}
	e.lastValue = prev[0]
	return prev
}

// meta writes dynamo's node metadata.
func (e *exporter) meta(n *onnxpb.NodeProto, m mod, target, fx string, args []string) {
	scopes, classes := []string{""}, []string{"__main__.GuideNet"}
	var ns strings.Builder
	ns.WriteString(": __main__.GuideNet")
	for _, c := range m.chain {
		scopes = append(scopes, c.path)
		classes = append(classes, c.class)
		fmt.Fprintf(&ns, "/%s: %s", c.path, c.class)
	}
	scopes, classes = append(scopes, fx), append(classes, target)
	fmt.Fprintf(&ns, "/%s: %s", fx, target)
	refs := make([]string, len(args))
	for i, a := range args {
		refs[i] = "%" + a
	}
	testmodels.Meta(n,
		"namespace", ns.String(),
		"pkg.torch.onnx.class_hierarchy", pyList(classes),
		"pkg.torch.onnx.fx_node", fmt.Sprintf("%%%s : [num_users=1] = call_function[target=torch.ops.%s](args = (%s), kwargs = {})", fx, target, strings.Join(refs, ", ")),
		"pkg.torch.onnx.name_scopes", pyList(scopes))
}

func pyList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// linear is a Linear on a 3-D input: MatMul on the transposed weight, then
// the bias Add. Dynamo's constant folding leaves the transposed weight as
// an initializer (named val_N here); TorchScript renames it onnx::MatMul_N
// and puts the bias first in the Add. owner is the module whose parameters
// are used (for the placeholder names).
func (e *exporter) linear(m, owner mod, in, weight, bias string, out, inDim int) string {
	wt := e.transposed(weight, out, inDim)
	if e.dynamo {
		args := []string{in, "p_" + strings.ReplaceAll(weight, ".", "_"), "p_" + strings.ReplaceAll(bias, ".", "_")}
		return e.op(m, "aten.linear.default", args, step{op: "MatMul", in: []string{in, wt}}, step{op: "Add", in: []string{"", bias}})
	}
	return e.op(m, "aten.linear.default", nil, step{op: "MatMul", in: []string{in, wt}}, step{op: "Add", in: []string{bias, ""}})
}

// transposed adds the [in, out] copy of a [out, in] weight initializer.
func (e *exporter) transposed(weight string, out, in int) string {
	var src *onnxpb.TensorProto
	for _, t := range e.b.Model.Graph.Initializer {
		if t.GetName() == weight {
			src = t
		}
	}
	data, err := tensor.FromProto(src, nil)
	if err != nil {
		panic(err)
	}
	f, _ := data.AsFloat32()
	tr := make([]float32, len(f))
	for i := 0; i < out; i++ {
		for j := 0; j < in; j++ {
			tr[j*out+i] = f[i*in+j]
		}
	}
	var name string
	if e.dynamo {
		name = e.newVal()
	} else {
		e.matmulW++
		name = fmt.Sprintf("onnx::MatMul_%d", 100+e.matmulW)
	}
	e.b.Init(name, []int64{int64(in), int64(out)}, tr)
	return name
}

// split is torch.split(qkv, 16, dim=-1): one Split with three outputs.
func (e *exporter) split(m mod, in, sizes string) (string, string, string) {
	outs := e.emit(m, "aten.split_with_sizes.default", []string{in}, []step{{op: "Split", in: []string{in, sizes}, outs: 3,
		attrs: []*onnxpb.AttributeProto{testmodels.AttrInt("axis", -1)}}})
	return outs[0], outs[1], outs[2]
}

// layerNorm is one LayerNormalization (opset 18), or TorchScript's opset-14
// decomposition.
func (e *exporter) layerNorm(m mod, in string) string {
	if e.dynamo {
		return e.op(m, "aten.layer_norm.default", []string{in, "p_model_norm_weight", "p_model_norm_bias"},
			step{op: "LayerNormalization", in: []string{in, "model.norm.weight", "model.norm.bias"},
				attrs: []*onnxpb.AttributeProto{testmodels.AttrInt("axis", -1), testmodels.AttrFloat("epsilon", 1e-5)}})
	}
	axes := []*onnxpb.AttributeProto{testmodels.AttrInts("axes", -1)}
	two, eps := e.constFloat(2), e.constFloat(1e-5)
	mean := e.op(m, "", nil, step{op: "ReduceMean", in: []string{in}, attrs: axes})
	sub := e.op(m, "", nil, step{op: "Sub", in: []string{in, mean}})
	sq := e.op(m, "", nil, step{op: "Pow", in: []string{sub, two}})
	v := e.op(m, "", nil, step{op: "ReduceMean", in: []string{sq}, attrs: axes})
	v = e.op(m, "", nil, step{op: "Add", in: []string{v, eps}})
	v = e.op(m, "", nil, step{op: "Sqrt", in: []string{v}})
	v = e.op(m, "", nil, step{op: "Div", in: []string{sub, v}})
	v = e.op(m, "", nil, step{op: "Mul", in: []string{v, "model.norm.weight"}})
	return e.op(m, "", nil, step{op: "Add", in: []string{v, "model.norm.bias"}})
}

// gelu is the exact GELU, 0.5·x·(1 + erf(x/√2)), decomposed by both
// exporters at their opsets (Gelu is opset 20).
func (e *exporter) gelu(m mod, in string) string {
	sqrt2, one, half := e.constFloat(1.4142135), e.constFloat(1), e.constFloat(0.5)
	steps := []step{
		{op: "Div", in: []string{in, sqrt2}},
		{op: "Erf", in: []string{""}},
		{op: "Add", in: []string{"", one}},
		{op: "Mul", in: []string{in, ""}},
		{op: "Mul", in: []string{"", half}},
	}
	if e.dynamo {
		return e.op(m, "aten.gelu.default", []string{in}, steps...)
	}
	var v string
	for _, s := range steps {
		for j := range s.in {
			if s.in[j] == "" {
				s.in[j] = v
			}
		}
		v = e.op(m, "", nil, s)
	}
	return v
}

// finish renames the last value to the graph output and declares it.
func (e *exporter) finish(last string) {
	out := "y"
	if e.dynamo {
		out = "output"
	}
	for _, n := range e.b.Model.Graph.Node {
		for i, o := range n.Output {
			if o == last {
				n.Output[i] = out
			}
		}
	}
	e.b.Output(out, tensor.Float, 1, 70, 8)
	if e.dynamo {
		e.b.Model.MetadataProps = append(e.b.Model.MetadataProps, &onnxpb.StringStringEntryProto{
			Key:   proto.String("pkg.torch.export.ExportedProgram.graph_signature"),
			Value: proto.String("# inputs\np_conv1_weight: PARAMETER target='conv1.weight'\n...\nx: USER_INPUT\nids: USER_INPUT\n\n# outputs\n" + last + ": USER_OUTPUT\n"),
		})
	}
}

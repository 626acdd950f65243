// Package llama generates Llama-shaped decoder language models as ONNX:
// token embedding, per layer RMSNorm, rotary multi-head self-attention and
// a SwiGLU MLP with residuals, a final RMSNorm and the lm_head, laid out as
// a TorchScript export lays them out (scoped node names, MatMul weights
// stored [in, out]). Weights are drawn from a normal distribution with a
// fixed seed, so the same Config always gives the same bytes; the size is
// free, from a few thousand parameters for tests to billions for the
// benchmark, written tensor by tensor to external data so that generating
// does not hold the model in memory.
package llama

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Config is a decoder's shape and encoding.
type Config struct {
	Layers       int
	Hidden       int
	Heads        int
	Intermediate int
	Vocab        int
	// MaxPositions is the length of the rotary tables (positions past it
	// are out of range of the Gather).
	MaxPositions int
	// FP16 stores weights and computes in float16 (inputs stay int64 ids).
	FP16 bool
	// KVCache adds past_key_values.N.key/value inputs and present.N.key/value
	// outputs, [batch, heads, past, head_dim]; an empty past is a 0-length
	// third dimension.
	KVCache bool
	// Tied makes lm_head read the embedding table through a Transpose
	// instead of having its own weight.
	Tied bool
	// Std is the standard deviation of the weights (0.02 when zero).
	Std float32
	// Seed selects the weights.
	Seed uint64
}

// Tiny is a decoder of about 40 k parameters for tests: two layers, four
// heads of 8, a vocabulary of 96.
func Tiny() Config {
	return Config{Layers: 2, Hidden: 32, Heads: 4, Intermediate: 64, Vocab: 96, MaxPositions: 64, Seed: 1}
}

// Sizes are the benchmark's decoders by name: "168m" (12 layers of 768,
// intermediate 3264, 167.8 M parameters) and "1.26b" (TinyLlama's 22
// layers of 2048 and intermediate 5632 with full multi-head attention,
// 1.26 G parameters); both have a vocabulary of 32000.
var Sizes = map[string]Config{
	"tiny":  Tiny(),
	"168m":  {Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3264, Vocab: 32000, MaxPositions: 2048, Seed: 1},
	"1.26b": {Layers: 22, Hidden: 2048, Heads: 32, Intermediate: 5632, Vocab: 32000, MaxPositions: 2048, Seed: 1},
}

// HeadDim is Hidden/Heads.
func (c Config) HeadDim() int { return c.Hidden / c.Heads }

// Params counts the weights.
func (c Config) Params() int64 {
	h, i, v := int64(c.Hidden), int64(c.Intermediate), int64(c.Vocab)
	perLayer := 4*h*h + 3*h*i + 2*h
	n := int64(c.Layers)*perLayer + v*h + h + 2*int64(c.MaxPositions)*int64(c.HeadDim())
	if !c.Tied {
		n += h * v
	}
	return n
}

func (c Config) check() error {
	switch {
	case c.Layers < 1 || c.Hidden < 1 || c.Heads < 1 || c.Intermediate < 1 || c.Vocab < 1 || c.MaxPositions < 1:
		return fmt.Errorf("llama: every size must be positive: %+v", c)
	case c.Hidden%c.Heads != 0 || c.HeadDim()%2 != 0:
		return fmt.Errorf("llama: hidden %d must split into %d heads of an even size", c.Hidden, c.Heads)
	}
	return nil
}

// sink receives the initializers in order; it decides where their bytes go.
type sink interface {
	tensor(name string, dt tensor.DType, dims []int64, raw []byte) (*onnxpb.TensorProto, error)
}

// inline keeps raw data in the TensorProto.
type inline struct{}

func (inline) tensor(name string, dt tensor.DType, dims []int64, raw []byte) (*onnxpb.TensorProto, error) {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(dt)), RawData: raw}, nil
}

// external appends the raw data of tensors of externalMin bytes or more
// to one file, each 64-byte aligned, and keeps only the reference; smaller
// ones stay inline, as ONNX's and torch's writers keep them (ONNX
// Runtime's shape inference cannot read a Reshape's shape from external
// data).
type external struct {
	w        *bufio.Writer
	location string
	offset   int64
}

// externalMin is the size from which a tensor goes to external data.
const externalMin = 1024

func (e *external) tensor(name string, dt tensor.DType, dims []int64, raw []byte) (*onnxpb.TensorProto, error) {
	if len(raw) < externalMin {
		return inline{}.tensor(name, dt, dims, raw)
	}
	if pad := (64 - e.offset%64) % 64; pad > 0 {
		if _, err := e.w.Write(make([]byte, pad)); err != nil {
			return nil, err
		}
		e.offset += pad
	}
	if _, err := e.w.Write(raw); err != nil {
		return nil, err
	}
	t := &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(dt)),
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{
			{Key: proto.String("location"), Value: proto.String(e.location)},
			{Key: proto.String("offset"), Value: proto.String(strconv.FormatInt(e.offset, 10))},
			{Key: proto.String("length"), Value: proto.String(strconv.Itoa(len(raw)))},
		}}
	e.offset += int64(len(raw))
	return t, nil
}

// Build returns the model with every weight inline.
func Build(c Config) (*onnxpb.ModelProto, error) {
	return build(c, inline{})
}

// Bytes is Build serialized deterministically.
func Bytes(c Config) ([]byte, error) {
	m, err := Build(c)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Write writes the model to path. With externalData the weights go to
// path+".data" beside it, one tensor at a time, and memory holds one
// tensor; otherwise the model is one file (protobuf caps it at 2 GB).
func Write(c Config, path string, externalData bool) error {
	if !externalData {
		b, err := Bytes(c)
		if err != nil {
			return err
		}
		return os.WriteFile(path, b, 0o644)
	}
	f, err := os.Create(path + ".data")
	if err != nil {
		return err
	}
	e := &external{w: bufio.NewWriterSize(f, 1<<20), location: filepath.Base(path) + ".data"}
	m, err := build(c, e)
	if err == nil {
		err = e.w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// builder assembles the graph; weights are drawn in the order they are
// declared, each from its own stream, so a tensor's values do not depend
// on the sizes of the tensors before it.
type builder struct {
	c     Config
	g     *onnxpb.GraphProto
	sink  sink
	ft    tensor.DType
	next  uint64
	err   error
	names map[string]bool
}

func build(c Config, s sink) (*onnxpb.ModelProto, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Std == 0 {
		c.Std = 0.02
	}
	b := &builder{c: c, g: &onnxpb.GraphProto{Name: proto.String("llama")}, sink: s, ft: tensor.Float, names: map[string]bool{}}
	if c.FP16 {
		b.ft = tensor.Float16
	}
	b.graph()
	if b.err != nil {
		return nil, b.err
	}
	return &onnxpb.ModelProto{
		IrVersion:       proto.Int64(8),
		ProducerName:    proto.String("coreaiq-testmodels-llama"),
		ProducerVersion: proto.String("1"),
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:           b.g,
	}, nil
}

// encode turns float32 values into raw data of the model's float type.
func (b *builder) encode(data []float32) []byte {
	if b.ft == tensor.Float16 {
		raw := make([]byte, 2*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint16(raw[2*i:], tensor.Float32ToFloat16(v))
		}
		return raw
	}
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return raw
}

func (b *builder) init(name string, dt tensor.DType, dims []int64, raw []byte) string {
	if b.err != nil {
		return name
	}
	t, err := b.sink.tensor(name, dt, dims, raw)
	if err != nil {
		b.err = err
		return name
	}
	b.g.Initializer = append(b.g.Initializer, t)
	return name
}

// weight adds a normal(0, Std) initializer.
func (b *builder) weight(name string, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	b.next++
	rng := rand.New(rand.NewPCG(b.c.Seed, b.next))
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(rng.NormFloat64()) * b.c.Std
	}
	return b.init(name, b.ft, dims, b.encode(data))
}

// ones adds a norm weight: 1 plus a little noise, as a trained one.
func (b *builder) norm(name string) string {
	b.next++
	rng := rand.New(rand.NewPCG(b.c.Seed, b.next))
	data := make([]float32, b.c.Hidden)
	for i := range data {
		data[i] = 1 + float32(rng.NormFloat64())*0.1
	}
	return b.init(name, b.ft, []int64{int64(b.c.Hidden)}, b.encode(data))
}

func (b *builder) scalar(name string, v float32) string {
	return b.init(name, b.ft, nil, b.encode([]float32{v}))
}

func (b *builder) ints(name string, v ...int64) string {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return b.init(name, tensor.Int64, []int64{int64(len(v))}, raw)
}

func (b *builder) scalarInt(name string, v int64) string {
	raw := make([]byte, 8)
	binary.LittleEndian.PutUint64(raw, uint64(v))
	return b.init(name, tensor.Int64, nil, raw)
}

// node adds a node named scope/op and returns its output names, scope/op_output_i.
func (b *builder) node(op, scope string, inputs []string, nout int, attrs ...*onnxpb.AttributeProto) []string {
	name := scope + "/" + op
	for i := 1; b.names[name]; i++ {
		name = scope + "/" + op + "_" + strconv.Itoa(i)
	}
	b.names[name] = true
	outs := make([]string, nout)
	for i := range outs {
		outs[i] = name + "_output_" + strconv.Itoa(i)
	}
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(op), Input: inputs, Output: outs, Attribute: attrs})
	return outs
}

func (b *builder) op(op, scope string, inputs ...string) string {
	return b.node(op, scope, inputs, 1)[0]
}

func (b *builder) opA(op, scope string, attrs []*onnxpb.AttributeProto, inputs ...string) string {
	return b.node(op, scope, inputs, 1, attrs...)[0]
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// rmsNorm is x / sqrt(mean(x²) + eps) · w, decomposed as torch exports it.
func (b *builder) rmsNorm(scope, x, w, eps string) string {
	two := b.scalar(scope+".pow_exponent", 2)
	sq := b.op("Pow", scope, x, two)
	ms := b.opA("ReduceMean", scope, []*onnxpb.AttributeProto{attrInts("axes", -1), attrInt("keepdims", 1)}, sq)
	rs := b.op("Sqrt", scope, b.op("Add", scope, ms, eps))
	inv := b.op("Reciprocal", scope, rs)
	return b.op("Mul", scope, b.op("Mul", scope, x, inv), w)
}

// linear is x·W with W stored [in, out].
func (b *builder) linear(scope string, x string, in, out int) string {
	w := b.weight(scope+".weight", int64(in), int64(out))
	return b.op("MatMul", "/"+dots(scope), x, w)
}

// dots turns "model.layers.0.mlp" into the TorchScript scope "model/layers.0/mlp".
func dots(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && (i+1 >= len(s) || s[i+1] < '0' || s[i+1] > '9') {
			out = append(out, '/')
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

func (b *builder) graph() {
	c := b.c
	h, nh, hd := int64(c.Hidden), int64(c.Heads), int64(c.HeadDim())
	b.g.Input = append(b.g.Input, testmodels.ValueInfo("input_ids", tensor.Int64, "batch", "sequence"))

	// Shapes and positions: past length P, sequence S, total T = P + S.
	ids := "input_ids"
	embed := b.weight("model.embed_tokens.weight", int64(c.Vocab), h)
	x := b.op("Gather", "/model/embed_tokens", embed, ids)
	idShape := b.op("Shape", "/model", ids)
	seq := b.opA("Gather", "/model", []*onnxpb.AttributeProto{attrInt("axis", 0)}, idShape, b.scalarInt("const.one", 1))
	zero := b.scalarInt("const.zero", 0)
	past := zero
	if c.KVCache {
		for i := range c.Layers {
			for _, kv := range []string{"key", "value"} {
				b.g.Input = append(b.g.Input, testmodels.ValueInfo(fmt.Sprintf("past_key_values.%d.%s", i, kv), b.ft, "batch", c.Heads, "past_sequence", c.HeadDim()))
			}
		}
		pastShape := b.op("Shape", "/model", "past_key_values.0.key")
		past = b.opA("Gather", "/model", []*onnxpb.AttributeProto{attrInt("axis", 0)}, pastShape, b.scalarInt("const.two", 2))
	}
	total := b.op("Add", "/model", past, seq)
	one := "const.one"
	positions := b.op("Range", "/model", past, total, one)

	// Rotary tables [MaxPositions, head_dim], halves repeated as Llama's.
	half := c.HeadDim() / 2
	cos := make([]float32, c.MaxPositions*c.HeadDim())
	sin := make([]float32, len(cos))
	for p := range c.MaxPositions {
		for i := range half {
			theta := float64(p) / math.Pow(10000, float64(2*i)/float64(c.HeadDim()))
			for _, j := range []int{i, i + half} {
				cos[p*c.HeadDim()+j] = float32(math.Cos(theta))
				sin[p*c.HeadDim()+j] = float32(math.Sin(theta))
			}
		}
	}
	cosT := b.init("model.rotary_emb.cos_cached", b.ft, []int64{int64(c.MaxPositions), hd}, b.encode(cos))
	sinT := b.init("model.rotary_emb.sin_cached", b.ft, []int64{int64(c.MaxPositions), hd}, b.encode(sin))
	cosP := b.op("Gather", "/model/rotary_emb", cosT, positions) // [S, hd]
	sinP := b.op("Gather", "/model/rotary_emb", sinT, positions)

	// Causal mask [S, T]: key j is hidden from query i when j > P + i.
	rows := b.opA("Unsqueeze", "/model", nil, positions, b.ints("const.axes_1", 1))
	cols := b.op("Range", "/model", zero, total, one)
	future := b.op("Greater", "/model", cols, rows)
	mask := b.op("Where", "/model", future, b.scalar("const.neg_inf", float32(math.Inf(-1))), b.scalar("const.zero_f", 0))

	eps := b.scalar("const.rms_eps", 1e-5)
	scale := b.scalar("const.attn_scale", float32(1/math.Sqrt(float64(hd))))
	split := b.ints("const.heads_shape", 0, 0, nh, hd)
	merge := b.ints("const.hidden_shape", 0, 0, h)
	halfStart, halfMid, halfEnd, lastAxis := b.ints("const.zero_1", 0), b.ints("const.half", int64(half)), b.ints("const.head_dim", hd), b.ints("const.axis_-1", -1)
	rotate := func(scope, t string) string { // t·cos + rotate_half(t)·sin
		x1 := b.op("Slice", scope, t, halfStart, halfMid, lastAxis)
		x2 := b.op("Slice", scope, t, halfMid, halfEnd, lastAxis)
		rot := b.opA("Concat", scope, []*onnxpb.AttributeProto{attrInt("axis", -1)}, b.op("Neg", scope, x2), x1)
		return b.op("Add", scope, b.op("Mul", scope, t, cosP), b.op("Mul", scope, rot, sinP))
	}
	heads := func(scope, t string) string { // [B, S, H] → [B, nh, S, hd]
		return b.opA("Transpose", scope, []*onnxpb.AttributeProto{attrInts("perm", 0, 2, 1, 3)}, b.op("Reshape", scope, t, split))
	}

	for i := range c.Layers {
		pre := fmt.Sprintf("model.layers.%d", i)
		scope := "/" + dots(pre)
		y := b.rmsNorm(scope+"/input_layernorm", x, b.norm(pre+".input_layernorm.weight"), eps)
		att := scope + "/self_attn"
		q := rotate(att, heads(att, b.linear(pre+".self_attn.q_proj", y, c.Hidden, c.Hidden)))
		k := rotate(att, heads(att, b.linear(pre+".self_attn.k_proj", y, c.Hidden, c.Hidden)))
		v := heads(att, b.linear(pre+".self_attn.v_proj", y, c.Hidden, c.Hidden))
		if c.KVCache {
			k = b.opA("Concat", att, []*onnxpb.AttributeProto{attrInt("axis", 2)}, fmt.Sprintf("past_key_values.%d.key", i), k)
			v = b.opA("Concat", att, []*onnxpb.AttributeProto{attrInt("axis", 2)}, fmt.Sprintf("past_key_values.%d.value", i), v)
			for _, kv := range [][2]string{{"key", k}, {"value", v}} {
				name := fmt.Sprintf("present.%d.%s", i, kv[0])
				b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String(att + "/present_" + kv[0]), OpType: proto.String("Identity"), Input: []string{kv[1]}, Output: []string{name}})
				b.g.Output = append(b.g.Output, testmodels.ValueInfo(name, b.ft, "batch", c.Heads, "total_sequence", c.HeadDim()))
			}
		}
		kt := b.opA("Transpose", att, []*onnxpb.AttributeProto{attrInts("perm", 0, 1, 3, 2)}, k)
		scores := b.op("Add", att, b.op("Mul", att, b.op("MatMul", att, q, kt), scale), mask)
		probs := b.opA("Softmax", att, []*onnxpb.AttributeProto{attrInt("axis", -1)}, scores)
		ctx := b.op("MatMul", att, probs, v)
		ctx = b.op("Reshape", att, b.opA("Transpose", att, []*onnxpb.AttributeProto{attrInts("perm", 0, 2, 1, 3)}, ctx), merge)
		x = b.op("Add", scope, x, b.linear(pre+".self_attn.o_proj", ctx, c.Hidden, c.Hidden))

		y = b.rmsNorm(scope+"/post_attention_layernorm", x, b.norm(pre+".post_attention_layernorm.weight"), eps)
		mlp := scope + "/mlp"
		gate := b.linear(pre+".mlp.gate_proj", y, c.Hidden, c.Intermediate)
		up := b.linear(pre+".mlp.up_proj", y, c.Hidden, c.Intermediate)
		act := b.op("Mul", mlp+"/act_fn", gate, b.op("Sigmoid", mlp+"/act_fn", gate))
		x = b.op("Add", scope, x, b.linear(pre+".mlp.down_proj", b.op("Mul", mlp, act, up), c.Intermediate, c.Hidden))
	}
	y := b.rmsNorm("/model/norm", x, b.norm("model.norm.weight"), eps)
	var logits string
	if c.Tied {
		wt := b.opA("Transpose", "/lm_head", []*onnxpb.AttributeProto{attrInts("perm", 1, 0)}, embed)
		logits = b.op("MatMul", "/lm_head", y, wt)
	} else {
		logits = b.linear("lm_head", y, c.Hidden, c.Vocab)
	}
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String("/lm_head/output"), OpType: proto.String("Identity"), Input: []string{logits}, Output: []string{"logits"}})
	b.g.Output = append([]*onnxpb.ValueInfoProto{testmodels.ValueInfo("logits", b.ft, "batch", "sequence", c.Vocab)}, b.g.Output...)
}

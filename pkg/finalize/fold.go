package finalize

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// FoldBatchNorm returns a copy of m in which every inference-mode
// BatchNormalization that alone consumes a Conv's output is folded into
// that Conv: W'[c] = W[c]·s[c], b'[c] = (b[c] − mean[c])·s[c] + B[c] with
// s = scale/√(var + ε), the factors of kernels.BatchNormFold, which the
// engine applies to a BatchNormalization it runs. The Conv keeps its name and metadata_props and
// takes over the BatchNormalization's output name. Quantizing the folded
// weight, rather than the conv weight and the normalisation separately,
// is what every production quantizer does: the per-channel weight scales
// then absorb the normalisation, and no activation is quantized between
// the two. It returns m itself and no notes when nothing folds.
func FoldBatchNorm(m *onnxgraph.Model) (*onnxgraph.Model, []string, error) {
	return foldBatchNorm(m, false, nil)
}

// FoldIntoLayers folds more than FoldBatchNorm, for a deployment target
// whose kernels decide the placement: every Add of a per-channel constant
// that alone consumes a Conv's or ConvTranspose's output into its bias
// (exporters that write the bias as an Add: PaddlePaddle's
// ConvTranspose), then BatchNormalization into a Conv or ConvTranspose
// (per group). Where ConvTranspose has no integer kernel, the head of
// ppocrv3-det then keeps no float Add or BatchNormalization beside it.
// The generic target keeps coreai-opt's folding (FoldBatchNorm).
func FoldIntoLayers(m *onnxgraph.Model) (*onnxgraph.Model, []string, error) {
	m, notes, err := foldBiasAdds(m)
	if err != nil {
		return nil, nil, err
	}
	return foldBatchNorm(m, true, notes)
}

// foldBatchNorm folds BatchNormalization into the Conv before it, and into
// a ConvTranspose when convTranspose; the returned notes follow addNotes.
func foldBatchNorm(m *onnxgraph.Model, convTranspose bool, addNotes []string) (*onnxgraph.Model, []string, error) {
	type pair struct{ conv, bn *onnxgraph.Node }
	var pairs []pair
	for _, n := range m.Graph.Nodes {
		if p, ok := foldable(n, convTranspose); ok {
			pairs = append(pairs, pair{p, n})
		}
	}
	if len(pairs) == 0 {
		return m, addNotes, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	inits := map[string]int{}
	for i, t := range g.GetInitializer() {
		inits[t.GetName()] = i
	}
	drop := map[int]bool{}
	removedValues := map[string]bool{}
	notes := addNotes
	for _, p := range pairs {
		conv, bn := g.Node[p.conv.Index], g.Node[p.bn.Index]
		read := func(v *onnxgraph.Value) ([]float32, error) {
			if c := initializerOf(v); c != nil {
				v = c
			}
			t, err := tensor.FromProto(v.Const, m)
			if err != nil {
				return nil, err
			}
			return t.AsFloat32()
		}
		wv := p.conv.Inputs[1]
		w, err := read(wv)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: weight %q: %w", p.conv, wv.Name, err)
		}
		var params [4][]float32
		for i := range params {
			if params[i], err = read(p.bn.Inputs[i+1]); err != nil {
				return nil, nil, fmt.Errorf("%s: %q: %w", p.bn, p.bn.Inputs[i+1].Name, err)
			}
		}
		scale, beta, mean, variance := params[0], params[1], params[2], params[3]
		oc := len(scale)
		if oc == 0 || len(w)%oc != 0 || len(beta) != oc || len(mean) != oc || len(variance) != oc || outChannels(p.conv) != oc {
			continue
		}
		eps := float32(1e-5)
		if a := p.bn.Attr("epsilon"); a != nil {
			eps = a.GetF()
		}
		var bias []float32
		if len(p.conv.Inputs) > 2 && p.conv.Inputs[2] != nil {
			if bias, err = read(p.conv.Inputs[2]); err != nil || len(bias) != oc {
				continue
			}
		}
		scaleBy, nb := kernels.BatchNormFold(scale, beta, mean, variance, bias, eps)
		nw := make([]float32, len(w))
		channelOf := weightChannels(p.conv)
		for i, v := range w {
			nw[i] = v * scaleBy[channelOf(i)]
		}
		wp, err := tensor.ToProto(tensor.FromFloat32(nw, intDims(wv.Const.GetDims())...), wv.Name)
		if err != nil {
			return nil, nil, err
		}
		bp, err := tensor.ToProto(tensor.FromFloat32(nb, oc), "")
		if err != nil {
			return nil, nil, err
		}
		// A new initializer when the layer has no bias: the BN's B may be
		// shared or an Identity copy.
		bname := setBias(m, g, inits, p.conv, bp)
		g.Initializer[inits[wv.Name]] = wp
		removedValues[conv.Output[0]] = true
		conv.Input = append(conv.Input[:2:2], bname)
		conv.Output[0] = bn.Output[0]
		drop[p.bn.Index] = true
		notes = append(notes, fmt.Sprintf("%s folded into %s", p.bn, p.conv))
	}
	dropNodes(g, drop)
	// Identity copies of folded parameters now feed nothing: drop them
	// (in reverse order, so chains go at once).
	outputs := map[string]bool{}
	for _, o := range g.Output {
		outputs[o.GetName()] = true
	}
	used := map[string]bool{}
	for _, n := range g.Node {
		for _, in := range n.Input {
			used[in] = true
		}
	}
	for i := len(g.Node) - 1; i >= 0; i-- {
		n := g.Node[i]
		if n.GetOpType() == "Identity" && n.GetDomain() == "" && len(n.Output) == 1 && !used[n.Output[0]] && !outputs[n.Output[0]] {
			g.Node = append(g.Node[:i], g.Node[i+1:]...)
			used = map[string]bool{}
			for _, n := range g.Node {
				for _, in := range n.Input {
					used[in] = true
				}
			}
		}
	}
	var keep []*onnxpb.TensorProto
	for _, t := range g.Initializer {
		if used[t.GetName()] {
			keep = append(keep, t)
		}
	}
	g.Initializer = keep
	dropValueInfo(g, removedValues)
	var inputs []*onnxpb.ValueInfoProto
	for _, v := range g.Input {
		if _, isInit := inits[v.GetName()]; !isInit || used[v.GetName()] {
			inputs = append(inputs, v)
		}
	}
	g.Input = inputs
	fm, err := rewritten(m, out, "folding BatchNormalization")
	if err != nil {
		return nil, nil, err
	}
	return fm, notes, nil
}

// initializerOf returns the initializer v holds: v itself, or the
// initializer an Identity chain copies (torch exports shared parameters
// that way), nil when v is not one.
func initializerOf(v *onnxgraph.Value) *onnxgraph.Value {
	for i := 0; v != nil && i < 8; i++ {
		if v.IsInitializer && v.Const != nil {
			return v
		}
		p := v.Producer
		if p == nil || p.OpType != "Identity" || p.Domain != "" || len(p.Inputs) != 1 {
			return nil
		}
		v = p.Inputs[0]
	}
	return nil
}

// foldable returns the Conv (or, when convTranspose, ConvTranspose) a
// BatchNormalization node can be folded into.
func foldable(bn *onnxgraph.Node, convTranspose bool) (*onnxgraph.Node, bool) {
	if bn.OpType != "BatchNormalization" || bn.Domain != "" || len(bn.Inputs) != 5 || len(bn.Outputs) == 0 {
		return nil, false
	}
	if a := bn.Attr("training_mode"); a != nil && a.GetI() != 0 {
		return nil, false
	}
	for _, o := range bn.Outputs[1:] {
		if o != nil && (len(o.Consumers) > 0 || o.IsGraphOutput) {
			return nil, false
		}
	}
	for _, v := range bn.Inputs[1:] {
		c := initializerOf(v)
		// Only read: the parameters may be shared (the folded bias is a
		// new initializer).
		if c == nil || c.DType() != tensor.Float {
			return nil, false
		}
	}
	x := bn.Inputs[0]
	if x == nil || x.Producer == nil || len(x.Consumers) != 1 || x.IsGraphOutput {
		return nil, false
	}
	conv := x.Producer
	return conv, foldsInto(conv) && (convTranspose || conv.OpType == "Conv")
}

// foldsInto reports a Conv or ConvTranspose whose weight and bias a fold
// may rewrite: float initializers it alone reads.
func foldsInto(conv *onnxgraph.Node) bool {
	if conv.OpType != "Conv" && conv.OpType != "ConvTranspose" || conv.Domain != "" || len(conv.Inputs) < 2 || len(conv.Outputs) != 1 {
		return false
	}
	w := conv.Inputs[1]
	if w == nil || w.Const == nil || !w.IsInitializer || len(w.Consumers) != 1 || w.DType() != tensor.Float || len(w.Const.GetDims()) < 2 {
		return false
	}
	if len(conv.Inputs) > 2 && conv.Inputs[2] != nil {
		b := conv.Inputs[2]
		if b.Const == nil || !b.IsInitializer || len(b.Consumers) != 1 || b.DType() != tensor.Float {
			return false
		}
	}
	return outChannels(conv) > 0
}

// outChannels is the number of output channels of a Conv or
// ConvTranspose (0 when the weight does not say): a Conv's weight is
// [M, C/group, k...], a ConvTranspose's [C, M/group, k...].
func outChannels(conv *onnxgraph.Node) int {
	d := conv.Inputs[1].Const.GetDims()
	if conv.OpType == "Conv" {
		return int(d[0])
	}
	g := int64(1)
	if a := conv.Attr("group"); a != nil {
		g = a.GetI()
	}
	if g < 1 || d[0]%g != 0 {
		return 0
	}
	return int(d[1] * g)
}

// weightChannels returns, for a Conv or ConvTranspose, the output channel
// of each element of its weight (by flat index).
func weightChannels(conv *onnxgraph.Node) func(i int) int {
	d := intDims(conv.Inputs[1].Const.GetDims())
	per := 1
	for _, v := range d[2:] {
		per *= v
	}
	if conv.OpType == "Conv" {
		return func(i int) int { return i / (per * d[1]) }
	}
	// ConvTranspose: input channel ci of group ci/(C/group) feeds output
	// channels group·(M/group) + j.
	inPerGroup := d[0] * d[1] / outChannels(conv)
	return func(i int) int {
		ci, j := i/(per*d[1]), i/per%d[1]
		return ci/inPerGroup*d[1] + j
	}
}

// foldBiasAdds returns a copy of m in which every Add of a constant per
// channel (or scalar) that alone consumes a Conv's or ConvTranspose's
// output is folded into its bias (exporters that write the bias as an
// Add: PaddlePaddle's ConvTranspose), with a note per fold; m itself when
// nothing folds. The Conv takes over the Add's output name.
func foldBiasAdds(m *onnxgraph.Model) (*onnxgraph.Model, []string, error) {
	type pair struct {
		conv, add *onnxgraph.Node
		c         *onnxgraph.Value
	}
	var pairs []pair
	for _, n := range m.Graph.Nodes {
		if conv, c := foldableBiasAdd(n); conv != nil {
			pairs = append(pairs, pair{conv, n, c})
		}
	}
	if len(pairs) == 0 {
		return m, nil, nil
	}
	out := onnxgraph.CloneSharingData(m.Proto)
	g := out.Graph
	inits := map[string]int{}
	for i, t := range g.GetInitializer() {
		inits[t.GetName()] = i
	}
	drop := map[int]bool{}
	removed := map[string]bool{}
	addend := map[string]bool{} // the added constants, dropped when nothing else reads them
	var notes []string
	for _, p := range pairs {
		read := func(v *onnxgraph.Value) ([]float32, error) {
			t, err := tensor.FromProto(initializerOf(v).Const, m)
			if err != nil {
				return nil, err
			}
			return t.AsFloat32()
		}
		c, err := read(p.c)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %q: %w", p.add, p.c.Name, err)
		}
		oc := outChannels(p.conv)
		bias := make([]float32, oc)
		if len(p.conv.Inputs) > 2 && p.conv.Inputs[2] != nil {
			b, err := read(p.conv.Inputs[2])
			if err != nil || len(b) != oc {
				continue
			}
			copy(bias, b)
		}
		for i := range bias {
			bias[i] += c[i%len(c)]
		}
		bp, err := tensor.ToProto(tensor.FromFloat32(bias, oc), "")
		if err != nil {
			return nil, nil, err
		}
		conv, add := g.Node[p.conv.Index], g.Node[p.add.Index]
		bname := setBias(m, g, inits, p.conv, bp)
		removed[conv.Output[0]] = true
		addend[p.c.Name] = p.c.IsInitializer
		conv.Input = append(conv.Input[:2:2], bname)
		conv.Output[0] = add.Output[0]
		drop[p.add.Index] = true
		notes = append(notes, fmt.Sprintf("%s folded into the bias of %s", p.add, p.conv))
	}
	dropNodes(g, drop)
	used := map[string]bool{}
	for _, n := range g.Node {
		for _, in := range n.Input {
			used[in] = true
		}
	}
	for _, o := range g.Output {
		used[o.GetName()] = true
	}
	var keep []*onnxpb.TensorProto
	for _, t := range g.Initializer {
		if used[t.GetName()] || !addend[t.GetName()] {
			keep = append(keep, t)
		}
	}
	g.Initializer = keep
	dropValueInfo(g, removed)
	fm, err := rewritten(m, out, "folding bias Add")
	if err != nil {
		return nil, nil, err
	}
	return fm, notes, nil
}

// setBias makes bp the bias of conv: in place of its bias initializer
// when it has one, else as a new initializer named after its weight. It
// returns the bias's name.
func setBias(m *onnxgraph.Model, g *onnxpb.GraphProto, inits map[string]int, conv *onnxgraph.Node, bp *onnxpb.TensorProto) string {
	if len(conv.Inputs) > 2 && conv.Inputs[2] != nil {
		name := conv.Inputs[2].Name
		bp.Name = proto.String(name)
		g.Initializer[inits[name]] = bp
		return name
	}
	name := uniqueName(m, conv.Inputs[1].Name+"_bias")
	bp.Name = proto.String(name)
	g.Initializer = append(g.Initializer, bp)
	return name
}

// dropNodes removes the nodes whose index drop marks, keeping the order.
func dropNodes(g *onnxpb.GraphProto, drop map[int]bool) { spliceNodes(g, nil, drop, nil) }

// spliceNodes rewrites g's node list in order: by node index, the nodes
// of before, the node itself unless drop marks it, the nodes of after.
func spliceNodes(g *onnxpb.GraphProto, before map[int][]*onnxpb.NodeProto, drop map[int]bool, after map[int][]*onnxpb.NodeProto) {
	var nodes []*onnxpb.NodeProto
	for i, n := range g.Node {
		nodes = append(nodes, before[i]...)
		if !drop[i] {
			nodes = append(nodes, n)
		}
		nodes = append(nodes, after[i]...)
	}
	g.Node = nodes
}

// foldableBiasAdd returns the Conv or ConvTranspose an Add folds into as
// its bias and the constant it adds; nil when it does not fold: the
// constant must be a float initializer of one value per output channel
// (shape [M, 1, ...] or [1, M, 1, ...] against the output's rank) or a
// scalar.
func foldableBiasAdd(add *onnxgraph.Node) (*onnxgraph.Node, *onnxgraph.Value) {
	if add.OpType != "Add" || add.Domain != "" || len(add.Inputs) != 2 || len(add.Outputs) != 1 {
		return nil, nil
	}
	for i, x := range add.Inputs {
		c := add.Inputs[1-i]
		if x == nil || c == nil || x.Producer == nil || len(x.Consumers) != 1 || x.IsGraphOutput || initializerOf(c) == nil || initializerOf(c).DType() != tensor.Float {
			continue
		}
		conv := x.Producer
		if !foldsInto(conv) {
			continue
		}
		rank := len(conv.Inputs[1].Const.GetDims())
		cd := initializerOf(c).Const.GetDims()
		if len(cd) > rank {
			continue
		}
		dims := append(make([]int64, rank-len(cd)), cd...)
		if len(cd) < rank {
			for i := range rank - len(cd) {
				dims[i] = 1
			}
		}
		ok := dims[0] == 1 && (dims[1] == 1 || dims[1] == int64(outChannels(conv)))
		for _, d := range dims[2:] {
			ok = ok && d == 1
		}
		if ok {
			return conv, c
		}
	}
	return nil, nil
}

// uniqueName returns base, or base_1, base_2, …: the first name no value
// of m uses.
func uniqueName(m *onnxgraph.Model, base string) string {
	n := base
	for i := 1; m.Graph.Value(n) != nil; i++ {
		n = fmt.Sprintf("%s_%d", base, i)
	}
	return n
}

func intDims(d []int64) []int {
	out := make([]int, len(d))
	for i, v := range d {
		out[i] = int(v)
	}
	return out
}

// BatchNormFloors returns, for each BatchNormalization that FoldBatchNorm
// folds into the Conv before it, keyed by its output (the folded Conv's
// output), β − 3|γ| per channel: the level the output stays above with
// probability 99.87% when, as the normalisation assumes, its input is
// standardised and Gaussian. Data-free high-bias absorption reads it; the
// fold itself forgets β and γ.
func BatchNormFloors(m *onnxgraph.Model) (map[string][]float32, error) {
	floors := map[string][]float32{}
	for _, n := range m.Graph.Nodes {
		if _, ok := foldable(n, false); !ok {
			continue
		}
		var params [2][]float32
		for i := range params {
			v := n.Inputs[i+1]
			if c := initializerOf(v); c != nil {
				v = c
			}
			t, err := tensor.FromProto(v.Const, m)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", n, v.Name, err)
			}
			if params[i], err = t.AsFloat32(); err != nil {
				return nil, fmt.Errorf("%s: %q: %w", n, v.Name, err)
			}
		}
		gamma, beta := params[0], params[1]
		if len(gamma) != len(beta) {
			continue
		}
		f := make([]float32, len(beta))
		for c := range f {
			f[c] = beta[c] - 3*float32(math.Abs(float64(gamma[c])))
		}
		floors[n.Outputs[0].Name] = f
	}
	return floors, nil
}

package passes

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

const biasCorrectionName = "bias_correction"

// MissingDataError reports an algorithm that needs calibration data in a
// run that has none: the user's configuration, not a runtime failure.
type MissingDataError struct {
	Algorithm string
	Rule      config.Rule
}

func (e *MissingDataError) Error() string {
	return fmt.Sprintf("%s (%s) needs calibration data: give --data (calibration.data or calibration.images in the config)", e.Algorithm, e.Rule.Location())
}

// runDataAlgorithms is the algorithms pass: it runs the algorithms that
// need calibration data and the planned weight qparams, before the qparams
// pass decides the biases' qparams from the weights and biases they leave.
// AdaRound runs first, then GPTQ on the weights AdaRound left; bias correction then folds the mean error of the
// weights finalize will write.
func runDataAlgorithms(ctx context.Context, u *Unit) error {
	if u.Algorithms == nil {
		return nil
	}
	needData := func(name string, r config.Rule) error {
		if u.Data == nil || u.Data.Source == nil {
			return &MissingDataError{Algorithm: name, Rule: r}
		}
		return nil
	}
	if a := u.Algorithms.AdaRound; a != nil {
		if err := needData(adaroundAlgorithmName, a.Rule); err != nil {
			return err
		}
		if err := runAdaRound(ctx, u, a); err != nil {
			return err
		}
	}
	if g := u.Algorithms.GPTQ; g != nil {
		if err := needData(gptqAlgorithmName, g.Rule); err != nil {
			return err
		}
		if err := runGPTQ(ctx, u, g); err != nil {
			return err
		}
	}
	if b := u.Algorithms.BiasCorrection; b != nil {
		if err := needData(biasCorrectionName, b.Rule); err != nil {
			return err
		}
		return correctBiases(ctx, u, b)
	}
	return nil
}

// BiasValue is a bias's data: as it was before bias correction changed it
// (Unit.UncorrectedBiases), or as bias correction fits it to a weight at
// another type (BiasesCorrectedAs).
type BiasValue struct {
	Bias  string
	Data  []float32
	Shape []int
}

// WithUncorrectedBiases is u's model, or a copy of it (sharing the other
// tensors' data) in which the biases that bias correction changed for the
// given weights are as they were: the correction is for the error of the
// weight as planned, and a weight written at another precision (the
// accuracy search's) has another error.
func WithUncorrectedBiases(u *Unit, weights []string) (*onnxgraph.Model, error) {
	var restore []BiasValue
	for _, w := range weights {
		if b, ok := u.UncorrectedBiases[w]; ok {
			restore = append(restore, b)
		}
	}
	return WithBiases(u.Model, restore)
}

// WithBiases is m, or a copy of it (sharing the other tensors' data) in
// which the given biases (or other float constants) hold the given data.
func WithBiases(m *onnxgraph.Model, biases []BiasValue) (*onnxgraph.Model, error) {
	if len(biases) == 0 {
		return m, nil
	}
	c, err := m.Derive(onnxgraph.CloneSharingData(m.Proto), nil)
	if err != nil {
		return nil, err
	}
	c.Path = m.Path
	for _, b := range biases {
		v := constantIn(c, b.Bias)
		if v == nil {
			return nil, fmt.Errorf("bias %q: not a constant of the model", b.Bias)
		}
		if err := setConst(c, v, b.Data, b.Shape); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WithUnroundedWeights is m (u's model or a copy of it), or a copy of it
// sharing the other tensors' data, in which those of the given weights
// that GPTQ or AdaRound rounded hold their float values again: a weight
// written at another precision than planned (the accuracy search's int16
// or float, the sensitivity analysis's float) is written from them, not
// from values fitted to the planned grid. The rounded weights are known
// when u.KeepFloatWeights was set for the run (AdaRound keeps them
// always); a weight no algorithm rounded is left as it is.
func WithUnroundedWeights(u *Unit, m *onnxgraph.Model, weights []string) (*onnxgraph.Model, error) {
	var restore []BiasValue
	for _, w := range weights {
		orig, ok := u.roundedWeights[w]
		if !ok {
			continue
		}
		v := constantIn(m, w)
		if v == nil {
			return nil, fmt.Errorf("weight %q: not a constant of the model", w)
		}
		restore = append(restore, BiasValue{Bias: w, Data: orig, Shape: intShape(v.Const.GetDims())})
	}
	return WithBiases(m, restore)
}

// biasLayer is one Conv or Gemm whose bias absorbs its mean error.
type biasLayer struct {
	node              *onnxgraph.Node
	bias              *onnxgraph.Value
	biasData          []float32
	biasShape         []int // as the model has it: [C], or [1, C] for a Gemm
	beta              float32
	delta             []float32 // float weight − quantize-dequantized weight
	deltaShape        []int
	input, output     string // the node's input and output values
	deltaIn, deltaOut string // their names in the error model
	sum, sumSq, count []float64
	signal            float64 // Σ y² of the float output
}

// correctBiases is empirical bias correction: for every Conv and Gemm
// whose weight is quantized and whose bias is a float32 initializer of its
// own, it measures on calibration data the per-channel mean of the error
// e = layer(x; W) − layer(x; Ŵ) = layer(x; W − Ŵ), x being the layer's
// input in the float model, and adds that mean to the bias, so that the
// quantized layer's output is right on average. The error is computed by
// the engine running the layers with W − Ŵ as weights on the layers'
// inputs as the float model computes them (measureBiasErrors).
func correctBiases(ctx context.Context, u *Unit, cfg *config.BiasCorrection) error {
	if err := ownModel(u); err != nil {
		return err
	}
	m := u.Model
	var layers []*biasLayer
	for _, n := range m.Graph.AllNodes() {
		l, why, err := biasLayerOf(u, m, n, u.Plan.Tensor, cfg)
		if err != nil {
			return err
		}
		if why != "" {
			u.Layers = append(u.Layers, LayerReport{Algorithm: biasCorrectionName, Node: n.Name, OpType: n.OpType, Measure: "output", Skipped: why})
		}
		if l != nil {
			layers = append(layers, l)
		}
	}
	if err := measureBiasErrors(ctx, u, m, layers, cfg, !u.SkipFigures); err != nil {
		return err
	}
	for _, l := range layers {
		nb, corrected, before, after := l.fold()
		if err := setConst(m, l.bias, nb, l.biasShape); err != nil {
			return fmt.Errorf("%s: %s: %w", biasCorrectionName, l.node, err)
		}
		if u.UncorrectedBiases == nil {
			u.UncorrectedBiases = map[string]BiasValue{}
		}
		u.UncorrectedBiases[l.node.Inputs[1].Name] = BiasValue{Bias: l.bias.Name, Data: l.biasData, Shape: l.biasShape}
		if u.SkipFigures {
			continue
		}
		u.Layers = append(u.Layers, LayerReport{Algorithm: biasCorrectionName, Node: l.node.Name, OpType: l.node.OpType,
			Measure: "output", Before: sqnrDB(l.signal, before), After: sqnrDB(l.signal, max(after, 0)),
			Note: fmt.Sprintf("%d of %d channels corrected", corrected, len(nb))})
	}
	return nil
}

// BiasesCorrectedAs is, by weight, the bias that bias correction gives the
// layer of each of the given weights (plan tensors of u's weights at
// another type, the accuracy search's) for that weight's error: what a
// quantize that plans the weight so writes, measured as it measures it
// (the layer's input in the model as it was before bias correction, the
// same calibration samples, the same arithmetic). A weight whose bias
// bias correction left as it was has no entry.
func BiasesCorrectedAs(ctx context.Context, u *Unit, weights []*TensorPlan) (map[string]BiasValue, error) {
	if u.Algorithms == nil || u.Algorithms.BiasCorrection == nil || len(weights) == 0 {
		return nil, nil
	}
	cfg := u.Algorithms.BiasCorrection
	var all []string
	for w := range u.UncorrectedBiases {
		all = append(all, w)
	}
	m, err := WithUncorrectedBiases(u, all)
	if err != nil {
		return nil, err
	}
	byName := map[string]*TensorPlan{}
	var names []string
	for _, t := range weights {
		byName[t.Value] = t
		names = append(names, t.Value)
	}
	// Written at another precision, a weight GPTQ or AdaRound rounded is
	// written from its float values: its error is theirs.
	if m, err = WithUnroundedWeights(u, m, names); err != nil {
		return nil, err
	}
	var layers []*biasLayer
	for _, n := range m.Graph.AllNodes() {
		if n.Domain != "" || len(n.Inputs) < 2 || n.Inputs[1] == nil || byName[n.Inputs[1].Name] == nil {
			continue
		}
		if _, ok := u.UncorrectedBiases[n.Inputs[1].Name]; !ok {
			continue
		}
		l, why, err := biasLayerOf(u, m, n, func(v string) *TensorPlan { return byName[v] }, cfg)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return nil, fmt.Errorf("%s: %s: %s", biasCorrectionName, n, why)
		}
		if l != nil {
			layers = append(layers, l)
		}
	}
	if err := measureBiasErrors(ctx, u, m, layers, cfg, false); err != nil {
		return nil, err
	}
	out := map[string]BiasValue{}
	for _, l := range layers {
		nb, _, _, _ := l.fold()
		out[l.node.Inputs[1].Name] = BiasValue{Bias: l.bias.Name, Data: nb, Shape: l.biasShape}
	}
	return out, nil
}

// measureBiasErrors accumulates each layer's output error over the
// calibration samples, the layers' inputs read from m. The error is
// computed by the engine running the layers with W − Ŵ as weights on the
// layers' inputs. The built-in engine runs each layer's error model in the
// tap, on the input the float model's run holds, so no layer's input is
// copied: memory holds what one run of m holds. Another engine (whose
// sessions cost more to open than to run) runs one model of every layer
// after each batch, on copies of the batch's inputs. With signal, each
// layer's float output is read too, for the report's SQNRs.
func measureBiasErrors(ctx context.Context, u *Unit, m *onnxgraph.Model, layers []*biasLayer, cfg *config.BiasCorrection, signal bool) error {
	if len(layers) == 0 {
		return nil
	}
	inTap := u.Data.builtIn()
	groups := [][]*biasLayer{layers}
	if inTap {
		groups = make([][]*biasLayer, len(layers))
		for i, l := range layers {
			groups[i] = []*biasLayer{l}
		}
	}
	sessions := make([]runtime.Session, len(groups))
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
	}()
	sessionOf := map[*biasLayer]int{}
	for i, group := range groups {
		em, err := errorModel(m, group)
		if err != nil {
			return err
		}
		if sessions[i], err = runtime.Open(u.Data.Engine, em, u.Data.Runtime); err != nil {
			return fmt.Errorf("%s: %w", biasCorrectionName, err)
		}
		for _, l := range group {
			sessionOf[l] = i
		}
	}
	byValue := map[string][]*biasLayer{}
	var taps []string
	for _, l := range layers {
		values := []string{l.input}
		if signal {
			values = append(values, l.output)
		}
		for _, v := range values {
			if len(byValue[v]) == 0 {
				taps = append(taps, v)
			}
			byValue[v] = append(byValue[v], l)
		}
	}
	feeds := map[string]*tensor.Tensor{}
	var tapErr error
	tap := func(name string, t *tensor.Tensor) {
		if tapErr != nil {
			return
		}
		f, err := t.AsFloat32()
		if err != nil {
			tapErr = fmt.Errorf("value %q: %w", name, err)
			return
		}
		var kept *tensor.Tensor
		for _, l := range byValue[name] {
			if name == l.input && inTap {
				in := map[string]*tensor.Tensor{l.deltaIn: tensor.FromFloat32(f, t.Shape...)}
				if tapErr = measureErrors(ctx, sessions[sessionOf[l]], in, []*biasLayer{l}); tapErr != nil {
					return
				}
			} else if name == l.input {
				if kept == nil {
					kept = tensor.FromFloat32(append([]float32(nil), f...), t.Shape...)
				}
				feeds[l.deltaIn] = kept
			}
			if name == l.output {
				for _, v := range f {
					l.signal += float64(v) * float64(v)
				}
			}
		}
	}
	after := func() error {
		if tapErr != nil || inTap {
			return tapErr
		}
		err := measureErrors(ctx, sessions[0], feeds, layers)
		clear(feeds)
		return err
	}
	if err := u.Data.forEachBatch(ctx, m, cfg.Samples, taps, tap, after); err != nil {
		return fmt.Errorf("%s: %w", biasCorrectionName, err)
	}
	return nil
}

// measureErrors runs an error model of the given layers on their inputs
// and adds each layer's error to its sums.
func measureErrors(ctx context.Context, es runtime.Session, feeds map[string]*tensor.Tensor, layers []*biasLayer) error {
	outs, err := es.Run(ctx, feeds, runtime.RunOptions{})
	if err != nil {
		return err
	}
	for _, l := range layers {
		e := outs[l.deltaOut]
		f, err := e.AsFloat32()
		if err != nil {
			return fmt.Errorf("%s: %w", l.node, err)
		}
		if err := l.accumulate(f, e.Shape); err != nil {
			return fmt.Errorf("%s: %w", l.node, err)
		}
	}
	return nil
}

// fold is the layer's bias with its significant mean errors folded in,
// how many channels it corrected, and the sum of squared errors before
// and after.
func (l *biasLayer) fold() (bias []float32, corrected int, before, after float64) {
	bias = make([]float32, len(l.biasData))
	for c := range l.biasData {
		mean := significantMean(l.sum[c], l.sumSq[c], l.count[c])
		if mean != 0 {
			corrected++
		}
		bias[c] = l.biasData[c] + float32(mean/float64(l.beta))
		before += l.sumSq[c]
		after += l.sumSq[c] - 2*l.sum[c]*mean + l.count[c]*mean*mean
	}
	return bias, corrected, before, after
}

// significance is how many standard errors a channel's mean error must
// exceed to be corrected.
const significance = 2

// significantMean is the mean error of a channel from its sum, sum of
// squares and count, or 0 when it is within significance standard errors
// of 0: a mean measured on few values (a classifier's logits over a few
// calibration samples) is mostly noise, and folding noise into the bias
// makes the layer worse on other data.
func significantMean(sum, sumSq, n float64) float64 {
	if n < 2 {
		return 0
	}
	mean := sum / n
	variance := max(sumSq/n-mean*mean, 0)
	if mean*mean*n <= significance*significance*variance {
		return 0
	}
	return mean
}

// accumulate adds one batch of the error (channels on axis 1).
func (l *biasLayer) accumulate(e []float32, shape []int) error {
	c := len(l.biasData)
	if len(shape) < 2 || shape[1] != c {
		return fmt.Errorf("%s: error of shape %v, want %d channels on axis 1", l.node, shape, c)
	}
	inner := tensor.NumElements(shape[2:])
	if inner == 0 {
		return nil
	}
	// Channel by channel in memory order: each channel's sums add its
	// elements in the order a flat walk would.
	for row := range len(e) / inner {
		ch := row % c
		sum, sumSq := l.sum[ch], l.sumSq[ch]
		for _, v := range e[row*inner : (row+1)*inner] {
			sum += float64(v)
			sumSq += float64(v) * float64(v)
		}
		l.sum[ch], l.sumSq[ch] = sum, sumSq
		l.count[ch] += float64(inner)
	}
	return nil
}

// biasLayerOf returns n as a bias-correction layer, or why it is not one
// ("" for nodes the algorithm does not apply to at all).
func biasLayerOf(u *Unit, m *onnxgraph.Model, n *onnxgraph.Node, planned func(string) *TensorPlan, cfg *config.BiasCorrection) (*biasLayer, string, error) {
	if n.Domain != "" || (n.OpType != "Conv" && n.OpType != "Gemm") || len(n.Inputs) < 2 || n.Inputs[1] == nil {
		return nil, "", nil
	}
	wt := planned(n.Inputs[1].Name)
	if wt == nil || wt.Role != Weight || wt.Params == nil {
		return nil, "", nil
	}
	switch {
	case n.Graph.Owner != nil:
		return nil, fmt.Sprintf("inside the subgraph of %s: %s works on the main graph's layers only", n.Graph.Owner, biasCorrectionName), nil
	case cfg.Excludes(n.Name):
		return nil, fmt.Sprintf("excluded by %s", cfg.Rule.Location()), nil
	case len(n.Inputs) < 3 || n.Inputs[2] == nil:
		return nil, "no bias to fold the correction into", nil
	case !n.Inputs[2].IsConst() || initializerIndex(m, n.Inputs[2]) < 0 || len(n.Inputs[2].Consumers) != 1:
		return nil, "the bias is not an initializer of its own", nil
	case n.OpType == "Gemm" && n.Attr("transA") != nil && n.Attr("transA").GetI() != 0:
		return nil, "Gemm with transA", nil
	case len(wt.Nodes) != 1:
		return nil, "the weight is shared by several nodes", nil
	}
	w, shape, err := constFloats(m, n.Inputs[1])
	if err != nil {
		return nil, "", fmt.Errorf("%s: weight %q: %w", n, n.Inputs[1].Name, err)
	}
	dq, err := finalize.FakeQuantize(w, shape, wt.Axis, wt.BlockSize, wt.Spec, wt.Params)
	if err != nil {
		return nil, "", fmt.Errorf("%s: weight %q: %w", n, n.Inputs[1].Name, err)
	}
	if orig, ok := u.roundedWeights[n.Inputs[1].Name]; ok {
		w = orig // the error is against the float weight, before GPTQ rounded it
	}
	b, bshape, err := constFloats(m, n.Inputs[2])
	if err != nil {
		return nil, "", fmt.Errorf("%s: bias %q: %w", n, n.Inputs[2].Name, err)
	}
	outputs := shape[0]
	if n.OpType == "Gemm" && (n.Attr("transB") == nil || n.Attr("transB").GetI() == 0) {
		outputs = shape[len(shape)-1]
	}
	if len(b) != outputs {
		// Gemm's C may broadcast a scalar or hold one value per row too.
		return nil, fmt.Sprintf("the bias of shape %v is not one value per output channel (%d)", bshape, outputs), nil
	}
	beta := float32(1)
	if a := n.Attr("beta"); n.OpType == "Gemm" && a != nil {
		beta = a.GetF()
	}
	if beta == 0 {
		return nil, "Gemm beta is 0", nil
	}
	delta := make([]float32, len(w))
	for i := range w {
		delta[i] = w[i] - dq[i]
	}
	c := len(b)
	return &biasLayer{node: n, bias: n.Inputs[2], biasData: b, biasShape: bshape, beta: beta, delta: delta, deltaShape: shape,
		input: n.Inputs[0].Name, output: n.Outputs[0].Name,
		sum: make([]float64, c), sumSq: make([]float64, c), count: make([]float64, c)}, "", nil
}

// errorModel is a model holding, for each layer, a copy of its node
// (attributes included) that reads the layer's input and the weight error
// W − Ŵ and has no bias: its output is the layer's output error.
func errorModel(m *onnxgraph.Model, layers []*biasLayer) (*onnxgraph.Model, error) {
	g := &onnxpb.GraphProto{Name: proto.String("bias_error")}
	for i, l := range layers {
		l.deltaIn, l.deltaOut = fmt.Sprintf("x%d", i), fmt.Sprintf("e%d", i)
		w := fmt.Sprintf("dw%d", i)
		wp, err := tensor.ToProto(tensor.FromFloat32(l.delta, l.deltaShape...), w)
		if err != nil {
			return nil, err
		}
		g.Initializer = append(g.Initializer, wp)
		g.Input = append(g.Input, floatValueInfo(l.deltaIn))
		g.Output = append(g.Output, floatValueInfo(l.deltaOut))
		n := proto.CloneOf(l.node.Proto)
		n.Name = proto.String(fmt.Sprintf("error%d", i))
		n.Input = []string{l.deltaIn, w}
		n.Output = []string{l.deltaOut}
		g.Node = append(g.Node, n)
	}
	mp := &onnxpb.ModelProto{IrVersion: m.Proto.IrVersion, OpsetImport: m.Proto.GetOpsetImport(), Graph: g}
	return onnxgraph.FromProto(mp, "")
}

// floatValueInfo declares a float tensor of unknown shape.
func floatValueInfo(name string) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
		Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(tensor.Float))}},
	}}
}

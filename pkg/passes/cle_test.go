package passes

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// highBiasModel is x [n, 4, 8, 8] → Conv 3×3 (6) → BatchNorm → Relu →
// depthwise Conv 1×1 → BatchNorm → Relu → Conv 1×1 (5) → y, and
// x → Conv 1×1 (3) → BatchNorm → Relu → Conv 3×3 padded (2) → y2. Each
// BatchNorm has a large variance, so its normalised values stay within
// ±1 on the test data, and β = 2, γ = 0.5 on even channels (floor
// β − 3|γ| = 0.5), β = 1 on odd ones (floor −0.5: nothing to absorb).
func highBiasModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(91, 92))
	normal := normalDraws(rng)
	b := testmodels.New("highbias", 17)
	b.Input("x", tensor.Float, "n", 4, 8, 8).Output("y", tensor.Float, "n", 5, 6, 6).Output("y2", tensor.Float, "n", 2, 8, 8)
	bn := func(name string, c int, in, out string) {
		gamma, beta, mean, variance := make([]float32, c), make([]float32, c), normal(c, 0.1), make([]float32, c)
		for i := range c {
			gamma[i], beta[i], variance[i] = 0.5, 2, 100
			if i%2 == 1 {
				beta[i] = 1
			}
		}
		b.Init(name+"_g", []int64{int64(c)}, gamma)
		b.Init(name+"_b", []int64{int64(c)}, beta)
		b.Init(name+"_m", []int64{int64(c)}, mean)
		b.Init(name+"_v", []int64{int64(c)}, variance)
		b.Node("BatchNormalization", name, []string{in, name + "_g", name + "_b", name + "_m", name + "_v"}, []string{out})
	}
	conv := func(name string, out, in, k int, input, output string, attrs ...any) {
		b.Init(name+"_w", []int64{int64(out), int64(in), int64(k), int64(k)}, normal(out*in*k*k, 0.5))
		b.Init(name+"_bias", []int64{int64(out)}, normal(out, 0.1))
		n := b.Node("Conv", name, []string{input, name + "_w", name + "_bias"}, []string{output})
		for i := 0; i < len(attrs); i += 2 {
			n.Attribute = append(n.Attribute, testmodels.AttrInt(attrs[i].(string), int64(attrs[i+1].(int))))
		}
	}
	conv("c1", 6, 4, 3, "x", "c1_out")
	bn("bn1", 6, "c1_out", "bn1_out")
	b.Node("Relu", "r1", []string{"bn1_out"}, []string{"a1"})
	conv("dw", 6, 1, 1, "a1", "dw_out", "group", 6)
	bn("bn2", 6, "dw_out", "bn2_out")
	b.Node("Relu", "r2", []string{"bn2_out"}, []string{"a2"})
	conv("c3", 5, 6, 1, "a2", "y")
	conv("p1", 3, 4, 1, "x", "p1_out")
	bn("bnp", 3, "p1_out", "bnp_out")
	b.Node("Relu", "rp", []string{"bnp_out"}, []string{"ap"})
	pq := b.Node("Conv", "pq", []string{"ap", "pq_w", "pq_bias"}, []string{"y2"})
	pq.Attribute = append(pq.Attribute, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Init("pq_w", []int64{2, 3, 3, 3}, normal(2*3*9, 0.5))
	b.Init("pq_bias", []int64{2}, normal(2, 0.1))
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHighBiasAbsorption checks on the model above (fixed seeds) that
// equalization with high-bias absorption keeps the float function (within
// 1e-5 of each output's magnitude), that every Relu output of an absorbed
// pair equals the original one less 0.5 (the floor) on even channels and
// unshifted on odd ones, up to the channel's equalization scale — measured
// by the engine, independently of the pass — and that the pair whose
// second Conv pads is reported as left alone.
func TestHighBiasAbsorption(t *testing.T) {
	src := newSampleSource(93, 6, 4, 8, 8)
	names := []string{"y", "y2", "a1", "a2", "ap"}
	want := runValues(t, highBiasModel(t), src, names...)
	u := quantizeWith(t, highBiasModel(t), "w8a8", algorithms(t, "algorithms:\n  cross_layer_equalization: {high_bias_absorption: true}\n"), nil)
	got := runValues(t, u.Model, src, names...)
	sameFunction(t, "equalization", want, got, "y", "y2")
	for _, a := range []struct {
		value string
		shift float64
	}{{"a1", 0.5}, {"a2", 0.5}, {"ap", 0}} {
		w, _ := want[a.value].AsFloat32()
		g, _ := got[a.value].AsFloat32()
		channels, hw := want[a.value].Shape[1], want[a.value].Shape[2]*want[a.value].Shape[3]
		for c := range channels {
			// new = (old − shift)/S for one S > 0 per channel: S from the
			// spread, then the shift from the least value.
			oldLo, oldHi, newLo, newHi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
			for i := range w {
				if (i/hw)%channels != c {
					continue
				}
				oldLo, oldHi = min(oldLo, float64(w[i])), max(oldHi, float64(w[i]))
				newLo, newHi = min(newLo, float64(g[i])), max(newHi, float64(g[i]))
			}
			shift := a.shift
			if c%2 == 1 {
				shift = 0
			}
			if oldLo <= shift || oldHi == oldLo {
				t.Fatalf("%s channel %d: the test data span [%g, %g], not above the floor %g", a.value, c, oldLo, oldHi, shift)
			}
			s := (oldHi - oldLo) / (newHi - newLo)
			if got := oldLo - s*newLo; math.Abs(got-shift) > 2e-3 {
				t.Errorf("%s channel %d: shifted by %g, want %g", a.value, c, got, shift)
			}
		}
	}
	notes := map[string]string{}
	for _, r := range u.Layers {
		if r.Algorithm == crossLayerEqualizationName {
			notes[r.Node] = r.Note
		}
	}
	for node, want := range map[string]string{"c1": "high-bias absorption: 3 of 6 channels", "dw": "high-bias absorption: 3 of 6 channels", "p1": "pads its input"} {
		if !strings.Contains(notes[node], want) {
			t.Errorf("%s: note %q, want it to say %q", node, notes[node], want)
		}
	}
}

// TestRescaleRecorded checks that the plan records, for every activation
// cross-layer equalization changed, the rescale that maps it back to the
// float model's value, (x + Shift[c])·Scale[c] per channel, measured by
// the engine on the model above (fixed seeds): the Relu outputs of the
// three equalized pairs, two of them shifted by high-bias absorption.
func TestRescaleRecorded(t *testing.T) {
	src := newSampleSource(93, 6, 4, 8, 8)
	u := quantizeWith(t, highBiasModel(t), "w8a8", algorithms(t, "algorithms:\n  cross_layer_equalization: {high_bias_absorption: true}\n"), nil)
	var names []string
	for _, tp := range u.Plan.Tensors {
		if tp.Rescaled != nil {
			names = append(names, tp.Value)
		}
	}
	for _, want := range []string{"a1", "a2", "ap"} {
		if !slices.Contains(names, want) {
			t.Fatalf("rescaled values %q, want %q among them", names, want)
		}
	}
	want := runValues(t, highBiasModel(t), src, names...)
	got := runValues(t, u.Model, src, names...)
	for _, name := range names {
		r := u.Plan.Tensor(name).Rescaled
		w, _ := want[name].AsFloat32()
		g, _ := got[name].AsFloat32()
		shape := want[name].Shape
		if r.Axis != 1 || len(r.Scale) != shape[1] {
			t.Fatalf("%s: rescale on axis %d with %d scales for shape %v", name, r.Axis, len(r.Scale), shape)
		}
		inner := shape[2] * shape[3]
		var peak, diff float64
		for i := range w {
			c := (i / inner) % shape[1]
			back := g[i]
			if r.Shift != nil {
				back += r.Shift[c]
			}
			back *= r.Scale[c]
			peak = max(peak, math.Abs(float64(w[i])))
			diff = max(diff, math.Abs(float64(w[i])-float64(back)))
		}
		if diff > 1e-5*peak {
			t.Errorf("%s: undoing the recorded rescale misses the float value by %g (magnitude %g)", name, diff, peak)
		}
	}
}

// TestAbsMax checks absMax against the plain loop it stands for, on the
// lengths either side of the vector kernel's threshold, with negative
// zeros, subnormals, and the NaN and ±Inf the kernel leaves to the loop.
func TestAbsMax(t *testing.T) {
	loop := func(x []float32) float32 {
		m := float32(0)
		for _, v := range x {
			m = max(m, float32(math.Abs(float64(v))))
		}
		return m
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 9, 63, 64, 65, 200, 4608} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		cases := map[string][]float32{"normal": x}
		if n > 0 {
			neg := slices.Clone(x)
			for i := range neg {
				neg[i] = -float32(math.Abs(float64(neg[i])))
			}
			zeros := make([]float32, n)
			zeros[n-1] = float32(math.Copysign(0, -1))
			sub := slices.Clone(x)
			sub[n/2] = -math.SmallestNonzeroFloat32 * 1e3
			nan := slices.Clone(x)
			nan[n/2] = float32(math.NaN())
			inf := slices.Clone(x)
			inf[n-1] = float32(math.Inf(-1))
			cases["negative"], cases["zeros"], cases["subnormal"], cases["nan"], cases["inf"] = neg, zeros, sub, nan, inf
		}
		for name, v := range cases {
			got, want := absMax(v), loop(v)
			if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Errorf("n=%d %s: absMax %g, loop %g", n, name, got, want)
			}
		}
	}
}

// TestWindowMaximaStayExact: the window maxima equalization keeps while it
// scales a chain's weights are, after every sweep, what the weights'
// windows hold (so that the sweeps read the ranges the weights have), on a
// chain whose middle weight is in two pairs (second of one, first of the
// next: the rows of one and the columns of the other scale it), with
// magnitudes over many orders, subnormals and negative zeros.
func TestWindowMaximaStayExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	weight := func(shape ...int) *weightData { return randomWeight(rng, 9, true, shape...) }
	// 8 → 12 (3×3) → depthwise 12 (3×3) → 5 (1×1)
	a, b, c, d := weight(12, 8, 3, 3), weight(12, 1, 3, 3), weight(5, 12, 1, 1), weight(12)
	pairs := []*clePair{
		{w1: a, w2: b, b1: d, per: 1, outPer: 1, scale: ones(12)},
		{w1: b, w2: c, per: 12, outPer: 5, scale: ones(12)},
	}
	for sweep := range 6 {
		for _, p := range pairs {
			p.equalize()
		}
		for wi, w := range []*weightData{a, b, c} {
			got, cols := w.windowMaxima()
			inner := len(w.data) / (w.shape[0] * cols)
			for r := range got {
				if want := absMax(w.data[r*inner : (r+1)*inner]); math.Float32bits(got[r]) != math.Float32bits(want) {
					t.Fatalf("sweep %d, weight %d, window %d: kept maximum %g, the window holds %g", sweep, wi, r, got[r], want)
				}
			}
		}
	}
}

// randomWeight is a weight of the given shape whose magnitudes spread over
// the given number of decades around 1; with specials, about one element
// in 25 is −0 or a subnormal.
func randomWeight(rng *rand.Rand, decades int, specials bool, shape ...int) *weightData {
	w := &weightData{shape: shape, data: make([]float32, tensor.NumElements(shape))}
	for i := range w.data {
		w.data[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(decades)-decades/2)))
		if !specials {
			continue
		}
		switch rng.IntN(50) {
		case 0:
			w.data[i] = float32(math.Copysign(0, -1))
		case 1:
			w.data[i] = math.SmallestNonzeroFloat32 * float32(rng.IntN(100))
		}
	}
	return w
}

func ones(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// TestEqualizeFixpoint: a sweep that changes no channel reports so and
// leaves the weights as they were, so that equalization may stop there:
// every later sweep would compute the same ranges and change nothing.
func TestEqualizeFixpoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := &clePair{w1: randomWeight(rng, 5, false, 16, 8, 3, 3), w2: randomWeight(rng, 5, false, 10, 16, 3, 3), per: 16, outPer: 10, scale: ones(16)}
	sweeps := 0
	for p.equalize() {
		if sweeps++; sweeps > 100 {
			t.Fatal("a single pair did not settle within 100 sweeps")
		}
	}
	if sweeps == 0 {
		t.Fatal("the first sweep changed nothing: the test proves nothing")
	}
	w1, w2 := slices.Clone(p.w1.data), slices.Clone(p.w2.data)
	if p.equalize() || !slices.Equal(w1, p.w1.data) || !slices.Equal(w2, p.w2.data) {
		t.Error("a sweep after the fixpoint changed the weights")
	}
}

// fireModel is SqueezeNet's fire module: x [n, 4, 8, 8] → Conv 1×1 (6) →
// Relu → {Conv 1×1 (5), Conv 3×3 padded (5)} → Concat → y, with
// channel ranges spread over 4⁴ (scaledConv), and beside it
// x → Conv 1×1 (6) → Relu → {Conv 1×1 (3), Add}: a Relu read by a Conv
// and something else, which no scale may pass.
func fireModel(t *testing.T) *onnxgraph.Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(41, 42))
	b := testmodels.New("fire", 17)
	b.Input("x", tensor.Float, "n", 4, 8, 8).Output("y", tensor.Float, "n", 10, 8, 8).Output("y2", tensor.Float, "n", 6, 8, 8)
	scaledConv(b, rng, "squeeze_w", 6, 4, 1)
	scaledConv(b, rng, "e1_w", 5, 6, 1)
	scaledConv(b, rng, "e3_w", 5, 6, 3)
	scaledConv(b, rng, "side_w", 6, 4, 1)
	scaledConv(b, rng, "tail_w", 6, 6, 1)
	b.Node("Conv", "squeeze", []string{"x", "squeeze_w", "squeeze_w_b"}, []string{"s"})
	b.Node("Relu", "squeeze_relu", []string{"s"}, []string{"a"})
	b.Node("Conv", "expand1x1", []string{"a", "e1_w", "e1_w_b"}, []string{"e1"})
	b.Node("Conv", "expand3x3", []string{"a", "e3_w", "e3_w_b"}, []string{"e3"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Concat", "concat", []string{"e1", "e3"}, []string{"y"}, testmodels.AttrInt("axis", 1))
	b.Node("Conv", "side", []string{"x", "side_w", "side_w_b"}, []string{"sd"})
	b.Node("Relu", "side_relu", []string{"sd"}, []string{"sa"})
	b.Node("Conv", "tail", []string{"sa", "tail_w", "tail_w_b"}, []string{"t"})
	b.Node("Add", "skip", []string{"t", "sa"}, []string{"y2"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEqualizeSeveralReaders checks equalization of a Conv whose Relu
// feeds several Convs (fixed seeds, the model above): the float function
// is kept (within 1e-5 of each output's magnitude, run by the engine);
// every channel's range in the first Conv equals its largest range among
// the readers' weights on it (the balance the sweeps reach), where it
// was up to 4⁴ apart; high-bias absorption, which moves a constant into
// one reader's bias, says why it leaves the pair alone; and the Relu also
// read by an Add is not equalized (its weights unchanged).
func TestEqualizeSeveralReaders(t *testing.T) {
	src := newSampleSource(43, 6, 4, 8, 8)
	want := runValues(t, fireModel(t), src, "y", "y2")
	u := quantizeWith(t, fireModel(t), "w8a8", algorithms(t, "algorithms:\n  cross_layer_equalization: {high_bias_absorption: true}\n"), nil)
	got := runValues(t, u.Model, src, "y", "y2")
	sameFunction(t, "equalization", want, got, "y", "y2")
	weight := func(m *onnxgraph.Model, name string) ([]float32, []int) {
		d, shape, err := constFloats(m, m.Graph.Value(name))
		if err != nil {
			t.Fatal(err)
		}
		return d, shape
	}
	w1, _ := weight(u.Model, "squeeze_w")
	ranges := make([]float64, 6)
	for _, name := range []string{"e1_w", "e3_w"} {
		w, shape := weight(u.Model, name)
		inner := shape[2] * shape[3]
		for i, x := range w {
			c := (i / inner) % shape[1]
			ranges[c] = max(ranges[c], math.Abs(float64(x)))
		}
	}
	for c := range 6 {
		r1 := float64(absMax(w1[c*4 : (c+1)*4]))
		if math.Abs(r1-ranges[c]) > 1e-4*ranges[c] {
			t.Errorf("channel %d: range %g in the squeeze Conv, %g in its readers: not balanced", c, r1, ranges[c])
		}
	}
	orig := fireModel(t)
	for _, name := range []string{"side_w", "tail_w"} {
		a, _ := weight(orig, name)
		b, _ := weight(u.Model, name)
		if !slices.Equal(a, b) {
			t.Errorf("%s changed: its Relu is read by an Add, which a scale does not pass", name)
		}
	}
	var note string
	for _, r := range u.Layers {
		if r.Algorithm == crossLayerEqualizationName && r.Node == "squeeze" {
			note = r.Note
		}
	}
	if !strings.Contains(note, `"expand1x1" and "expand3x3"`) {
		t.Errorf("squeeze: note %q, want it to name both readers", note)
	}
}

// toFloat16 is m computing in float16: its float32 initializers, inputs
// and outputs cast, as an export in half precision writes them.
func toFloat16(t *testing.T, m *onnxgraph.Model) *onnxgraph.Model {
	t.Helper()
	p := onnxgraph.CloneSharingData(m.Proto)
	g := p.Graph
	for i, init := range g.Initializer {
		if tensor.DType(init.GetDataType()) != tensor.Float {
			continue
		}
		x, err := tensor.FromProto(init, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tensor.Cast(x, tensor.Float16)
		if err != nil {
			t.Fatal(err)
		}
		if g.Initializer[i], err = tensor.ToProto(h, init.GetName()); err != nil {
			t.Fatal(err)
		}
	}
	for _, vi := range append(append([]*onnxpb.ValueInfoProto{}, g.Input...), g.Output...) {
		if tt := vi.GetType().GetTensorType(); tt != nil && tensor.DType(tt.GetElemType()) == tensor.Float {
			tt.ElemType = proto.Int32(int32(tensor.Float16))
		}
	}
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	h, err := onnxgraph.LoadBytes(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// float16Rounding is how far, relative to an output's magnitude, a
// float16 model's output may move when the algorithms round rescaled
// weights to float16: a few of its 2^-11 relative steps through a few
// layers.
const float16Rounding = 4e-3

// sameFloat16Function fails when got differs from want by more than
// float16Rounding of want's magnitude.
func sameFloat16Function(t *testing.T, what string, want, got []float32) {
	t.Helper()
	var peak, diff float64
	for i := range want {
		peak = max(peak, math.Abs(float64(want[i])))
		diff = max(diff, math.Abs(float64(want[i]-got[i])))
	}
	if diff > float16Rounding*peak {
		t.Errorf("%s: the float16 output moved by %g (magnitude %g)", what, diff, peak)
	}
}

// allFloat16 fails on an initializer of m that is neither float16 nor
// int64 (shapes): the algorithms keep a float16 model's type.
func allFloat16(t *testing.T, m *onnxgraph.Model) {
	t.Helper()
	for _, init := range m.Proto.Graph.Initializer {
		if dt := tensor.DType(init.GetDataType()); dt != tensor.Float16 && dt != tensor.Int64 {
			t.Errorf("initializer %q is %s in a float16 model", init.GetName(), dt)
		}
	}
}

// TestEqualizeFloat16 checks equalization on float16 models (the plain
// pairs of cleModel and the gated ones of gatedModel, fixed seeds): the
// weights it rescales stay float16, the Muls it inserts before the gates
// read float16 scales, and the float function is kept within float16's
// rounding (float16Rounding of the output's magnitude, run by the engine); a scaled
// value float16 cannot hold is an error naming it.
func TestEqualizeFloat16(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  func(*testing.T) *onnxgraph.Model
		config string
		muls   int
	}{
		{"relu", cleModel, "algorithms:\n  cross_layer_equalization: true\n", 0},
		{"gated", gatedModel, "algorithms:\n  cross_layer_equalization: {gated_min_gain: 0.01}\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSampleSource(3, 8, 3, 8, 8)
			src.half = true
			m := toFloat16(t, tc.model(t))
			want := runX(t, m, src)
			u := quantizeWith(t, toFloat16(t, tc.model(t)), "w8a8", algorithms(t, tc.config), src)
			sameFloat16Function(t, "equalization", want, runX(t, u.Model, src))
			allFloat16(t, u.Model)
			changed := 0
			orig := map[string]*onnxpb.TensorProto{}
			for _, init := range m.Proto.Graph.Initializer {
				orig[init.GetName()] = init
			}
			for _, init := range u.Model.Proto.Graph.Initializer {
				if o := orig[init.GetName()]; o != nil && !proto.Equal(o, init) {
					changed++
				}
			}
			if changed == 0 {
				t.Error("no weight was rescaled: the test proves nothing")
			}
			muls := 0
			for _, n := range u.Model.Graph.Nodes {
				if strings.HasSuffix(n.Name, "_gate_rescale") {
					muls++
				}
			}
			if muls != tc.muls {
				t.Errorf("%d rescale Muls, want %d", muls, tc.muls)
			}
		})
	}
	if _, err := floatConst("w", []float32{1, 1e6}, []int{2}, tensor.Float16); err == nil || !strings.Contains(err.Error(), `value "w": element 1, 1e+06, is out of float16's range`) {
		t.Errorf("a value float16 cannot hold: %v", err)
	}
}

// TestRoundingFloat16: GPTQ and AdaRound round the weights of a float16
// model (cleModel in float16, int4 weights, fixed seeds) instead of
// leaving them alone, never above round-to-nearest's error, and the
// rounded weights stay float16 (TestRoundTrips: they quantize back to the
// codes chosen).
func TestRoundingFloat16(t *testing.T) {
	for _, alg := range []string{"gptq", "adaround"} {
		t.Run(alg, func(t *testing.T) {
			src := newSampleSource(5, 16, 3, 8, 8)
			src.half = true
			cfg, err := config.Parse([]byte(int4Weights+"algorithms:\n  "+alg+": true\n"), "int4.yaml")
			if err != nil {
				t.Fatal(err)
			}
			u := quantizeWith(t, toFloat16(t, cleModel(t)), "", cfg.Algorithms, src, cfg.Quant)
			rounded := 0
			for _, r := range u.Layers {
				if r.Algorithm != alg {
					continue
				}
				if r.Skipped != "" {
					t.Errorf("%s: skipped: %s", r.Node, r.Skipped)
					continue
				}
				rounded++
				if r.After < r.Before {
					t.Errorf("%s: %s raised the layer's error: %.2f → %.2f dB", r.Node, alg, r.Before, r.After)
				}
			}
			if rounded != 3 {
				t.Errorf("%d layers rounded, want 3", rounded)
			}
			allFloat16(t, u.Model)
		})
	}
}

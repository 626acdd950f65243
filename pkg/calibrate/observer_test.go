package calibrate

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func specWith(c spec.CalculatorType) *spec.QuantizationSpec {
	s := spec.DefaultActivationSpec()
	s.Calculator = spec.Calculator{Type: c}.WithDefaults()
	return s
}

func mustObserver(t *testing.T, tt TensorToObserve) *Observer {
	t.Helper()
	o, err := NewObserver(tt)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func observe(t *testing.T, o *Observer, x []float32, shape ...int) {
	t.Helper()
	if len(shape) == 0 {
		shape = []int{len(x)}
	}
	if err := o.Observe(tensor.FromFloat32(x, shape...)); err != nil {
		t.Fatal(err)
	}
}

func TestMovingAverageGolden(t *testing.T) {
	o := mustObserver(t, TensorToObserve{Name: "a", Spec: specWith(spec.MovingAverage)})
	nan := float32(math.NaN())
	observe(t, o, []float32{-1, 2, nan})                  // first batch initialises
	observe(t, o, []float32{-3, 4, float32(math.Inf(1))}) // running += 0.01·(batch − running)
	observe(t, o, []float32{nan})                         // no finite value: no update
	observe(t, o, []float32{0, 1})
	c := float32(0.01)
	wmin, wmax := float32(-1), float32(2)
	wmin, wmax = wmin+c*(-3-wmin), wmax+c*(4-wmax)
	wmin, wmax = wmin+c*(0-wmin), wmax+c*(1-wmax)
	mins, maxs, err := o.Range(nil)
	if err != nil {
		t.Fatal(err)
	}
	if mins[0] != wmin || maxs[0] != wmax {
		t.Fatalf("moving average = [%v, %v], want [%v, %v]", mins[0], maxs[0], wmin, wmax)
	}
	if math.Abs(float64(wmin)-(-1.0098)) > 1e-6 || math.Abs(float64(wmax)-2.0098) > 1e-6 {
		t.Fatalf("hand values drifted: %v %v", wmin, wmax)
	}
	if o.Min[0] != -3 || o.Max[0] != 4 || o.NaN != 2 || o.Inf != 1 || o.Count != 6 || o.Batches != 4 {
		t.Fatalf("state %+v", o)
	}
}

func TestPerChannelMinMax(t *testing.T) {
	one := 1
	s := specWith(spec.Static)
	s.Granularity = spec.Granularity{Type: spec.PerChannel, Axis: &one}
	o := mustObserver(t, TensorToObserve{Name: "nchw", Spec: s})
	// N=2, C=2, HW=2: channel 0 holds 1,2 and 5,6; channel 1 holds -1,3 and 7,-8.
	observe(t, o, []float32{1, 2, -1, 3, 5, 6, 7, -8}, 2, 2, 2)
	mins, maxs, err := o.Range(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mins, []float32{1, -8}) || !slices.Equal(maxs, []float32{6, 7}) {
		t.Fatalf("per channel = %v %v", mins, maxs)
	}
	last := -1
	s.Granularity.Axis = &last
	o = mustObserver(t, TensorToObserve{Name: "nhwc", Spec: s})
	observe(t, o, []float32{1, -1, 2, 3, 5, 7, 6, -8}, 2, 2, 2)
	mins, maxs, _ = o.Range(nil)
	if !slices.Equal(mins, []float32{1, -8}) || !slices.Equal(maxs, []float32{6, 7}) {
		t.Fatalf("channels last = %v %v", mins, maxs)
	}
	if err := o.Observe(tensor.FromFloat32(make([]float32, 6), 2, 3)); err == nil || !strings.Contains(err.Error(), "nhwc") {
		t.Fatalf("channel count change: %v", err)
	}
}

func TestMinMaxQParams(t *testing.T) {
	s := specWith(spec.Static)
	o := mustObserver(t, TensorToObserve{Name: "x", Spec: s})
	observe(t, o, []float32{-2.55, 1, 0.5})
	mins, maxs, err := o.Range(s)
	if err != nil {
		t.Fatal(err)
	}
	scales, zps, err := s.QParams(mins, maxs)
	if err != nil {
		t.Fatal(err)
	}
	if scales[0] != float32(2.55)/127.5 || zps[0] != 0 {
		t.Fatalf("qparams %v %v", scales, zps)
	}
}

func TestNoFiniteValues(t *testing.T) {
	o := mustObserver(t, TensorToObserve{Name: "bad", Spec: specWith(spec.Static)})
	observe(t, o, []float32{float32(math.NaN())})
	if _, _, err := o.Range(nil); err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), "1 NaN") {
		t.Fatalf("got %v", err)
	}
}

func TestFixed(t *testing.T) {
	r := Range{-1, 1} // Tanh's
	o := mustObserver(t, TensorToObserve{Name: "t", Spec: specWith(spec.MovingAverage), Fixed: &r})
	observe(t, o, []float32{-0.5, 0.25})
	mins, maxs, err := o.Range(nil)
	if err != nil || mins[0] != -1 || maxs[0] != 1 || o.Count != 2 {
		t.Fatalf("fixed = %v %v %v", mins, maxs, err)
	}
}

func TestPercentileGolden(t *testing.T) {
	x := make([]float32, 1000)
	for i := range x {
		x[i] = float32(i + 1)
	}
	// 1..1000 fit 2048 bins at width 2^-1 but not 2^-2: value k is alone in
	// bin [k, k+0.5), so a quantile reaching value k's bin fully ends at k+0.5.
	tests := []struct {
		name   string
		scheme spec.QScheme
		p      float64
		lo, hi float32
	}{
		{"symmetric 99.9", spec.Symmetric, 99.9, 1, 999.5},
		{"two-tailed 99.8", spec.Asymmetric, 99.8, 1.5, 999.5},
		{"symmetric 100", spec.Symmetric, 100, 1, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := specWith(spec.Percentile)
			s.QScheme = tc.scheme
			s.Calculator.Percentile = tc.p
			o := mustObserver(t, TensorToObserve{Name: "p", Spec: s})
			observe(t, o, x)
			if o.Histogram.Exp != -1 || o.Histogram.Start != 2 {
				t.Fatalf("bins 2^%d from %d", o.Histogram.Exp, o.Histogram.Start)
			}
			mins, maxs, err := o.Range(s)
			if err != nil {
				t.Fatal(err)
			}
			if mins[0] != tc.lo || maxs[0] != tc.hi {
				t.Fatalf("range [%v, %v], want [%v, %v]", mins[0], maxs[0], tc.lo, tc.hi)
			}
		})
	}
}

func TestSymmetricPercentileNegative(t *testing.T) {
	// |x| of −1000..−1 is 1..1000 again, but a negative bin [−k, −k+0.5)
	// folds onto |x| in (k−0.5, k], so value −k counts in the abs bin
	// [k−0.5, k) (the documented measure-zero shift at bin edges): the cut
	// is at −999.
	x := make([]float32, 1000)
	for i := range x {
		x[i] = -float32(i + 1)
	}
	s := specWith(spec.Percentile)
	s.Calculator.Percentile = 99.9
	o := mustObserver(t, TensorToObserve{Name: "n", Spec: s})
	observe(t, o, x)
	mins, maxs, _ := o.Range(s)
	if mins[0] != -999 || maxs[0] != -1 {
		t.Fatalf("range [%v, %v]", mins[0], maxs[0])
	}
}

// TestSymmetricRangesFarFromZero: values in [1e6, 1e6 + 64] (a position
// index, a large mean) are thousands of bin widths from zero. Folding them
// onto |v| bin by bin from zero would take hundreds of millions of bins
// (and the entropy search time quadratic in them); the folded bins are
// coarsened instead, and the symmetric ranges still reach the data's
// largest magnitude, clamped to the observed range as always.
func TestSymmetricRangesFarFromZero(t *testing.T) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = 1e6 + float32(i%65)
	}
	for _, calc := range []spec.CalculatorType{spec.Percentile, spec.Entropy} {
		s := specWith(calc)
		s.QScheme = spec.Symmetric
		o := mustObserver(t, TensorToObserve{Name: "n", Spec: s})
		observe(t, o, x)
		if abs, _ := o.Histogram.absCounts(maxPercentileAbsBins); len(abs) > maxPercentileAbsBins {
			t.Fatalf("%s: %d folded bins, want at most %d", calc, len(abs), maxPercentileAbsBins)
		}
		mins, maxs, err := o.Range(s)
		if err != nil {
			t.Fatal(err)
		}
		if mins[0] != 1e6 || maxs[0] < 1e6+60 || maxs[0] > 1e6+64 {
			t.Errorf("%s: range [%v, %v], want [1e6, about 1e6 + 64]", calc, mins[0], maxs[0])
		}
	}
}

func TestKLDivergence(t *testing.T) {
	got := klDivergence([]float64{1, 1}, []float64{1, 3})
	want := 0.5*math.Log(0.5/0.25) + 0.5*math.Log(0.5/0.75)
	if math.Abs(got-want) > 1e-12 {
		t.Fatalf("KL = %v, want %v", got, want)
	}
	if !math.IsInf(klDivergence([]float64{1}, []float64{0}), 1) {
		t.Fatal("empty Q must give +Inf")
	}
}

func data(kind string, n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		switch kind {
		case "uniform":
			x[i] = float32(2*r.Float64() - 1)
		case "normal":
			x[i] = float32(r.NormFloat64())
		case "specials":
			x[i] = float32(r.NormFloat64() * 10)
			switch r.IntN(50) {
			case 0:
				x[i] = float32(math.NaN())
			case 1:
				x[i] = float32(math.Inf(1 - 2*r.IntN(2)))
			case 2:
				x[i] = float32(r.NormFloat64() * 1e4)
			}
		}
	}
	return x
}

func TestEntropyAndMSE(t *testing.T) {
	uniform := data("uniform", 200000, 1)
	normal := data("normal", 200000, 2)
	outlier := append(slices.Clone(normal), 1000)
	// A few far values: the bins stay fine enough (2^-5) for entropy's
	// 128-level search to resolve the normal bulk.
	tail := append(slices.Clone(normal), 30, -25, 28)
	// A Relu output: half exact zeros, half the positive side of a
	// normal distribution, whose largest value is about 4.5.
	relu := slices.Clone(normal)
	for i, v := range relu {
		relu[i] = max(v, 0)
	}
	tests := []struct {
		name   string
		calc   spec.CalculatorType
		x      []float32
		lo, hi float64 // bounds on the chosen threshold (absmax of the range)
	}{
		// Uniform data has nothing worth clipping.
		{"entropy uniform", spec.Entropy, uniform, 0.97, 1},
		{"mse uniform", spec.MSE, uniform, 0.97, 1},
		// A single far outlier must not set the range.
		{"entropy tail", spec.Entropy, tail, 3, 15},
		// The zeros must not pull the threshold into the bulk.
		{"entropy relu", spec.Entropy, relu, 3, 5},
		{"mse outlier", spec.MSE, outlier, 2, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := specWith(tc.calc)
			s.QScheme = spec.Asymmetric
			o := mustObserver(t, TensorToObserve{Name: tc.name, Spec: s})
			observe(t, o, tc.x)
			mins, maxs, err := o.Range(s)
			if err != nil {
				t.Fatal(err)
			}
			th := max(-float64(mins[0]), float64(maxs[0]))
			if th < tc.lo || th > tc.hi {
				t.Fatalf("range [%v, %v]: threshold %v not in [%v, %v]", mins[0], maxs[0], th, tc.lo, tc.hi)
			}
		})
	}
}

// histState is the part of a histogram that must not depend on batching.
func histState(h *Histogram) (int, int, []uint64, uint64) { return h.Exp, h.Start, h.Counts, h.Total }

func sameHist(t *testing.T, what string, a, b *Histogram) {
	t.Helper()
	ea, sa, ca, ta := histState(a)
	eb, sb, cb, tb := histState(b)
	if ea != eb || sa != sb || ta != tb || !slices.Equal(ca, cb) || a.Min != b.Min || a.Max != b.Max {
		t.Fatalf("%s: histogram 2^%d from %d total %d differs from 2^%d from %d total %d", what, ea, sa, ta, eb, sb, tb)
	}
}

func TestHistogramBatchInvariance(t *testing.T) {
	x := data("specials", 4096, 9)
	// Growing magnitudes force many re-binnings on the way.
	for i := range x {
		x[i] *= float32(1 + i/512)
	}
	whole := NewHistogram(2048)
	if _, _, err := whole.Add(x); err != nil {
		t.Fatal(err)
	}
	for _, bs := range []int{1, 3, 32, 1000} {
		h := NewHistogram(2048)
		for i := 0; i < len(x); i += bs {
			if _, _, err := h.Add(x[i:min(i+bs, len(x))]); err != nil {
				t.Fatal(err)
			}
		}
		sameHist(t, "batch size", h, whole)
	}
	// Reversed order too.
	rev := NewHistogram(2048)
	for i := len(x); i > 0; i -= 7 {
		rev.Add(x[max(i-7, 0):i])
	}
	sameHist(t, "reversed", rev, whole)
	// Shards merged equal one pass, in any grouping.
	shards := []*Histogram{NewHistogram(2048), NewHistogram(2048), NewHistogram(2048)}
	for i := 0; i < len(x); i += 100 {
		shards[(i/100)%3].Add(x[i:min(i+100, len(x))])
	}
	m := NewHistogram(2048)
	for _, s := range []int{2, 0, 1} {
		if err := m.Merge(shards[s]); err != nil {
			t.Fatal(err)
		}
	}
	sameHist(t, "merged shards", m, whole)
}

func TestObserverMergeEqualsOnePass(t *testing.T) {
	x := data("specials", 3000, 4)
	for _, calc := range []spec.CalculatorType{spec.Static, spec.GlobalMinMax, spec.Percentile, spec.Entropy} {
		t.Run(calc.String(), func(t *testing.T) {
			s := specWith(calc)
			one := mustObserver(t, TensorToObserve{Name: "x", Spec: s})
			a := mustObserver(t, TensorToObserve{Name: "x", Spec: s})
			b := mustObserver(t, TensorToObserve{Name: "x", Spec: s})
			for i := 0; i < len(x); i += 32 {
				batch := x[i:min(i+32, len(x))]
				observe(t, one, batch)
				if i < 1600 {
					observe(t, a, batch)
				} else {
					observe(t, b, batch)
				}
			}
			if err := a.Merge(b); err != nil {
				t.Fatal(err)
			}
			if a.Count != one.Count || a.NaN != one.NaN || a.Inf != one.Inf || a.Batches != one.Batches ||
				!slices.Equal(a.Min, one.Min) || !slices.Equal(a.Max, one.Max) {
				t.Fatalf("merged %+v, one pass %+v", a, one)
			}
			if one.Histogram != nil {
				sameHist(t, "merge", a.Histogram, one.Histogram)
			}
			ra, rb, err1 := a.Range(s)
			oa, ob, err2 := one.Range(s)
			if err1 != nil || err2 != nil || !slices.Equal(ra, oa) || !slices.Equal(rb, ob) {
				t.Fatalf("ranges differ: %v %v vs %v %v (%v, %v)", ra, rb, oa, ob, err1, err2)
			}
		})
	}
}

// TestMovingAverageMerge: shards of a moving average cannot reproduce one
// pass, so Merge refuses them rather than return something else.
func TestMovingAverageMerge(t *testing.T) {
	s := specWith(spec.MovingAverage)
	a := mustObserver(t, TensorToObserve{Name: "m", Spec: s})
	b := mustObserver(t, TensorToObserve{Name: "m", Spec: s})
	observe(t, a, []float32{-1, 1})
	observe(t, b, []float32{-4, 4})
	err := a.Merge(b)
	if !errors.Is(err, ErrNotMergeable) || !strings.Contains(err.Error(), `tensor "m"`) {
		t.Fatalf("Merge = %v, want ErrNotMergeable naming the tensor", err)
	}
	if a.AvgMin[0] != -1 || a.AvgMax[0] != 1 {
		t.Fatalf("a refused merge changed the observer: %v %v", a.AvgMin, a.AvgMax)
	}
}

func TestStatsRoundTrip(t *testing.T) {
	var obs []*Observer
	for _, calc := range []spec.CalculatorType{spec.MSE, spec.MovingAverage, spec.Static} {
		o := mustObserver(t, TensorToObserve{Name: "t_" + calc.String(), Spec: specWith(calc)})
		observe(t, o, data("specials", 500, 3))
		obs = append(obs, o)
	}
	empty := mustObserver(t, TensorToObserve{Name: "a_empty", Spec: specWith(spec.Static)})
	st := &Stats{Version: StatsVersion, ModelSHA256: strings.Repeat("ab", 32), RandomData: true, Samples: 5, Batches: 1,
		Tensors: append(obs, empty)}
	var b1, b2 bytes.Buffer
	if err := st.Write(&b1); err != nil {
		t.Fatal(err)
	}
	back, err := Read(bytes.NewReader(b1.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b1.String())
	}
	if err := back.Write(&b2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatalf("round trip changed the document:\n%s\n----\n%s", b1.String(), b2.String())
	}
	if !strings.Contains(b1.String(), `"random_data": true`) || !strings.Contains(b1.String(), `"-inf"`) {
		t.Fatalf("document:\n%s", b1.String())
	}
	sameHist(t, "round trip", back.Tensor("t_mse").Histogram, st.Tensor("t_mse").Histogram)
	if err := back.CheckModel(strings.Repeat("cd", 32)); err == nil || !strings.Contains(err.Error(), "abababababab") {
		t.Fatalf("CheckModel: %v", err)
	}
	other := *back
	other.ModelSHA256 = strings.Repeat("cd", 32)
	if _, err := Merge(back, &other); err == nil || !strings.Contains(err.Error(), "model sha256") {
		t.Fatalf("Merge of two models: %v", err)
	}
	if _, err := Merge(back, back); !errors.Is(err, ErrNotMergeable) {
		t.Fatalf("Merge of moving averages: %v, want ErrNotMergeable", err)
	}
	exact := *back
	exact.Tensors = slices.DeleteFunc(slices.Clone(back.Tensors), func(o *Observer) bool { return o.Kind == KindMovingAverage })
	m, err := Merge(&exact, &exact)
	if err != nil {
		t.Fatal(err)
	}
	if m.Samples != 10 || m.Tensor("t_mse").Histogram.Total != 2*back.Tensor("t_mse").Histogram.Total {
		t.Fatalf("merged samples %d", m.Samples)
	}
}

func TestReadRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"version":  `{"version": 9, "tensors": []}`,
		"unknown":  `{"version": 1, "tensor": []}`,
		"kind":     `{"version": 1, "tensors": [{"name": "a", "observer": "magic", "min": [], "max": []}]}`,
		"total":    `{"version": 1, "tensors": [{"name": "a", "observer": "histogram", "min": [0], "max": [1], "histogram": {"exp": 0, "start": 0, "bins": 4, "counts": [1], "min": 0, "max": 0, "total": 2}}]}`,
		"unsorted": `{"version": 1, "tensors": [{"name": "b", "observer": "minmax", "min": [], "max": []}, {"name": "a", "observer": "minmax", "min": [], "max": []}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Read(strings.NewReader(doc)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestHistogramNonNegativeRange pins a past bug: for data in [0, x) the
// bin index x·2^140 overflowed int and the histogram claimed to fit at the
// smallest exponent, then counted every value as out of range.
func TestHistogramNonNegativeRange(t *testing.T) {
	for _, x := range [][]float32{{0, 0.99}, {0, 1e30}, {0, 3}, {-1e-38, 0}, {5, 6}} {
		h := NewHistogram(2048)
		if _, _, err := h.Add(x); err != nil {
			t.Fatalf("%v: %v", x, err)
		}
		if h.Total != uint64(len(x)) {
			t.Fatalf("%v: total %d", x, h.Total)
		}
		w := math.Ldexp(1, h.Exp)
		if n := math.Floor(float64(x[1])/w) - math.Floor(float64(x[0])/w); n >= 2048 || (h.Exp > MinHistogramExp && n < 1024) {
			t.Fatalf("%v: exponent %d spans %v bins", x, h.Exp, n)
		}
	}
}

// TestMinMaxSpecOverClippingObserver checks that a spec asking for a
// min/max calculator gets the observed min/max from an observer of any
// kind (a spec raised after calibration reads what observing it with its
// own kind gives), while the observer's own calculator still clips.
func TestMinMaxSpecOverClippingObserver(t *testing.T) {
	// Four batches of 50000 values in [-1, 1), one of them -2 and one 50.
	rng := rand.New(rand.NewPCG(1, 2))
	batches := make([][]float32, 4)
	for i := range batches {
		batches[i] = make([]float32, 50000)
		for j := range batches[i] {
			batches[i][j] = rng.Float32()*2 - 1
		}
	}
	batches[2][7], batches[2][9] = -2, 50
	tests := []struct {
		name     string
		observer spec.CalculatorType
	}{
		{name: "moving average", observer: spec.MovingAverage},
		{name: "percentile", observer: spec.Percentile},
		{name: "mse", observer: spec.MSE},
		{name: "global min/max", observer: spec.GlobalMinMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := mustObserver(t, TensorToObserve{Name: "a", Spec: specWith(tt.observer)})
			for _, b := range batches {
				observe(t, o, b)
			}
			for _, c := range []spec.CalculatorType{spec.Static, spec.GlobalMinMax} {
				mins, maxs, err := o.Range(specWith(c))
				if err != nil {
					t.Fatal(err)
				}
				if mins[0] != -2 || maxs[0] != 50 {
					t.Errorf("%s spec: range [%v, %v], want the observed [-2, 50]", c, mins[0], maxs[0])
				}
			}
			if tt.observer == spec.GlobalMinMax {
				return
			}
			_, maxs, err := o.Range(specWith(tt.observer))
			if err != nil {
				t.Fatal(err)
			}
			if maxs[0] >= 50 {
				t.Errorf("%s spec: maximum %v, want below the observed 50 (clipped)", tt.observer, maxs[0])
			}
		})
	}
}

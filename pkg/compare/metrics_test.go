package compare

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

func TestStatsIdentical(t *testing.T) {
	x := []float32{1, -2, 3.5, 0, 1e-3}
	var s Stats
	if err := s.Add(x, x); err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(float64(s.SQNR()), 1) {
		t.Errorf("SQNR = %v, want +inf", s.SQNR())
	}
	if s.Cosine() != 1 || s.MaxAbs != 0 || s.MeanAbs() != 0 {
		t.Errorf("cosine %v max %v mean %v, want 1 0 0", s.Cosine(), s.MaxAbs, s.MeanAbs())
	}
}

// TestStatsKnownNoise adds noise of known energy to a sine of known energy:
// a full-period sine of amplitude A has mean square A²/2, and ±σ noise has
// mean square σ², so SQNR = 10·log10(A²/(2σ²)) exactly.
func TestStatsKnownNoise(t *testing.T) {
	cases := []struct {
		name       string
		amp, sigma float64
		batches    int
	}{
		{"40dB", 1, math.Sqrt(0.5) / 100, 1},
		{"20dB split in batches", 3, 3 * math.Sqrt(0.5) / 10, 7},
		{"6dB", 2, 1, 3},
		{"negative SQNR", 1, 4, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const period, periods = 64, 50
			n := period * periods
			x := make([]float32, n)
			y := make([]float32, n)
			for i := range x {
				x[i] = float32(c.amp * math.Sin(2*math.Pi*float64(i)/period))
				e := c.sigma
				if (i/period)%2 == 1 { // whole periods of each sign keep Σx·e at 0
					e = -e
				}
				y[i] = float32(float64(x[i]) + e)
			}
			var s Stats
			step := (n + c.batches - 1) / c.batches
			for lo := 0; lo < n; lo += step {
				hi := min(lo+step, n)
				if err := s.Add(x[lo:hi], y[lo:hi]); err != nil {
					t.Fatal(err)
				}
			}
			want := 10 * math.Log10(c.amp*c.amp/(2*c.sigma*c.sigma))
			if got := float64(s.SQNR()); math.Abs(got-want) > 1e-3 {
				t.Errorf("SQNR = %.6f dB, want %.6f dB", got, want)
			}
			if math.Abs(s.MaxAbs-c.sigma) > 1e-5*c.amp {
				t.Errorf("max abs error = %g, want %g", s.MaxAbs, c.sigma)
			}
			if math.Abs(s.MeanAbs()-c.sigma) > 1e-5*c.amp {
				t.Errorf("mean abs error = %g, want %g", s.MeanAbs(), c.sigma)
			}
			// cos = Σx·y/(‖x‖‖y‖) with Σx·e = 0: ‖x‖/√(‖x‖²+‖e‖²).
			wantCos := math.Sqrt(c.amp * c.amp / 2 / (c.amp*c.amp/2 + c.sigma*c.sigma))
			if math.Abs(s.Cosine()-wantCos) > 1e-5 {
				t.Errorf("cosine = %.7f, want %.7f", s.Cosine(), wantCos)
			}
		})
	}
}

func TestStatsRandomNoiseMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 5000)
	y := make([]float32, len(x))
	var sx, se float64
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 2)
		e := float32(rng.NormFloat64() * 0.05)
		y[i] = x[i] + e
		d := float64(x[i]) - float64(y[i])
		sx += float64(x[i]) * float64(x[i])
		se += d * d
	}
	var s Stats
	if err := s.Add(x, y); err != nil {
		t.Fatal(err)
	}
	want := 20 * math.Log10(math.Sqrt(sx)/math.Sqrt(se))
	if got := float64(s.SQNR()); math.Abs(got-want) > 1e-9 {
		t.Errorf("SQNR = %v, want %v", got, want)
	}
	// σx = 2, σe = 0.05: about 20·log10(40) ≈ 32 dB.
	if got := float64(s.SQNR()); got < 31 || got > 33 {
		t.Errorf("SQNR = %v, want about 32 dB", got)
	}
}

func TestStatsSpecialValues(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name      string
		ref, cand []float32
		sqnr      float64
		nonFinite int64
		cos       float64
	}{
		{"both NaN agree", []float32{nan, 1}, []float32{nan, 1}, math.Inf(1), 0, 1},
		{"same infinity agrees", []float32{inf, 1}, []float32{inf, 1}, math.Inf(1), 0, 1},
		{"NaN on one side", []float32{1, 2}, []float32{nan, 2}, math.Inf(-1), 1, 1},
		{"zero reference, nonzero candidate", []float32{0, 0}, []float32{0, 1}, math.Inf(-1), 0, 0},
		{"all zeros", []float32{0, 0}, []float32{0, 0}, math.Inf(1), 0, 1},
		{"opposite", []float32{1, -1}, []float32{-1, 1}, 10 * math.Log10(2.0/8), 0, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s Stats
			if err := s.Add(c.ref, c.cand); err != nil {
				t.Fatal(err)
			}
			if got := float64(s.SQNR()); got != c.sqnr && math.Abs(got-c.sqnr) > 1e-12 {
				t.Errorf("SQNR = %v, want %v", got, c.sqnr)
			}
			if s.NonFinite != c.nonFinite {
				t.Errorf("NonFinite = %d, want %d", s.NonFinite, c.nonFinite)
			}
			if math.Abs(s.Cosine()-c.cos) > 1e-12 {
				t.Errorf("cosine = %v, want %v", s.Cosine(), c.cos)
			}
		})
	}
	var s Stats
	if err := s.Add([]float32{1}, []float32{1, 2}); err == nil {
		t.Error("length mismatch: no error")
	}
}

// TestStatsFiniteSQNR: a −Inf mask saturated by the quantizer makes SQNR
// −Inf but leaves FiniteSQNR the figure of the finite values.
func TestStatsFiniteSQNR(t *testing.T) {
	ninf := float32(math.Inf(-1))
	cases := []struct {
		name       string
		ref, cand  []float32
		sqnr, fsqn float64
	}{
		{"saturated mask", []float32{ninf, 3, 4}, []float32{-10, 3, 4.5}, math.Inf(-1), 10 * math.Log10(25/0.25)},
		{"only non-finite", []float32{ninf}, []float32{-10}, math.Inf(-1), math.Inf(-1)},
		{"all finite", []float32{3, 4}, []float32{3, 4.5}, 10 * math.Log10(25/0.25), 10 * math.Log10(25/0.25)},
		{"identical", []float32{ninf, 1}, []float32{ninf, 1}, math.Inf(1), math.Inf(1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s Stats
			if err := s.Add(c.ref, c.cand); err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				what      string
				got, want float64
			}{{"SQNR", float64(s.SQNR()), c.sqnr}, {"FiniteSQNR", float64(s.FiniteSQNR()), c.fsqn}} {
				if f.got != f.want && math.Abs(f.got-f.want) > 1e-12 {
					t.Errorf("%s = %v, want %v", f.what, f.got, f.want)
				}
			}
		})
	}
}

func TestStatsMerge(t *testing.T) {
	x := []float32{1, 2, 3, 4, -5, 6}
	y := []float32{1.1, 2, 2.5, 4, -5.5, 6.25}
	var whole, a, b Stats
	if err := whole.Add(x, y); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(x[:2], y[:2]); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(x[2:], y[2:]); err != nil {
		t.Fatal(err)
	}
	a.Merge(b)
	if math.Abs(float64(a.SQNR()-whole.SQNR())) > 1e-12 || a.MaxAbs != whole.MaxAbs || a.N != whole.N {
		t.Errorf("merged %+v, whole %+v", a, whole)
	}
}

func TestDBJSON(t *testing.T) {
	cases := []struct {
		in   DB
		want string
	}{
		{DB(math.Inf(1)), `"inf"`},
		{DB(math.Inf(-1)), `"-inf"`},
		{DB(38.123456), `38.1235`},
		{DB(-3), `-3`},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			b, err := json.Marshal(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.want {
				t.Fatalf("marshal %v = %s, want %s", float64(c.in), b, c.want)
			}
			var back DB
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(back-c.in)) > 1e-4 && !(math.IsInf(float64(back), 0) && back == c.in) {
				t.Errorf("round trip %v → %v", float64(c.in), float64(back))
			}
		})
	}
	var d DB
	if err := json.Unmarshal([]byte(`"infinite"`), &d); err == nil {
		t.Error(`"infinite": no error`)
	}
}

func TestTopK(t *testing.T) {
	// Three rows of six classes. Row 0: same argmax. Row 1: candidate's top-1
	// differs, reference class is its 2nd. Row 2: reference class is the
	// candidate's 6th (last).
	ref := []float32{
		0, 9, 1, 2, 3, 4,
		5, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 7,
	}
	cand := []float32{
		0, 8, 1, 2, 3, 4,
		4, 6, 0, 0, 0, 0,
		5, 4, 3, 2, 1, 0,
	}
	var k TopK
	if err := k.Add(ref, cand, 3, 6, []int64{1, 1, 5}); err != nil {
		t.Fatal(err)
	}
	want := TopK{Samples: 3, Top1: 1, Top5: 2, Labeled: 3, RefCorrect: 2, CandCorrect: 2}
	if k != want {
		t.Errorf("got %+v, want %+v", k, want)
	}
	if err := k.Add(ref, cand, 3, 5, nil); err == nil {
		t.Error("bad shape: no error")
	}
	if err := k.Add(ref, cand, 3, 6, []int64{1}); err == nil {
		t.Error("too few labels: no error")
	}
}

func TestArgmaxTies(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		x    []float32
		want int
	}{
		{[]float32{1, 3, 3}, 1},
		{[]float32{nan, 1, 0}, 1},
		{[]float32{nan, nan}, 0},
	}
	for _, c := range cases {
		if got := argmax(c.x); got != c.want {
			t.Errorf("argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
	if !inTopK([]float32{5, 5, 5, 5, 5, 5}, 4, 5) || inTopK([]float32{5, 5, 5, 5, 5, 5}, 5, 5) {
		t.Error("ties: the lower index ranks higher")
	}
}

// TestNoiseRatio: 10 dB is a noise power a tenth of the signal's, 30 dB a
// thousandth, +Inf none; two independent errors of 30 dB add to 26.99 dB;
// DBOfNoiseRatio undoes NoiseRatio.
func TestNoiseRatio(t *testing.T) {
	for _, c := range []struct {
		db   DB
		want float64
	}{{10, 0.1}, {30, 0.001}, {0, 1}, {-10, 10}, {DB(math.Inf(1)), 0}} {
		if got := c.db.NoiseRatio(); math.Abs(got-c.want) > 1e-12*max(1, c.want) {
			t.Errorf("%v dB: noise ratio %g, want %g", float64(c.db), got, c.want)
		}
		if c.want > 0 {
			if back := DBOfNoiseRatio(c.db.NoiseRatio()); math.Abs(float64(back-c.db)) > 1e-9 {
				t.Errorf("%v dB: back %v", float64(c.db), float64(back))
			}
		}
	}
	if got := DBOfNoiseRatio(DB(30).NoiseRatio() * 2); math.Abs(float64(got)-26.9897) > 1e-4 {
		t.Errorf("two 30 dB errors: %v dB, want 26.99", float64(got))
	}
}

package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestAlgorithmsBlock(t *testing.T) {
	tests := []struct {
		name, text string
		cle, bc    bool
		samples    int
		iterations int
		excluded   string
		highBias   bool
		// gated and gatedMinGain are checked when cle is set.
		gated        bool
		gatedMinGain float64
	}{
		{name: "absent"},
		{name: "true takes the defaults", text: "algorithms:\n  cross_layer_equalization: true\n  bias_correction: true\n",
			cle: true, bc: true, samples: DefaultAlgorithmSamples, iterations: DefaultCLEIterations, gated: true, gatedMinGain: DefaultCLEGatedMinGain},
		{name: "false and null are off", text: "algorithms:\n  cross_layer_equalization: false\n  bias_correction: null\n"},
		{name: "settings", text: "algorithms:\n  bias_correction: {samples: 16, exclude: [\"/head/.*\"]}\n  cross_layer_equalization: {iterations: 3, high_bias_absorption: true}\n",
			cle: true, bc: true, samples: 16, iterations: 3, highBias: true, excluded: "/head/conv", gated: true, gatedMinGain: DefaultCLEGatedMinGain},
		{name: "gated settings", text: "algorithms:\n  cross_layer_equalization: {gated: false, gated_min_gain: 2.5, samples: 8}\n",
			cle: true, iterations: DefaultCLEIterations, gatedMinGain: 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.text), "a.yaml")
			if err != nil {
				t.Fatal(err)
			}
			a := cfg.Algorithms
			if (a.CrossLayerEqualization != nil) != tt.cle || (a.BiasCorrection != nil) != tt.bc {
				t.Fatalf("cle %v bias_correction %v, want %v %v", a.CrossLayerEqualization != nil, a.BiasCorrection != nil, tt.cle, tt.bc)
			}
			if a.Any() != (tt.cle || tt.bc) {
				t.Errorf("Any() = %v", a.Any())
			}
			if tt.bc && a.BiasCorrection.Samples != tt.samples {
				t.Errorf("samples %d, want %d", a.BiasCorrection.Samples, tt.samples)
			}
			if c := a.CrossLayerEqualization; tt.cle && (c.Gated != tt.gated || c.GatedMinGain != tt.gatedMinGain) {
				t.Errorf("gated %v, gated_min_gain %g, want %v, %g", c.Gated, c.GatedMinGain, tt.gated, tt.gatedMinGain)
			}
			if tt.cle && (a.CrossLayerEqualization.Iterations != tt.iterations || a.CrossLayerEqualization.HighBiasAbsorption != tt.highBias) {
				t.Errorf("iterations %d, high_bias_absorption %v, want %d, %v", a.CrossLayerEqualization.Iterations, a.CrossLayerEqualization.HighBiasAbsorption, tt.iterations, tt.highBias)
			}
			if tt.excluded != "" {
				if !a.BiasCorrection.Excludes(tt.excluded) || a.BiasCorrection.Excludes("x"+tt.excluded) {
					t.Errorf("exclude does not match whole node names")
				}
				if a.BiasCorrection.Rule.Line != 2 {
					t.Errorf("rule %v, want line 2", a.BiasCorrection.Rule)
				}
			}
		})
	}
}

func TestGPTQSettings(t *testing.T) {
	tests := []struct {
		name, text string
		samples    int
		damp       float64
		actOrder   bool
	}{
		{name: "defaults", text: "algorithms:\n  gptq: true\n", samples: DefaultAlgorithmSamples, damp: DefaultGPTQDamp, actOrder: true},
		{name: "settings", text: "algorithms:\n  gptq: {samples: 32, damp: 0.1, exclude: [lm_head], act_order: false}\n", samples: 32, damp: 0.1},
		{name: "integer damp", text: "algorithms:\n  gptq: {damp: 1}\n", samples: DefaultAlgorithmSamples, damp: 1, actOrder: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.text), "a.yaml")
			if err != nil {
				t.Fatal(err)
			}
			g := cfg.Algorithms.GPTQ
			if g == nil || g.Samples != tt.samples || g.Damp != tt.damp || g.ActOrder != tt.actOrder || !cfg.Algorithms.Any() {
				t.Fatalf("got %+v, want samples %d damp %g act_order %v", g, tt.samples, tt.damp, tt.actOrder)
			}
		})
	}
	a := &Algorithms{}
	if err := a.EnableAlgorithms([]string{"gptq"}); err != nil || a.GPTQ == nil || a.GPTQ.Damp != DefaultGPTQDamp || !a.GPTQ.ActOrder {
		t.Errorf("--algorithms gptq: %v, %+v", err, a.GPTQ)
	}
}

func TestEnableAlgorithms(t *testing.T) {
	cfg, err := Parse([]byte("algorithms:\n  bias_correction: {samples: 8}\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Algorithms
	if err := a.EnableAlgorithms([]string{"bias_correction", " cross_layer_equalization"}); err != nil {
		t.Fatal(err)
	}
	if a.BiasCorrection.Samples != 8 {
		t.Errorf("the flag replaced the config's settings: samples %d", a.BiasCorrection.Samples)
	}
	if a.CrossLayerEqualization == nil || a.CrossLayerEqualization.Iterations != DefaultCLEIterations {
		t.Errorf("cross_layer_equalization not enabled with its defaults: %+v", a.CrossLayerEqualization)
	}
	err = a.EnableAlgorithms([]string{"bias_corection"})
	if err == nil || !strings.Contains(err.Error(), `did you mean "bias_correction"`) {
		t.Errorf("unknown name: %v", err)
	}
}

func TestAdaRoundSettings(t *testing.T) {
	tests := []struct {
		name, text string
		want       AdaRound
	}{
		{name: "defaults", text: "algorithms:\n  adaround: true\n", want: AdaRound{Samples: DefaultAlgorithmSamples, Rows: DefaultAdaRoundRows,
			Iterations: DefaultAdaRoundIterations, LearningRate: DefaultAdaRoundLearningRate,
			Regularization: DefaultAdaRoundRegularization, Warmup: DefaultAdaRoundWarmup, BetaStart: DefaultAdaRoundBetaStart, BetaEnd: DefaultAdaRoundBetaEnd}},
		{name: "settings", text: "algorithms:\n  adaround: {samples: 8, rows: 100, iterations: 7, learning_rate: 0.5, regularization: 1, warmup: 0, beta_start: 10, beta_end: 10}\n",
			want: AdaRound{Samples: 8, Rows: 100, Iterations: 7, LearningRate: 0.5, Regularization: 1, Warmup: 0, BetaStart: 10, BetaEnd: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.text), "a.yaml")
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Algorithms.AdaRound
			if got == nil || !cfg.Algorithms.Any() {
				t.Fatal("adaround is off")
			}
			got.AlgorithmCommon = AlgorithmCommon{}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
	a := &Algorithms{}
	if err := a.EnableAlgorithms([]string{"adaround"}); err != nil || a.AdaRound == nil || a.AdaRound.Iterations != DefaultAdaRoundIterations {
		t.Errorf("--algorithms adaround: %v, %+v", err, a.AdaRound)
	}
}

func TestSmoothQuantSettings(t *testing.T) {
	for _, tt := range []struct {
		text    string
		samples int
		alpha   float64
	}{
		{"algorithms:\n  smoothquant: true\n", DefaultAlgorithmSamples, DefaultSmoothQuantAlpha},
		{"algorithms:\n  smoothquant: {alpha: 0.8, samples: 4, exclude: [lm_head]}\n", 4, 0.8},
	} {
		cfg, err := Parse([]byte(tt.text), "a.yaml")
		if err != nil {
			t.Fatal(err)
		}
		s := cfg.Algorithms.SmoothQuant
		if s == nil || s.Samples != tt.samples || s.Alpha != tt.alpha || !cfg.Algorithms.Any() {
			t.Errorf("%q: got %+v", tt.text, s)
		}
	}
	a := &Algorithms{}
	if err := a.EnableAlgorithms([]string{"smoothquant"}); err != nil || a.SmoothQuant == nil || a.SmoothQuant.Alpha != DefaultSmoothQuantAlpha {
		t.Errorf("--algorithms smoothquant: %v, %+v", err, a.SmoothQuant)
	}
}

func TestAWQSettings(t *testing.T) {
	for _, tt := range []struct {
		text          string
		samples, grid int
		excluded      string
	}{
		{"algorithms:\n  awq: true\n", DefaultAlgorithmSamples, DefaultAWQGrid, ""},
		{"algorithms:\n  awq: {grid: 10, samples: 4, exclude: [lm_head]}\n", 4, 10, "lm_head"},
	} {
		cfg, err := Parse([]byte(tt.text), "a.yaml")
		if err != nil {
			t.Fatal(err)
		}
		a := cfg.Algorithms.AWQ
		if a == nil || a.Samples != tt.samples || a.Grid != tt.grid || !cfg.Algorithms.Any() {
			t.Errorf("%q: got %+v", tt.text, a)
			continue
		}
		if tt.excluded != "" && !a.Excludes(tt.excluded) {
			t.Errorf("%q: %q not excluded", tt.text, tt.excluded)
		}
	}
	a := &Algorithms{}
	if err := a.EnableAlgorithms([]string{"awq"}); err != nil || a.AWQ == nil || a.AWQ.Grid != DefaultAWQGrid {
		t.Errorf("--algorithms awq: %v, %+v", err, a.AWQ)
	}
}

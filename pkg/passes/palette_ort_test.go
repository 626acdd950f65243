//go:build ort

package passes

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/calibrate"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/runtime/ort"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// paletteConfigs are the palettizations the oracle writes: 2 bits per
// tensor, 4 bits per group of 8 output channels with per-channel scales,
// 6 bits with an int8 LUT, and 2-vectors at 4 bits; every weight above 0
// elements.
var paletteConfigs = []struct{ name, yaml string }{
	{"2bit", "n_bits: 2, weight_threshold: 0"},
	{"4bit-grouped-scaled", "n_bits: 4, granularity: per_grouped_channel, group_size: 8, enable_per_channel_scale: true, weight_threshold: 0"},
	{"6bit-int8-lut", "n_bits: 6, lut_dtype: int8, weight_threshold: 0"},
	{"4bit-vectors", "n_bits: 4, cluster_dim: 2, weight_threshold: 0"},
}

func paletteConfig(t *testing.T, fields, quant string) *config.Config {
	t.Helper()
	text := "kmeans_palettization_config:\n  global_config: {" + fields + "}\n"
	if quant != "" {
		text += "quantization_config: {preset: " + quant + "}\n"
	}
	cfg, err := config.Parse([]byte(text), "palette.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPaletteORTOracle: palettized models of the test models and every
// shared model load and run in ONNX Runtime and agree with the built-in
// engine to float rounding; the SQNR against the float model is logged.
func TestPaletteORTOracle(t *testing.T) {
	lib := ortLibrary(t)
	check := func(t *testing.T, m *onnxgraph.Model, input map[string]*tensor.Tensor, fields string) {
		cfg := paletteConfig(t, fields, "")
		u := &Unit{Model: m, Config: cfg.Quant, Palette: cfg.Palette, Write: finalize.Options{Threads: 2}}
		if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(u.Result.Palettes) == 0 {
			// Vectors need channel counts that cluster_dim divides.
			if !strings.Contains(fields, "cluster_dim") {
				t.Fatal("no weight palettized")
			}
			t.Skip("no weight has channels that cluster_dim divides")
		}
		qm := u.Result.Model
		ref := enginetest.Run(t, u.Model, input)
		goOut := enginetest.Run(t, qm, input)
		for _, level := range []ort.Optimization{ort.OptimizeNone, ort.OptimizeAll} {
			got := runORT(t, lib, qm, input, ort.SessionOptions{IntraOpThreads: 1, Optimization: level})
			for n, g := range goOut {
				gf, err := g.AsFloat32()
				if err != nil {
					continue // an integer output
				}
				of, _ := got[n].AsFloat32()
				if i, tol, ok := floatOutputsAgree(gf, of); !ok {
					t.Errorf("output %q (ORT optimization %v): ORT and the built-in engine differ at element %d (%g vs %g; tolerance %.3g)", n, level, i, of[i], gf[i], tol)
				}
				if level == ort.OptimizeNone {
					rf, _ := ref[n].AsFloat32()
					t.Logf("%s: %d weights palettized, SQNR vs float %.1f dB", n, len(u.Result.Palettes), sqnr(rf, gf))
				}
			}
		}
	}
	for _, c := range oracleCases(t) {
		for _, pc := range paletteConfigs {
			t.Run(c.name+"/"+pc.name, func(t *testing.T) {
				m := c.model(t)
				check(t, m, c.input(m), pc.yaml)
			})
		}
	}
	t.Run("shared", func(t *testing.T) {
		dir, names := sharedModelNames(t)
		for _, name := range names {
			s := loadShared(t, dir, name, false)
			for _, pc := range paletteConfigs[:3] {
				t.Run(name+"/"+pc.name, func(t *testing.T) {
					isShortSkip(t, fmt.Sprintf("shared model %s", name))
					n := fixedBatch(s.model, 2)
					for _, v := range s.ref {
						n = min(n, v.Shape[0])
					}
					check(t, s.model, batchOf(s.ref, 0, n), pc.yaml)
				})
			}
		}
	})
}

// TestPaletteJoint: a config with both keys palettizes the weights and
// quantizes the activations (W-LUT A8): no weight is both, the activation
// Q/DQ pairs are there, and ONNX Runtime agrees with the built-in engine
// within one quantization step of the outputs.
func TestPaletteJoint(t *testing.T) {
	lib := ortLibrary(t)
	for _, c := range oracleCases(t) {
		t.Run(c.name, func(t *testing.T) {
			m := c.model(t)
			cfg := paletteConfig(t, "n_bits: 4, granularity: per_grouped_channel, group_size: 4, weight_threshold: 0", "w8a8")
			u := &Unit{Model: m, Config: cfg.Quant, Palette: cfg.Palette, Write: finalize.Options{Threads: 2},
				Calibrate: EngineCalibrator("go", runtime.Options{}, newMemSource(c.calib(m), 4), calibrate.Options{BatchSize: fixedBatch(m, 2)}, nil)}
			if _, err := Run(context.Background(), u, RunOptions{}); err != nil {
				t.Fatal(err)
			}
			pal := map[string]bool{}
			for _, p := range u.Result.Palettes {
				pal[p.Value] = true
			}
			acts := 0
			for _, tp := range u.Result.Tensors {
				if pal[tp.Value] {
					t.Errorf("%s is palettized and quantized", tp.Value)
				}
				if tp.Role == Activation {
					acts++
				}
			}
			if len(pal) == 0 || acts == 0 {
				t.Fatalf("%d palettized weights, %d quantized activations", len(pal), acts)
			}
			input := c.input(m)
			qm := u.Result.Model
			goOut := enginetest.Run(t, qm, input)
			exact := runORT(t, lib, qm, input, ort.SessionOptions{IntraOpThreads: 1, Optimization: ort.OptimizeNone})
			for n, g := range goOut {
				gf, err := g.AsFloat32()
				if err != nil {
					continue
				}
				ef, _ := exact[n].AsFloat32()
				step := outputStep(qm, n)
				if a := compareOutputs(gf, ef, step); step > 0 && a.overOne > 0.01 {
					t.Errorf("output %q: %.2f%% of elements differ by more than one step (%.3g) between ORT and the built-in engine", n, 100*a.overOne, step)
				}
			}
		})
	}
}

//go:build ort

package passes

import (
	"context"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/runtime"
)

// TestAlgorithmsKeepPlanSpecs: the algorithms that run in prepare
// (equalization, SmoothQuant, AWQ) change weights, never which values the
// plan quantizes nor with which spec or sharing: the accuracy search checks
// that a candidate's config is expressible by preparing it without them.
// On every shared model, under accurate (equalization and SmoothQuant) and
// w4-accurate with AWQ, 8 calibration samples.
func TestAlgorithmsKeepPlanSpecs(t *testing.T) {
	dir, names := sharedModelNames(t)
	for _, preset := range []string{"accurate", "w4-accurate"} {
		cfg, err := config.PresetConfig(preset)
		if err != nil {
			t.Fatal(err)
		}
		if preset == "w4-accurate" {
			if err := cfg.Algorithms.EnableAlgorithms([]string{"awq"}); err != nil {
				t.Fatal(err)
			}
		}
		rescaled := 0
		for _, name := range names {
			t.Run(preset+"/"+name, func(t *testing.T) {
				sm := loadShared(t, dir, name, false)
				prepared := func(alg *config.Algorithms) *Unit {
					u := &Unit{Model: sm.model, Config: cfg.Quant, Algorithms: alg,
						Data: &AlgorithmData{Engine: "go", Runtime: runtime.Options{Threads: 1}, Source: newMemSource(sm.calib, 8), BatchSize: fixedBatch(sm.model, 4)}}
					if _, err := Run(context.Background(), u, RunOptions{Until: "prepare"}); err != nil {
						t.Fatal(err)
					}
					return u
				}
				withUnit := prepared(cfg.Algorithms)
				rescaled += len(withUnit.rescaled)
				with, without := withUnit.Plan, prepared(nil).Plan
				if len(with.Tensors) != len(without.Tensors) {
					t.Fatalf("%d tensors planned with the algorithms, %d without", len(with.Tensors), len(without.Tensors))
				}
				for _, w := range with.Tensors {
					o := without.Tensor(w.Value)
					switch {
					case o == nil:
						t.Errorf("%q is planned only with the algorithms", w.Value)
					case !o.Spec.Equal(w.Spec) || o.SharedWith != w.SharedWith || o.Role != w.Role:
						t.Errorf("%q: %s shared with %q with the algorithms, %s shared with %q without", w.Value, w.SpecString(), w.SharedWith, o.SpecString(), o.SharedWith)
					}
				}
			})
		}
		if rescaled == 0 {
			t.Errorf("%s: no algorithm changed a weight on any model: the test proves nothing", preset)
		}
	}
}

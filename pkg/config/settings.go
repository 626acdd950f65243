package config

import (
	"fmt"
	"strings"

	"github.com/spf13/viper"
)

// Settings are the tool settings a command runs with, after layering.
type Settings struct {
	Model     string
	Output    string
	Report    string
	Engine    string
	Threads   int
	Data      []string
	Samples   int
	BatchSize int
	Preset    string
	// Target is the deployment target (config.Targets); "" when none is
	// given (DefaultTarget applies).
	Target string
	// Images is the config file's calibration.images block (files only:
	// it has no flag or environment form).
	Images *Images
}

// Overrides are the tool settings given on the command line, which win
// over the environment and the config file; a nil field was not given.
//
// Setting keys, their flags and their environment variables:
//
//	key                     flag          environment
//	model                   --model       COREAIQ_MODEL
//	output                  -o/--output   COREAIQ_OUTPUT
//	report                  --report      COREAIQ_REPORT
//	engine                  --engine      COREAIQ_ENGINE
//	threads                 --threads     COREAIQ_THREADS
//	calibration.data        --data        COREAIQ_CALIBRATION_DATA (space-separated)
//	calibration.samples     --samples     COREAIQ_CALIBRATION_SAMPLES
//	calibration.batch_size  --batch-size  COREAIQ_CALIBRATION_BATCH_SIZE
//	preset                  --preset      COREAIQ_PRESET
//	target                  --target      COREAIQ_TARGET
type Overrides struct {
	Model, Output, Report, Engine, Preset, Target *string
	Threads, Samples, BatchSize                   *int
	Data                                          []string
}

// set returns the given settings by key.
func (o Overrides) set() map[string]any {
	m := map[string]any{}
	for key, p := range map[string]*string{"model": o.Model, "output": o.Output, "report": o.Report, "engine": o.Engine, "preset": o.Preset, "target": o.Target} {
		if p != nil {
			m[key] = *p
		}
	}
	for key, p := range map[string]*int{"threads": o.Threads, "calibration.samples": o.Samples, "calibration.batch_size": o.BatchSize} {
		if p != nil {
			m[key] = *p
		}
	}
	if o.Data != nil {
		m["calibration.data"] = o.Data
	}
	return m
}

// Defaults of the tool settings.
const (
	DefaultEngine    = "go"
	DefaultSamples   = 256
	DefaultBatchSize = 8
)

// Settings layers the tool settings with viper, highest first: the
// overrides given on the command line, a COREAIQ_* environment variable, the
// config file (c may be nil), the built-in default. Only scalar settings
// pass through viper: it lower-cases keys, so op types, node names and
// module paths never do.
//
// Paths from the file are relative to the config file's directory; paths
// from flags and the environment are relative to the working directory.
func (c *Config) Settings(o Overrides) (Settings, error) {
	v := viper.New()
	v.SetEnvPrefix("COREAIQ")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	v.SetDefault("engine", DefaultEngine)
	v.SetDefault("calibration.samples", DefaultSamples)
	v.SetDefault("calibration.batch_size", DefaultBatchSize)
	for _, k := range []string{"model", "output", "report", "preset", "target", "threads", "calibration.data"} {
		// Every key needs a default for AutomaticEnv to see it under Get.
		v.SetDefault(k, nil)
	}
	if c != nil && len(c.FileSettings.set) > 0 {
		if err := v.MergeConfigMap(c.FileSettings.set); err != nil {
			return Settings{}, fmt.Errorf("config %s: %w", c.File, err)
		}
	}
	for key, val := range o.set() {
		v.Set(key, val)
	}
	s := Settings{
		Model:     v.GetString("model"),
		Output:    v.GetString("output"),
		Report:    v.GetString("report"),
		Engine:    v.GetString("engine"),
		Preset:    v.GetString("preset"),
		Target:    v.GetString("target"),
		Data:      v.GetStringSlice("calibration.data"),
		Threads:   v.GetInt("threads"),
		Samples:   v.GetInt("calibration.samples"),
		BatchSize: v.GetInt("calibration.batch_size"),
	}
	if c != nil {
		s.Images = c.FileSettings.Images
	}
	switch {
	case s.Engine != "go" && s.Engine != "ort":
		return s, fmt.Errorf("engine %q: want go or ort", s.Engine)
	case s.Threads < 0:
		return s, fmt.Errorf("threads must be 0 (all cores) or more, got %d", s.Threads)
	case s.Samples <= 0:
		return s, fmt.Errorf("calibration samples must be positive, got %d", s.Samples)
	case s.BatchSize <= 0:
		return s, fmt.Errorf("calibration batch size must be positive, got %d", s.BatchSize)
	}
	if s.Target != "" {
		if _, err := LookupTarget(s.Target); err != nil {
			return s, err
		}
	}
	if s.Preset != "" {
		if _, err := PresetYAML(s.Preset); err != nil {
			return s, err
		}
	}
	return s, nil
}

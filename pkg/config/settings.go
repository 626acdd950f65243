package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
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
	// Images is the config file's calibration.images block (files only:
	// it has no flag or environment form).
	Images *Images
}

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
var settingFlags = map[string]string{
	"model":      "model",
	"output":     "output",
	"report":     "report",
	"engine":     "engine",
	"threads":    "threads",
	"data":       "calibration.data",
	"samples":    "calibration.samples",
	"batch-size": "calibration.batch_size",
	"preset":     "preset",
}

// Defaults of the tool settings.
const (
	DefaultEngine    = "go"
	DefaultSamples   = 256
	DefaultBatchSize = 8
)

// Settings layers the tool settings with viper, highest first: a flag the
// user set in flags (nil for none), a COREAIQ_* environment variable, the
// config file (c may be nil), the built-in default. Only scalar settings
// pass through viper: it lower-cases keys, so op types, node names and
// module paths never do.
//
// Paths from the file are relative to the config file's directory; paths
// from flags and the environment are relative to the working directory.
func (c *Config) Settings(flags *pflag.FlagSet) (Settings, error) {
	v := viper.New()
	v.SetEnvPrefix("COREAIQ")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	v.SetDefault("engine", DefaultEngine)
	v.SetDefault("calibration.samples", DefaultSamples)
	v.SetDefault("calibration.batch_size", DefaultBatchSize)
	for _, k := range []string{"model", "output", "report", "preset", "threads", "calibration.data"} {
		// Every key needs a default for AutomaticEnv to see it under Get.
		v.SetDefault(k, nil)
	}
	if c != nil && len(c.FileSettings.set) > 0 {
		if err := v.MergeConfigMap(c.FileSettings.set); err != nil {
			return Settings{}, fmt.Errorf("config %s: %w", c.File, err)
		}
	}
	if flags != nil {
		for _, flag := range sortedKeys(settingFlags) {
			if f := flags.Lookup(flag); f != nil {
				if err := v.BindPFlag(settingFlags[flag], f); err != nil {
					return Settings{}, err
				}
			}
		}
	}
	s := Settings{
		Model:     v.GetString("model"),
		Output:    v.GetString("output"),
		Report:    v.GetString("report"),
		Engine:    v.GetString("engine"),
		Preset:    v.GetString("preset"),
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
	if s.Preset != "" {
		if _, err := PresetYAML(s.Preset); err != nil {
			return s, err
		}
	}
	return s, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

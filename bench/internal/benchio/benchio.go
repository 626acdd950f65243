// Package benchio holds what the benchmark programs share: where the model
// folders are, how their data files are named, and the median of timings.
package benchio

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultModels is the models folder: COREAIQ_SHARED_MODELS, else
// ../shared/models from the repository root.
func DefaultModels() string {
	if dir := os.Getenv("COREAIQ_SHARED_MODELS"); dir != "" {
		return dir
	}
	return filepath.Join("..", "shared", "models")
}

// DataFile is the name of an input's data file in a model folder,
// "<prefix>_<input>.npy", with "/" and ":" in the input name made "_".
func DataFile(dir, prefix, input string) string {
	return filepath.Join(dir, prefix+"_"+strings.NewReplacer("/", "_", ":", "_").Replace(input)+".npy")
}

// Median is the median of xs (the mean of the middle two for an even count).
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

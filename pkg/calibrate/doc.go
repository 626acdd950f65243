// Package calibrate watches activations while the float model runs on
// calibration data and turns what it saw into quantization ranges.
//
// Observers are streaming and constant in memory: a min/max observer keeps
// one (min, max) pair per channel, a histogram observer keeps a fixed number
// of bins. NaN and ±Inf are skipped and counted (DESIGN §5). Observers merge
// across shards: exactly for min/max and histograms, by a documented rule for
// moving averages (see Observer.Merge).
//
// Histograms have bins of power-of-two width anchored at 0 (see Histogram),
// so that the histogram of a data set is a function of the data alone: the
// same whatever the batch size, the batch order or the sharding.
package calibrate

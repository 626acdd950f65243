package calibrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// StatsVersion is the version of the stats file format.
const StatsVersion = 1

// Stats is what calibration saw: one observer state per planned tensor.
// It serialises to a versioned JSON document.
type Stats struct {
	Version int `json:"version"`
	// ModelSHA256 is the hex SHA-256 of the model file calibrated.
	ModelSHA256 string `json:"model_sha256"`
	// PlanSHA256 is the hex SHA-256 of the plan prepare made from the
	// model (the resolved config with the weights' qparams, which the
	// algorithms that run before calibration change), "" for stats that
	// do not record it.
	PlanSHA256 string `json:"plan_sha256,omitempty"`
	// RandomData marks stats made from random inputs rather than real data.
	RandomData bool `json:"random_data"`
	// Samples and Batches count what was run (summed over merged shards).
	Samples int64 `json:"samples"`
	Batches int64 `json:"batches"`
	// Tensors is sorted by name.
	Tensors []*Observer `json:"tensors"`
}

// Tensor returns the observer of a tensor, or nil.
func (s *Stats) Tensor(name string) *Observer {
	i, ok := slices.BinarySearchFunc(s.Tensors, name, func(o *Observer, n string) int { return strings.Compare(o.Name, n) })
	if !ok {
		return nil
	}
	return s.Tensors[i]
}

func (s *Stats) sort() {
	slices.SortFunc(s.Tensors, func(a, b *Observer) int { return strings.Compare(a.Name, b.Name) })
}

// CheckModel refuses stats made from another model.
func (s *Stats) CheckModel(sha256 string) error {
	if s.ModelSHA256 != sha256 {
		return fmt.Errorf("the stats were computed for the model with sha256 %s, not this one (sha256 %s): re-run calibrate on this model", short(s.ModelSHA256), short(sha256))
	}
	return nil
}

// CheckPlan refuses stats calibrated on another plan of the model: the
// config, preset, target, prepare flags or algorithms differ, or the
// calibration data the algorithms that run before calibration read.
// Stats that record no plan pass.
func (s *Stats) CheckPlan(sha256 string) error {
	if s.PlanSHA256 != "" && s.PlanSHA256 != sha256 {
		return fmt.Errorf("the stats were calibrated on another plan of this model (plan sha256 %s, this run's %s): give finalize the config, preset, target, prepare flags, --algorithms and --data that calibrate had", short(s.PlanSHA256), short(sha256))
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	if h == "" {
		return "(none)"
	}
	return h
}

// Write writes the document: the header fields indented, then one compact
// line per tensor so that histograms do not take thousands of lines.
// Trailing empty histogram bins are trimmed.
func (s *Stats) Write(w io.Writer) error {
	s.sort()
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"version\": %d,\n  \"model_sha256\": %q,\n", s.Version, s.ModelSHA256)
	if s.PlanSHA256 != "" {
		fmt.Fprintf(&b, "  \"plan_sha256\": %q,\n", s.PlanSHA256)
	}
	fmt.Fprintf(&b, "  \"random_data\": %t,\n  \"samples\": %d,\n  \"batches\": %d,\n  \"tensors\": [",
		s.RandomData, s.Samples, s.Batches)
	for i, o := range s.Tensors {
		c := o
		if o.Histogram != nil {
			c = o.clone()
			n := len(c.Histogram.Counts)
			for n > 0 && c.Histogram.Counts[n-1] == 0 {
				n--
			}
			c.Histogram.Counts = c.Histogram.Counts[:n]
		}
		line, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("stats: tensor %q: %w", o.Name, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		b.Write(line)
	}
	if len(s.Tensors) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("]\n}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// WriteFile writes the document to path atomically (a temporary file in
// the same directory, renamed on success).
func (s *Stats) WriteFile(path string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = s.Write(f); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// Read reads and validates a stats document.
func Read(r io.Reader) (*Stats, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Stats
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if s.Version != StatsVersion {
		return nil, fmt.Errorf("stats: version %d, this coreaiq reads version %d", s.Version, StatsVersion)
	}
	for i, o := range s.Tensors {
		if o == nil || o.Name == "" {
			return nil, fmt.Errorf("stats: tensor %d has no name", i)
		}
		if err := o.validate(); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		if i > 0 && s.Tensors[i-1].Name >= o.Name {
			return nil, fmt.Errorf("stats: tensors not sorted or duplicated at %q", o.Name)
		}
	}
	return &s, nil
}

// ReadFile reads a stats file; errors name the file.
func ReadFile(path string) (*Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// validate checks a state read from a file.
func (o *Observer) validate() error {
	switch o.Kind {
	case KindMinMax, KindGlobalMinMax, KindMovingAverage, KindHistogram, KindFixed, KindMoments:
	default:
		return fmt.Errorf("tensor %q: unknown observer %q", o.Name, o.Kind)
	}
	if len(o.Min) != len(o.Max) {
		return fmt.Errorf("tensor %q: %d minimums, %d maximums", o.Name, len(o.Min), len(o.Max))
	}
	if o.Kind == KindMovingAverage && (len(o.AvgMin) != len(o.Min) || len(o.AvgMax) != len(o.Min)) {
		return fmt.Errorf("tensor %q: moving averages do not match the %d channels", o.Name, len(o.Min))
	}
	if o.SumSquares != nil && (o.MomentAxis == nil || o.MomentCount < 0) {
		return fmt.Errorf("tensor %q: sums of squares without a moment axis or count", o.Name)
	}
	if o.Kind == KindFixed && o.Fixed == nil {
		return fmt.Errorf("tensor %q: fixed observer without a range", o.Name)
	}
	if o.Kind == KindHistogram {
		h := o.Histogram
		if h == nil {
			return fmt.Errorf("tensor %q: histogram observer without a histogram", o.Name)
		}
		if h.Bins < 1 || h.Bins > 1<<24 || len(h.Counts) > h.Bins {
			return fmt.Errorf("tensor %q: histogram of %d bins with %d counts", o.Name, h.Bins, len(h.Counts))
		}
		if h.Exp < MinHistogramExp || h.Exp > 200 || h.Start <= -maxBinIndex || h.Start >= maxBinIndex {
			return fmt.Errorf("tensor %q: histogram bins 2^%d from %d out of range", o.Name, h.Exp, h.Start)
		}
		h.Counts = append(h.Counts, make([]uint64, h.Bins-len(h.Counts))...)
		var total uint64
		for _, c := range h.Counts {
			total += c
		}
		if total != h.Total {
			return fmt.Errorf("tensor %q: histogram counts sum to %d, total says %d", o.Name, total, h.Total)
		}
	}
	return nil
}

// Merge combines stats of shards of the same calibration: the model must be
// the same, and so must the set of tensors and their observers. Min/max and
// histograms merge exactly; moving averages as Observer.Merge documents. The
// inputs are not modified.
func Merge(stats ...*Stats) (*Stats, error) {
	if len(stats) == 0 {
		return nil, fmt.Errorf("stats merge: nothing to merge")
	}
	out := &Stats{Version: StatsVersion, ModelSHA256: stats[0].ModelSHA256, PlanSHA256: stats[0].PlanSHA256}
	for _, o := range stats[0].Tensors {
		out.Tensors = append(out.Tensors, o.clone())
	}
	out.sort()
	for k, s := range stats {
		if s.ModelSHA256 != out.ModelSHA256 {
			return nil, fmt.Errorf("stats merge: input %d was computed for model sha256 %s, input 1 for %s", k+1, short(s.ModelSHA256), short(out.ModelSHA256))
		}
		if s.PlanSHA256 != out.PlanSHA256 {
			return nil, fmt.Errorf("stats merge: input %d was calibrated on plan sha256 %s, input 1 on %s: calibrate every shard with the same settings and data", k+1, short(s.PlanSHA256), short(out.PlanSHA256))
		}
		out.RandomData = out.RandomData || s.RandomData
		out.Samples += s.Samples
		out.Batches += s.Batches
		if k == 0 {
			continue
		}
		if len(s.Tensors) != len(out.Tensors) {
			return nil, fmt.Errorf("stats merge: input %d has %d tensors, input 1 has %d", k+1, len(s.Tensors), len(out.Tensors))
		}
		for _, o := range s.Tensors {
			dst := out.Tensor(o.Name)
			if dst == nil {
				return nil, fmt.Errorf("stats merge: tensor %q of input %d is not in input 1", o.Name, k+1)
			}
			if err := dst.Merge(o); err != nil {
				return nil, fmt.Errorf("stats merge: input %d: %w", k+1, err)
			}
		}
	}
	return out, nil
}

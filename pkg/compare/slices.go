package compare

import (
	"fmt"
	"strconv"
	"strings"
)

// Slice names a range of indices along one axis of an output, compared on
// its own: a detector's output rows hold boxes, objectness and class
// scores side by side, and their SQNRs differ by far more than the whole
// output's shows (the boxes carry most of the signal's energy).
type Slice struct {
	Output string `json:"-"`
	// Axis is the axis the range is on; negative counts from the end.
	Axis int    `json:"axis"`
	Name string `json:"name"`
	// From and To are the range [From, To) of indices along Axis.
	From int `json:"from"`
	To   int `json:"to"`
}

// SliceReport compares one Slice of an output.
type SliceReport struct {
	Slice
	SQNR         DB      `json:"sqnr_db"`
	Cosine       float64 `json:"cosine"`
	MaxAbsError  float64 `json:"max_abs_error"`
	MeanAbsError float64 `json:"mean_abs_error"`
	NonFinite    int64   `json:"non_finite,omitempty"`

	stats Stats
}

// ParseSlices reads one --slice value, OUTPUT:AXIS:NAME=FROM-TO[,...]: the
// named ranges [FROM, TO) of indices along AXIS of the output OUTPUT (the
// reference model's name; the output name may itself hold colons).
func ParseSlices(s string) ([]Slice, error) {
	bad := func(why string) error {
		return fmt.Errorf("slice %q: %s (want OUTPUT:AXIS:NAME=FROM-TO[,NAME=FROM-TO...], e.g. output:2:boxes=0-4,scores=4-85)", s, why)
	}
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return nil, bad("no axis")
	}
	head, ranges := s[:i], s[i+1:]
	j := strings.LastIndex(head, ":")
	if j <= 0 {
		return nil, bad("no output name")
	}
	out := head[:j]
	axis, err := strconv.Atoi(head[j+1:])
	if err != nil {
		return nil, bad(fmt.Sprintf("axis %q is not an integer", head[j+1:]))
	}
	var slices []Slice
	seen := map[string]bool{}
	for _, part := range strings.Split(ranges, ",") {
		name, rng, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, bad(fmt.Sprintf("%q has no NAME=", part))
		}
		if seen[name] {
			return nil, bad(fmt.Sprintf("name %q given twice", name))
		}
		seen[name] = true
		a, b, ok := strings.Cut(rng, "-")
		from, errA := strconv.Atoi(a)
		to, errB := strconv.Atoi(b)
		if !ok || errA != nil || errB != nil || from < 0 || to <= from {
			return nil, bad(fmt.Sprintf("range %q of %q is not FROM-TO with 0 <= FROM < TO", rng, name))
		}
		slices = append(slices, Slice{Output: out, Axis: axis, Name: name, From: from, To: to})
	}
	return slices, nil
}

// addSlices accumulates the output's slices from one batch's values x
// (reference) and y (candidate) of the given shape.
func (o *OutputReport) addSlices(x, y []float32, shape []int) error {
	for i := range o.Slices {
		sl := &o.Slices[i]
		axis := sl.Axis
		if axis < 0 {
			axis += len(shape)
		}
		if axis < 0 || axis >= len(shape) {
			return fmt.Errorf("slice %q: axis %d is out of range for shape %v", sl.Name, sl.Axis, shape)
		}
		if sl.To > shape[axis] {
			return fmt.Errorf("slice %q: range %d-%d is past axis %d's length %d", sl.Name, sl.From, sl.To, sl.Axis, shape[axis])
		}
		inner := 1
		for _, d := range shape[axis+1:] {
			inner *= d
		}
		outer := len(x) / (inner * shape[axis])
		width := (sl.To - sl.From) * inner
		for b := range outer {
			at := (b*shape[axis] + sl.From) * inner
			if err := sl.stats.Add(x[at:at+width], y[at:at+width]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sl *SliceReport) finish() {
	s := &sl.stats
	sl.SQNR, sl.Cosine, sl.MaxAbsError, sl.MeanAbsError, sl.NonFinite = s.SQNR(), s.Cosine(), s.MaxAbs, s.MeanAbs(), s.NonFinite
}

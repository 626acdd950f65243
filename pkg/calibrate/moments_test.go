package calibrate

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestSecondMoments: a moments-only observer and a min/max observer that
// also keeps moments give E[x²] per channel of hand-computed batches;
// shards merge to the one-pass figure; the state survives a stats file.
func TestSecondMoments(t *testing.T) {
	batch := func(vals ...float32) *tensor.Tensor { // [1, 2 channels, 2]
		x := tensor.New(tensor.Float, 1, 2, 2)
		copy(x.Float32s(), vals)
		return x
	}
	b1 := batch(1, 2, 3, float32(math.Inf(1)))
	b2 := batch(-1, 0, 1, 1)
	// Channel 0: 1, 4, 1, 0 → 6/4; channel 1: 9, (Inf ignored), 1, 1 → 11/4.
	want := []float32{1.5, 2.75}
	axis := 1
	for _, tt := range []TensorToObserve{
		{Name: "x", Moments: &axis},
		{Name: "x", Moments: &axis, Spec: &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric,
			Calculator: spec.Calculator{Type: spec.Static}}},
	} {
		o, err := NewObserver(tt)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []*tensor.Tensor{b1, b2} {
			if err := o.Observe(b); err != nil {
				t.Fatal(err)
			}
		}
		if got := o.SecondMoments(); !slices.Equal(got, want) {
			t.Errorf("%s: moments %v, want %v", o.Kind, got, want)
		}
		s1, _ := NewObserver(tt)
		s2, _ := NewObserver(tt)
		_ = s1.Observe(b1)
		_ = s2.Observe(b2)
		if err := s1.Merge(s2); err != nil {
			t.Fatal(err)
		}
		if got := s1.SecondMoments(); !slices.Equal(got, want) {
			t.Errorf("%s: merged shards give %v, want %v", o.Kind, got, want)
		}
		var buf bytes.Buffer
		if err := (&Stats{Version: StatsVersion, Tensors: []*Observer{o}}).Write(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := Read(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := back.Tensor("x").SecondMoments(); !slices.Equal(got, want) {
			t.Errorf("%s: read back %v, want %v", o.Kind, got, want)
		}
	}
}

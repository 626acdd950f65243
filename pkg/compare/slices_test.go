package compare

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
)

func TestParseSlices(t *testing.T) {
	cases := []struct {
		in   string
		want []Slice
		bad  bool
	}{
		{in: "output:2:boxes=0-4,scores=4-85", want: []Slice{{Output: "output", Axis: 2, Name: "boxes", From: 0, To: 4}, {Output: "output", Axis: 2, Name: "scores", From: 4, To: 85}}},
		{in: "a:b:-1:x=1-2", want: []Slice{{Output: "a:b", Axis: -1, Name: "x", From: 1, To: 2}}},
		{in: "output:2", bad: true},
		{in: ":2:x=0-1", bad: true},
		{in: "output:two:x=0-1", bad: true},
		{in: "output:2:x0-1", bad: true},
		{in: "output:2:x=3-1", bad: true},
		{in: "output:2:x=-1-2", bad: true},
		{in: "output:2:x=0-1,x=1-2", bad: true},
	}
	for _, c := range cases {
		got, err := ParseSlices(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("%q: want an error, got %+v", c.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestSlicesSQNR perturbs classes 3 to 5 of the CNN's logits only: the
// slice of classes 0 to 2 compares exactly, the slice of 3 to 5 has the
// SQNR of those classes alone, computed here from the reference's values,
// and axis -1 names the same axis as 1.
func TestSlicesSQNR(t *testing.T) {
	ref := load(t, testmodels.CNN().Model)
	refSess := open(t, ref)
	data := randomBatches(3, 4, 5)
	noise := make([]float32, 10)
	var sumN2 float64
	for c := 3; c < 6; c++ {
		noise[c] = 0.05 * float32(c-2)
		sumN2 += float64(noise[c]) * float64(noise[c])
	}
	var sumRef2 float64
	refRows := logitRows(t, refSess, data)
	for _, row := range refRows {
		for c := 3; c < 6; c++ {
			sumRef2 += float64(row[c]) * float64(row[c])
		}
	}
	want := 10 * math.Log10(sumRef2/(float64(len(refRows))*sumN2))
	for _, spec := range []string{"logits:1:clean=0-3,noisy=3-6", "logits:-1:clean=0-3,noisy=3-6"} {
		sl, err := ParseSlices(spec)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(context.Background(), refSess, open(t, load(t, noisyLogits(noise))), seq(data), Options{Slices: sl})
		if err != nil {
			t.Fatal(err)
		}
		got := r.Outputs[0].Slices
		if len(got) != 2 || got[0].Name != "clean" || got[1].Name != "noisy" {
			t.Fatalf("%s: slices %+v", spec, got)
		}
		if !math.IsInf(float64(got[0].SQNR), 1) || got[0].MaxAbsError != 0 {
			t.Errorf("%s: the unperturbed classes read %v dB, max error %g", spec, got[0].SQNR, got[0].MaxAbsError)
		}
		if math.Abs(float64(got[1].SQNR)-want) > 0.01 {
			t.Errorf("%s: the perturbed classes read %v dB, want %.3f", spec, got[1].SQNR, want)
		}
	}
	if _, err := Run(context.Background(), refSess, refSess, seq(data), Options{Slices: []Slice{{Output: "logits", Axis: 1, Name: "past", From: 8, To: 12}}}); err == nil {
		t.Error("a slice past the axis's length was accepted")
	}
}

// FuzzParseSlices: any value parses or is refused, never panics, and what
// parses is a set of non-empty, distinctly named ranges on one output.
func FuzzParseSlices(f *testing.F) {
	for _, s := range []string{"output:2:boxes=0-4,scores=4-85", "a:b:-1:x=1-2", "o:1:x=3-1", "::", "o:1:=0-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSlices(s)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, sl := range got {
			if sl.Output == "" || sl.Name == "" || sl.From < 0 || sl.To <= sl.From || names[sl.Name] || sl.Output != got[0].Output || sl.Axis != got[0].Axis {
				t.Fatalf("%q parsed to %+v", s, got)
			}
			names[sl.Name] = true
		}
	})
}

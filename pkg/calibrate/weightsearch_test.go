package calibrate

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/spec"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// gridSearchError is the reference the search must match or beat: every
// range the formula's range and the grid-fitting range give when shrunk by
// factors 1, 0.995, …, 0.5 (WeightMSERange), scored by roundTripError.
func gridSearchError(g []float32, lo, hi float32, s *spec.QuantizationSpec) float64 {
	l, h := WeightMSERange(g, lo, hi, s)
	sc, zp, _ := s.QParams([]float32{l}, []float32{h})
	return roundTripError(g, sc[0], zp[0], s)
}

func searchError(g []float32, lo, hi float32, s *spec.QuantizationSpec) float64 {
	l, h := newRangeSearch(s).best(g, lo, hi)
	sc, zp, _ := s.QParams([]float32{l}, []float32{h})
	return roundTripError(g, sc[0], zp[0], s)
}

var searchSpecs = []struct {
	name  string
	spec  *spec.QuantizationSpec
	block int // 0: per channel
}{
	{"int4 symmetric block 32", int4Spec(spec.Symmetric), 32},
	{"int4 asymmetric block 32", int4Spec(spec.Asymmetric), 32},
	{"uint4 asymmetric block 128", &spec.QuantizationSpec{DType: spec.UInt4, QScheme: spec.Asymmetric, ScaleDType: spec.Float32}, 128},
	{"int8 symmetric per channel", &spec.QuantizationSpec{DType: spec.Int8, QScheme: spec.Symmetric, ScaleDType: spec.Float32}, 0},
	{"int4 symmetric fp16 scale block 16", &spec.QuantizationSpec{DType: spec.Int4, QScheme: spec.Symmetric, ScaleDType: spec.Float16}, 16},
}

// TestSearchNeverWorseThanFormula: on random blocks of every size up to
// 40 the searched range never has more error than the formula's range.
func TestSearchNeverWorseThanFormula(t *testing.T) {
	seed := uint64(11)
	next := func() float32 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return float32(int64(seed>>33)%2001-1000) / 1000
	}
	for _, c := range searchSpecs {
		for b := range 400 {
			g := make([]float32, 1+b%40)
			lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
			for i := range g {
				g[i] = next() * next() * 3
				lo, hi = min(lo, g[i]), max(hi, g[i])
			}
			sc, zp, _ := c.spec.QParams([]float32{lo}, []float32{hi})
			if e, e0 := searchError(g, lo, hi, c.spec), roundTripError(g, sc[0], zp[0], c.spec); e > e0 {
				t.Errorf("%s block %d: searched error %g > formula error %g", c.name, b, e, e0)
			}
		}
	}
}

// TestSearchRangesMatchesGroupByGroup: the parallel pass over a tensor
// gives each group the range the search gives that group alone, for every
// layout (per tensor, per channel on either axis, blocks with a short last
// block, a 4-D Conv weight blocked on its input channels).
func TestSearchRangesMatchesGroupByGroup(t *testing.T) {
	cases := []struct {
		shape       []int
		axis, block int
	}{
		{[]int{40, 24}, -1, 0},
		{[]int{40, 24}, 0, 0},
		{[]int{40, 24}, 1, 0},
		{[]int{70, 1100}, 0, 32},
		{[]int{1100, 70}, 1, 16},
		{[]int{8, 48, 3, 3}, 1, 32},
	}
	s := int4Spec(spec.Symmetric)
	for _, c := range cases {
		t.Run(fmt.Sprint(c.shape, c.axis, c.block), func(t *testing.T) {
			data := make([]float32, tensor.NumElements(c.shape))
			for i := range data {
				data[i] = float32(math.Sin(float64(i)*0.7)) * float32(1+i%5)
			}
			mins, maxs, err := finalize.GroupRanges(data, c.shape, c.axis, c.block)
			if err != nil {
				t.Fatal(err)
			}
			groups, err := finalize.GroupValues(data, c.shape, c.axis, c.block)
			if err != nil {
				t.Fatal(err)
			}
			wantLo, wantHi := slices.Clone(mins), slices.Clone(maxs)
			r := newRangeSearch(s)
			for i, g := range groups {
				wantLo[i], wantHi[i] = r.best(g, wantLo[i], wantHi[i])
			}
			WeightRanges(data, c.shape, c.axis, c.block, s, mins, maxs)
			if !slices.Equal(mins, wantLo) || !slices.Equal(maxs, wantHi) {
				t.Fatalf("ranges differ from the group-by-group search")
			}
		})
	}
}

// TestSearchNotWorseThanGridOnSharedModels compares the search with the
// 202-candidate grid (WeightMSERange) on the weights of every shared model (every float
// initializer of rank ≥ 2, blocked along its input axis: 0 for matrices,
// 1 for convolution kernels), summed over each model; at most 32 groups
// of each tensor, evenly spaced, to keep the grid's cost in bounds.
func TestSearchNotWorseThanGridOnSharedModels(t *testing.T) {
	if testing.Short() {
		t.Skip("grid search over the shared models' weights")
	}
	dir := testutil.SharedModels(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), "model.onnx")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			m, err := onnxgraph.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			grid, search, norm := make([]float64, len(searchSpecs)), make([]float64, len(searchSpecs)), 0.0
			for _, v := range m.Graph.Values() {
				if !v.IsConst() || len(v.Const.Dims) < 2 {
					continue
				}
				w, err := tensor.FromProto(v.Const, m)
				if err != nil || !w.DType.IsFloat() {
					continue
				}
				data, err := w.AsFloat32()
				if err != nil {
					t.Fatal(err)
				}
				axis := 0
				if len(w.Shape) > 2 {
					axis = 1
				}
				for i, c := range searchSpecs {
					mins, maxs, err := finalize.GroupRanges(data, w.Shape, axis, c.block)
					if err != nil {
						t.Fatal(err)
					}
					groups, err := finalize.GroupValues(data, w.Shape, axis, c.block)
					if err != nil {
						t.Fatal(err)
					}
					stride := max(1, len(groups)/32)
					for k := 0; k < len(groups); k += stride {
						grid[i] += gridSearchError(groups[k], mins[k], maxs[k], c.spec)
						search[i] += searchError(groups[k], mins[k], maxs[k], c.spec)
						if i == 0 {
							for _, x := range groups[k] {
								norm += float64(x) * float64(x)
							}
						}
					}
				}
			}
			if norm == 0 {
				t.Skip("no float weight of rank ≥ 2")
			}
			for i, c := range searchSpecs {
				db := func(e float64) float64 { return 10 * math.Log10(norm/e) }
				t.Logf("%s: grid %.3f dB, search %.3f dB", c.name, db(grid[i]), db(search[i]))
				if search[i] > grid[i]*(1+1e-9) {
					t.Errorf("%s: search error %g above the grid's %g", c.name, search[i], grid[i])
				}
			}
		})
	}
}

// BenchmarkWeightRanges times the int4 block-32 search on one MLP weight of
// the 168 M decoder's shape ([768, 3264], std 0.02).
//
//	go test -run - -bench WeightRanges -cpuprofile cpu.out ./pkg/calibrate
func BenchmarkWeightRanges(b *testing.B) {
	shape := []int{768, 3264}
	data := make([]float32, shape[0]*shape[1])
	seed := uint64(3)
	for i := range data {
		seed = seed*6364136223846793005 + 1442695040888963407
		data[i] = float32(int64(seed>>33)%2001-1000) / 1000 * 0.035
	}
	s := int4Spec(spec.Symmetric)
	n := shape[0] / 32 * shape[1]
	mins, maxs := make([]float32, n), make([]float32, n)
	b.SetBytes(int64(4 * len(data)))
	for b.Loop() {
		WeightRanges(data, shape, 0, 32, s, mins, maxs)
	}
}

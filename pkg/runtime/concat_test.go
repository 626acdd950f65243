package runtime

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestConcatThreads checks float Concat, whose copies are split over the
// threads, against an element-by-element reference on 1-3 threads, for
// every axis and parts large enough to split inside one copy.
func TestConcatThreads(t *testing.T) {
	for _, tc := range []struct {
		shapes [][]int
		axis   int64
	}{
		{[][]int{{2, 64, 30, 30}, {2, 96, 30, 30}}, 1},
		{[][]int{{1, 70000}, {3, 70000}, {2, 70000}}, 0},
		{[][]int{{3, 5, 9000}, {3, 5, 7}, {3, 5, 1}}, 2},
		{[][]int{{1, 1}, {1, 2}}, 1},
	} {
		var parts []*tensor.Tensor
		v := float32(0)
		for _, s := range tc.shapes {
			p := tensor.New(tensor.Float, s...)
			for i := range p.Float32s() {
				v++
				p.Float32s()[i] = v
			}
			parts = append(parts, p)
		}
		// want: out[o][a][i] walks the parts along the axis in order.
		ax := int(tc.axis)
		outer := tensor.NumElements(tc.shapes[0][:ax])
		inner := tensor.NumElements(tc.shapes[0][ax+1:])
		var want []float32
		for o := range outer {
			for _, p := range parts {
				n := p.Shape[ax] * inner
				want = append(want, p.Float32s()[o*n:(o+1)*n]...)
			}
		}
		for threads := 1; threads <= 3; threads++ {
			t.Run(fmt.Sprintf("%v/axis%d/threads%d", tc.shapes, tc.axis, threads), func(t *testing.T) {
				got, err := concat(&runCtx{threads: threads}, parts, tc.axis)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Float32s()) != len(want) {
					t.Fatalf("%d elements, want %d", len(got.Float32s()), len(want))
				}
				for i, w := range want {
					if got.Float32s()[i] != w {
						t.Fatalf("out[%d] = %g, want %g", i, got.Float32s()[i], w)
					}
				}
			})
		}
	}
}

// fireModel is a SqueezeNet fire module and more: three Convs of x (a
// fused 1×1 with Relu, a plain 3×3, a fused 3×3) concatenated on the
// channels, then a 1×1 Conv of the Concat; with partOutput the first
// Conv's output is also a graph output, which keeps the Concat from
// being computed in place.
func fireModel(partOutput bool) *testmodels.Builder {
	b := testmodels.New("fire", 17)
	b.Input("x", tensor.Float, "N", 4, 9, 11)
	b.Output("y", tensor.Float, "N", 5, 9, 11)
	if partOutput {
		b.Output("a", tensor.Float, "N", 6, 9, 11)
	}
	b.RandomInit("wa", 0.5, 6, 4, 1, 1)
	b.RandomInit("ba", 0.5, 6)
	b.RandomInit("wb", 0.5, 7, 4, 3, 3)
	b.RandomInit("wc", 0.5, 3, 4, 3, 3)
	b.RandomInit("bc", 0.5, 3)
	b.RandomInit("wy", 0.5, 5, 16, 1, 1)
	b.Node("Conv", "conva", []string{"x", "wa", "ba"}, []string{"ca"})
	b.Node("Relu", "relua", []string{"ca"}, []string{"a"})
	b.Node("Conv", "convb", []string{"x", "wb"}, []string{"cb"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Conv", "convc", []string{"x", "wc", "bc"}, []string{"cc"}, testmodels.AttrInts("pads", 1, 1, 1, 1))
	b.Node("Relu", "reluc", []string{"cc"}, []string{"c"})
	b.Node("Concat", "cat", []string{"a", "cb", "c"}, []string{"cat"}, testmodels.AttrInt("axis", 1))
	b.Node("Conv", "convy", []string{"cat", "wy"}, []string{"y"})
	return b
}

// TestConcatInPlace runs fire models on recycled buffers filled with NaN:
// the first run copies the Concat's inputs and plans the in-place Concat,
// the later runs of one image have the Convs write into the Concat's
// output (seen through a tap: the Concat's output starts at its first
// input's data), a run of two images copies again, and every run gives
// the first run's values bit for bit. Tapping a value inside a fused Conv
// runs its nodes one by one, which must not write into the Concat's
// buffer.
func TestConcatInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	image := func(n int) map[string]*tensor.Tensor {
		x := tensor.New(tensor.Float, n, 4, 9, 11)
		for i := range x.Float32s() {
			x.Float32s()[i] = r.Float32()*2 - 1
		}
		return map[string]*tensor.Tensor{"x": x}
	}
	// two's first image is one's.
	one, two := image(1), image(2)
	copy(two["x"].Float32s(), one["x"].Float32s())
	for _, tc := range []struct {
		partOutput bool
		taps       []string
		inPlace    bool
	}{
		{false, []string{"a", "cat"}, true},
		{false, []string{"a", "cat", "ca"}, false},
		{true, []string{"a", "cat"}, false},
	} {
		for threads := 1; threads <= 2; threads++ {
			t.Run(fmt.Sprintf("partOutput=%v/taps=%v/threads=%d", tc.partOutput, tc.taps, threads), func(t *testing.T) {
				m, err := onnxgraph.LoadBytes(fireModel(tc.partOutput).Bytes(), "")
				if err != nil {
					t.Fatal(err)
				}
				s, err := NewGoSession(m, Options{Threads: threads, poisonArena: true})
				if err != nil {
					t.Fatal(err)
				}
				first := runCopy(t, s, one, false, tc.taps)
				for run, in := range []map[string]*tensor.Tensor{one, two, one, one} {
					var catData, aData *float32
					outs, err := s.Run(context.Background(), in, RunOptions{TapValues: tc.taps, Tap: func(name string, v *tensor.Tensor) {
						switch name {
						case "cat":
							catData = unsafe.SliceData(v.Float32s())
						case "a":
							aData = unsafe.SliceData(v.Float32s())
						}
					}})
					if err != nil {
						t.Fatal(err)
					}
					y := outs["y"].Float32s()
					want := first["out:y"].Float32s()
					for i, w := range want {
						if math.Float32bits(y[i]) != math.Float32bits(w) {
							t.Fatalf("run %d: y[%d] = %g, the first run gave %g", run+2, i, y[i], w)
						}
					}
					if inPlace := catData == aData; inPlace != (tc.inPlace && in["x"].Shape[0] == 1) {
						t.Errorf("run %d of %d images: Concat computed in place %v", run+2, in["x"].Shape[0], inPlace)
					}
				}
			})
		}
	}
}

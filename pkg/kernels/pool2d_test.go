package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPool2DMatchesND checks the 2-D pooling fast path bit for bit against
// the rank-generic definition, with padding, strides, dilations, ceil-mode
// style end padding, count_include_pad and argmax.
func TestPool2DMatchesND(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		in, k, s, d, pb, pe []int
	}{
		{[]int{7, 9}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{8, 8}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{10, 6}, []int{3, 2}, []int{1, 3}, []int{2, 1}, []int{2, 0}, []int{1, 2}},
		{[]int{5, 5}, []int{5, 5}, []int{1, 1}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
	} {
		g := &ConvGeom{In: tc.in, Kernel: tc.k, Strides: tc.s, Dilations: tc.d, PadBegin: tc.pb, Out: make([]int, 2)}
		for d := range g.Out {
			g.Out[d] = (tc.in[d]+tc.pb[d]+tc.pe[d]-((tc.k[d]-1)*tc.d[d]+1))/tc.s[d] + 1
		}
		const c = 3
		x := randSlice(r, c*g.InSize())
		x[5] = float32(math.NaN())
		for _, isMax := range []bool{true, false} {
			for _, countPad := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/max=%v/pad=%v", tc.in, isMax, countPad), func(t *testing.T) {
					want, wantIdx := make([]float32, c*g.OutSize()), make([]int64, c*g.OutSize())
					poolND(g, c, x, want, isMax, countPad, tc.pe, wantIdx)
					for _, threads := range []int{1, 2} {
						got, gotIdx := make([]float32, len(want)), make([]int64, len(want))
						PoolParallel(threads, g, c, x, got, isMax, countPad, tc.pe, gotIdx)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) || (isMax && gotIdx[i] != wantIdx[i]) {
								t.Fatalf("threads %d: y[%d] = %g (index %d), want %g (index %d)", threads, i, got[i], gotIdx[i], want[i], wantIdx[i])
							}
						}
					}
				})
			}
		}
	}
}

// maxPoolInput returns n values in which the order of a window's visits
// shows: many equal values of either sign of zero, NaNs with distinct
// payloads (so which NaN survives shows too), infinities and distinct
// values (so reading a wrong position shows).
func maxPoolInput(r *rand.Rand, n int) []float32 {
	x := randSlice(r, n)
	for i := range x {
		switch r.IntN(16) {
		case 0:
			x[i] = math.Float32frombits(0x7fc00000 | uint32(r.IntN(1<<22)))
		case 1, 2, 3:
			x[i] = float32(math.Copysign(0, -1))
		case 4, 5, 6:
			x[i] = 0
		case 7:
			x[i] = float32(math.Inf(-1))
		}
	}
	return x
}

// checkMaxPool2D compares PoolParallel's max pooling without argmax on 1
// and 2 threads bit for bit with the rank-generic definition, into an
// output filled with a NaN no input has, so an output left unwritten shows.
func checkMaxPool2D(t *testing.T, g *ConvGeom, c int, padEnd []int, x []float32) {
	t.Helper()
	want := make([]float32, c*g.OutSize())
	poolND(g, c, x, want, true, false, padEnd, nil)
	unwritten := math.Float32frombits(0xffc00001)
	for _, threads := range []int{1, 2} {
		got := make([]float32, len(want))
		for i := range got {
			got[i] = unwritten
		}
		PoolParallel(threads, g, c, x, got, true, false, padEnd, nil)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("in %v kernel %v strides %v dilations %v pads %v+%v, threads %d: y[%d] = %g (%#x), want %g (%#x)",
					g.In, g.Kernel, g.Strides, g.Dilations, g.PadBegin, padEnd, threads,
					i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
}

// TestMaxPool2DRows checks max pooling without argmax bit for bit against
// the rank-generic definition: column strides 1 to 3 (folded as lanes of
// contiguous rows, or by maxPoolS2Rows for 2 or 3 columns at stride 2,
// rows of 8 to 100 such windows, the last plane's end included), with and
// without padding, ceil-mode style end padding,
// dilations, rows narrower and wider than a vector, bands of several output
// rows, windows with no inside position, NaN at window starts and inside
// windows and signed zeros.
func TestMaxPool2DRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		in, k, s, d, pb, pe []int
	}{
		{[]int{20, 41}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{111, 111}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{1, 1}},
		{[]int{55, 55}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{27, 27}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{112, 112}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{13, 37}, []int{3, 3}, []int{1, 1}, []int{1, 2}, []int{0, 2}, []int{0, 2}},
		{[]int{30, 64}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{11, 50}, []int{3, 4}, []int{3, 3}, []int{1, 1}, []int{1, 2}, []int{2, 1}},
		{[]int{9, 9}, []int{9, 9}, []int{1, 1}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{25, 7}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{25, 7}, []int{3, 3}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{2, 2}},
		{[]int{17, 16}, []int{3, 3}, []int{3, 3}, []int{1, 1}, []int{0, 0}, []int{2, 2}},
		{[]int{17, 33}, []int{3, 3}, []int{2, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{40, 203}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{30, 300}, []int{3, 5}, []int{3, 2}, []int{2, 1}, []int{2, 1}, []int{0, 1}},
		{[]int{9, 12}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{2, 1}, []int{0, 0}},
		{[]int{12, 19}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
		{[]int{6, 5}, []int{1, 1}, []int{3, 3}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{28, 28}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{14, 70}, []int{3, 3}, []int{2, 2}, []int{2, 1}, []int{1, 1}, []int{1, 0}},
		{[]int{9, 40}, []int{4, 3}, []int{1, 2}, []int{1, 1}, []int{2, 0}, []int{1, 1}},
		{[]int{6, 35}, []int{1, 2}, []int{3, 2}, []int{1, 1}, []int{0, 1}, []int{0, 0}},
		{[]int{10, 10}, []int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},
		{[]int{7, 6}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
	} {
		t.Run(fmt.Sprint(tc.in, tc.k, tc.s, tc.d, tc.pb, tc.pe), func(t *testing.T) {
			g := &ConvGeom{In: tc.in, Kernel: tc.k, Strides: tc.s, Dilations: tc.d, PadBegin: tc.pb, Out: make([]int, 2)}
			for d := range g.Out {
				g.Out[d] = (tc.in[d]+tc.pb[d]+tc.pe[d]-((tc.k[d]-1)*tc.d[d]+1))/tc.s[d] + 1
			}
			const c = 3
			checkMaxPool2D(t, g, c, tc.pe, maxPoolInput(r, c*g.InSize()))
		})
	}
}

// TestMaxPool2DRandomGeometry checks max pooling without argmax against the
// rank-generic definition over random small geometries: every combination
// of full and clipped rows and columns, bands, phases and tails.
func TestMaxPool2DRandomGeometry(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	n := 400
	if testing.Short() {
		n = 100
	}
	for range n {
		var in, k, s, d, pb, pe, out [2]int
		ok := true
		for a := range 2 {
			k[a], s[a], d[a] = 1+r.IntN(4), 1+r.IntN(4), 1+r.IntN(3)
			in[a] = 1 + r.IntN(45)
			ext := (k[a]-1)*d[a] + 1
			pb[a], pe[a] = r.IntN(ext+1), r.IntN(ext+1)
			if in[a]+pb[a]+pe[a] < ext {
				ok = false
				break
			}
			out[a] = (in[a]+pb[a]+pe[a]-ext)/s[a] + 1
		}
		if !ok {
			continue
		}
		g := &ConvGeom{In: in[:], Kernel: k[:], Strides: s[:], Dilations: d[:], PadBegin: pb[:], Out: out[:]}
		c := 1 + r.IntN(3)
		checkMaxPool2D(t, g, c, pe[:], maxPoolInput(r, c*g.InSize()))
	}
}

// maxPoolBenchCases are the max pools of SqueezeNet 1.0 (3×3 stride 2,
// ceil mode), ResNet (3×3 stride 2, padding 1) and LeNet (2×2 stride 2).
var maxPoolBenchCases = []struct {
	name             string
	c, in, k, pb, pe int
}{
	{"squeeze96x111", 96, 111, 3, 0, 1},
	{"squeeze256x55", 256, 55, 3, 0, 0},
	{"squeeze512x27", 512, 27, 3, 0, 0},
	{"resnet64x112", 64, 112, 3, 1, 1},
	{"lenet16x28", 16, 28, 2, 0, 0},
	{"lenet32x10", 32, 10, 2, 0, 0},
}

// BenchmarkMaxPool2D times max pooling without argmax on one thread.
func BenchmarkMaxPool2D(b *testing.B) {
	for _, bc := range maxPoolBenchCases {
		b.Run(bc.name, func(b *testing.B) {
			out := (bc.in+bc.pb+bc.pe-bc.k)/2 + 1
			g := &ConvGeom{In: []int{bc.in, bc.in}, Kernel: []int{bc.k, bc.k}, Strides: []int{2, 2}, Dilations: []int{1, 1},
				PadBegin: []int{bc.pb, bc.pb}, Out: []int{out, out}}
			x := randSlice(rand.New(rand.NewPCG(1, 2)), bc.c*g.InSize())
			y := make([]float32, bc.c*g.OutSize())
			pe := []int{bc.pe, bc.pe}
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				PoolParallel(1, g, bc.c, x, y, true, false, pe, nil)
			}
		})
	}
}

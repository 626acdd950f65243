package runtime

import (
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// reducer accumulates one output element: init, per-element step, final.
// sums marks the reductions whose step is a + x, which the contiguous-run
// loop adds with kernels.Sum: in eight float64 lanes, not one chain of
// dependent additions (the same sums up to float64 rounding).
type reducer struct {
	init  float64
	step  func(acc, x float64) float64
	final func(acc float64, n int) float64
	sums  bool
}

// summing is the reducer that adds its elements, then applies final.
func summing(final func(acc float64, n int) float64) reducer {
	return reducer{0, func(a, x float64) float64 { return a + x }, final, true}
}

var reducers = map[string]reducer{
	"ReduceSum":       summing(nil),
	"ReduceMean":      summing(func(a float64, n int) float64 { return a / float64(n) }),
	"ReduceMax":       {math.Inf(-1), func(a, x float64) float64 { return maxNaN(a, x) }, nil, false},
	"ReduceMin":       {math.Inf(1), func(a, x float64) float64 { return minNaN(a, x) }, nil, false},
	"ReduceProd":      {1, func(a, x float64) float64 { return a * x }, nil, false},
	"ReduceL1":        {0, func(a, x float64) float64 { return a + math.Abs(x) }, nil, false},
	"ReduceL2":        {0, func(a, x float64) float64 { return a + x*x }, func(a float64, _ int) float64 { return math.Sqrt(a) }, false},
	"ReduceSumSquare": {0, func(a, x float64) float64 { return a + x*x }, nil, false},
	"ReduceLogSum":    summing(func(a float64, _ int) float64 { return math.Log(a) }),
	"ReduceLogSumExp": {0, func(a, x float64) float64 { return a + math.Exp(x) }, func(a float64, _ int) float64 { return math.Log(a) }, false},
}

func maxNaN(a, x float64) float64 {
	if x != x || a != a {
		return math.NaN()
	}
	return math.Max(a, x)
}

func minNaN(a, x float64) float64 {
	if x != x || a != a {
		return math.NaN()
	}
	return math.Min(a, x)
}

// axesAsInput is the first opset in which each reduction takes its axes as
// an input instead of an attribute.
func axesAsInput(op string) int64 {
	if op == "ReduceSum" {
		return 13
	}
	return 18
}

func buildReduce(op string) func(b *builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		red := reducers[op]
		keep := b.int("keepdims", 1) != 0
		noopEmpty := b.int("noop_with_empty_axes", 0) != 0
		attrAxes := b.ints("axes")
		fromInput := b.opset >= axesAsInput(op)
		return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
			t := in[0]
			axes := attrAxes
			if fromInput {
				axes = nil
				if len(in) > 1 && in[1] != nil {
					axes = asInt64(in[1])
				}
			}
			r := len(t.Shape)
			if len(axes) == 0 && noopEmpty {
				return one(t), nil
			}
			reduce := make([]bool, r)
			if len(axes) == 0 {
				for i := range reduce {
					reduce[i] = true
				}
			}
			for _, a := range axes {
				ax, err := normAxis(a, r)
				if err != nil {
					return nil, err
				}
				reduce[ax] = true
			}
			// Output shape with kept dims; each input element adds into
			// the output element its non-reduced coordinates name.
			ks := slices.Clone(t.Shape)
			for i := range ks {
				if reduce[i] {
					ks[i] = 1
				}
			}
			no := tensor.NumElements(ks)
			acc := make([]float64, no)
			for i := range acc {
				acc[i] = red.init
			}
			xf, isFloat := t.Data.([]float32)
			n := t.Len()
			if isFloat && no > 0 && reducesSuffix(reduce) {
				// Each output reduces one contiguous run.
				run := n / no
				kernels.Parallel(rc.threads, no, max(1, parGrain/max(1, run)), func(lo, hi int) {
					for o := lo; o < hi; o++ {
						a := acc[o]
						if red.sums {
							a += kernels.Sum(xf[o*run : (o+1)*run])
						} else {
							for _, v := range xf[o*run : (o+1)*run] {
								a = red.step(a, float64(v))
							}
						}
						acc[o] = a
					}
				})
			} else {
				x, err := asFloat32Exact(t)
				if err != nil {
					return nil, err
				}
				st := bcastStrides(ks, t.Shape)
				pos := make([]int, r)
				o := 0
				for _, v := range x {
					acc[o] = red.step(acc[o], v)
					for d := r - 1; d >= 0; d-- {
						pos[d]++
						o += st[d]
						if pos[d] < t.Shape[d] {
							break
						}
						o -= st[d] * t.Shape[d]
						pos[d] = 0
					}
				}
			}
			cnt := 1
			if no > 0 {
				cnt = n / no
			}
			if red.final != nil {
				for i := range acc {
					acc[i] = red.final(acc[i], cnt)
				}
			}
			if cnt == 0 && (op == "ReduceMax" || op == "ReduceMin") && t.DType.IsInteger() {
				return nil, fmt.Errorf("%s over an empty axis of an integer tensor", op)
			}
			shape := ks
			if !keep {
				shape = nil
				for i, d := range t.Shape {
					if !reduce[i] {
						shape = append(shape, d)
					}
				}
			}
			out, err := castTensor(&tensor.Tensor{DType: tensor.Double, Shape: shape, Data: acc}, t.DType)
			return one(out), err
		}, nil
	}
}

// reducesSuffix reports whether the reduced axes are the last ones (at
// least one): then every output element reduces a contiguous run.
func reducesSuffix(reduce []bool) bool {
	i := len(reduce)
	for i > 0 && reduce[i-1] {
		i--
	}
	if i == len(reduce) {
		return false
	}
	return !slices.Contains(reduce[:i], true)
}

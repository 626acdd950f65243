package quant

import (
	"fmt"
	"sync"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// Layout maps the elements of a tensor (row-major) to their qparam group:
// one group per tensor, one per index along an axis, or one per block of
// blockSize indices along an axis (ONNX opset-21 blocked quantization,
// whose scale has the tensor's rank).
type Layout struct {
	axis, block int
	// dim is the size of the axis, inner the elements after it, nb the
	// blocks along it.
	dim, inner, nb int
	groups         int
}

// PerTensor is the layout of one scale and zero point for every element.
var PerTensor = Layout{axis: -1, groups: 1}

// NewLayout is the layout of a tensor of shape quantized per tensor (axis
// < 0), per axis (blockSize ≤ 0) or per block of blockSize along axis.
func NewLayout(shape []int, axis, blockSize int) (Layout, error) {
	if axis < 0 {
		return PerTensor, nil
	}
	if axis >= len(shape) {
		return Layout{}, fmt.Errorf("axis %d of a rank-%d tensor", axis, len(shape))
	}
	l := Layout{axis: axis, block: max(blockSize, 0), dim: shape[axis], inner: tensor.NumElements(shape[axis+1:])}
	l.groups = l.dim
	if l.block > 0 {
		l.nb = (l.dim + l.block - 1) / l.block
		l.groups = tensor.NumElements(shape[:axis]) * l.nb * l.inner
	}
	return l, nil
}

// ParamShape is the shape of the scale (and zero point) tensor of a tensor
// of the given shape: [] per tensor (axis < 0), [shape[axis]] per axis, and
// shape with shape[axis] replaced by ceil(shape[axis]/blockSize) per block.
func ParamShape(shape []int, axis, blockSize int) []int {
	switch {
	case axis < 0:
		return []int{}
	case blockSize <= 0:
		return []int{shape[axis]}
	}
	out := append([]int(nil), shape...)
	out[axis] = (shape[axis] + blockSize - 1) / blockSize
	return out
}

// Groups is the number of qparam groups.
func (l Layout) Groups() int { return l.groups }

// Of returns the group of element i.
func (l Layout) Of(i int) int {
	switch {
	case l.axis < 0:
		return 0
	case l.block <= 0:
		return (i / l.inner) % l.dim
	}
	outer := i / (l.dim * l.inner)
	c := (i / l.inner) % l.dim
	return (outer*l.nb+c/l.block)*l.inner + i%l.inner
}

// Each calls fn(i, group of i) for the n elements in order, without a
// division per element.
func (l Layout) Each(n int, fn func(i, g int)) {
	if l.axis < 0 {
		for i := range n {
			fn(i, 0)
		}
		return
	}
	if l.dim == 0 || l.inner == 0 {
		return
	}
	outer := n / (l.dim * l.inner)
	for o := range outer {
		for a := range l.dim {
			base := (o*l.dim + a) * l.inner
			g := a
			if l.block > 0 {
				g = (o*l.nb + a/l.block) * l.inner
				for j := range l.inner {
					fn(base+j, g+j)
				}
				continue
			}
			for j := range l.inner {
				fn(base+j, g)
			}
		}
	}
}

// EachParallel is Each with the work shared among up to workers
// goroutines, for large tensors: fn is called once per element, in no
// particular order, and must only write what belongs to element i. Runs of
// elements that share a group (or a row of blocks) stay on one goroutine.
func (l Layout) EachParallel(n, workers int, fn func(i, g int)) {
	rows, width := 1, n // per tensor: one run, cut anywhere
	if l.axis >= 0 {
		if l.dim == 0 || l.inner == 0 {
			return
		}
		rows, width = n/l.inner, l.inner
	}
	if workers <= 1 || n < parallelElements {
		l.Each(n, fn)
		return
	}
	if l.axis < 0 {
		rows, width = workers, (n+workers-1)/workers
	}
	per := (rows + workers - 1) / workers
	var wg sync.WaitGroup
	for r0 := 0; r0 < rows; r0 += per {
		wg.Add(1)
		go func(r0, r1 int) {
			defer wg.Done()
			for r := r0; r < r1; r++ {
				base := r * width
				switch {
				case l.axis < 0:
					for i := base; i < min(base+width, n); i++ {
						fn(i, 0)
					}
				case l.block > 0:
					o, a := r/l.dim, r%l.dim
					g := (o*l.nb + a/l.block) * l.inner
					for j := range l.inner {
						fn(base+j, g+j)
					}
				default:
					a := r % l.dim
					for j := range l.inner {
						fn(base+j, a)
					}
				}
			}
		}(r0, min(r0+per, rows))
	}
	wg.Wait()
}

// Runs calls fn(start, end, g) for the runs of consecutive elements of the
// n that share group g, in order: the whole tensor per tensor, a row of
// the axis per axis, one element per call per block (the groups of a
// block row interleave). Loops over a run need no group lookup per
// element.
func (l Layout) Runs(n int, fn func(start, end, g int)) {
	switch {
	case l.axis < 0:
		if n > 0 {
			fn(0, n, 0)
		}
	case l.block > 0:
		l.Each(n, func(i, g int) { fn(i, i+1, g) })
	case l.dim != 0 && l.inner != 0:
		for r := range n / l.inner {
			fn(r*l.inner, (r+1)*l.inner, r%l.dim)
		}
	}
}

// RunsParallel is Runs with the work shared among up to workers
// goroutines, for large tensors: the calls come in no particular order,
// and fn must only write what belongs to its run. A run per tensor is cut
// into one piece per worker.
func (l Layout) RunsParallel(n, workers int, fn func(start, end, g int)) {
	if workers <= 1 || n < parallelElements || l.block > 0 {
		l.Runs(n, fn)
		return
	}
	if l.axis >= 0 && (l.dim == 0 || l.inner == 0) {
		return // no runs, as Runs has none
	}
	// The pieces: a per-tensor run cut in one piece per worker, or the
	// rows of the axis (n/inner of them: one per element when the axis is
	// the last) dealt out in contiguous ranges, never listed.
	count := n
	piece := func(from, to int) { fn(from, to, 0) }
	if l.axis >= 0 {
		count = n / l.inner
		piece = func(from, to int) {
			for r := from; r < to; r++ {
				fn(r*l.inner, (r+1)*l.inner, r%l.dim)
			}
		}
	}
	splitRange(count, workers, piece)
}

// splitRange calls fn on contiguous pieces of [0, count), one per worker,
// at once, and waits for them.
func splitRange(count, workers int, fn func(from, to int)) {
	per := (count + workers - 1) / max(workers, 1)
	var wg sync.WaitGroup
	for from := 0; from < count; from += per {
		wg.Go(func() { fn(from, min(from+per, count)) })
	}
	wg.Wait()
}

// lastAxis reports whether the layout is per axis along a tensor's last
// axis (of more than one group): a row of dim elements then holds every
// group once, in order, and loops over rows read the scales as a vector.
func (l Layout) lastAxis() bool { return l.axis >= 0 && l.block == 0 && l.inner == 1 && l.dim > 1 }

// rows calls fn(start, end) for the rows of a last-axis layout (see
// lastAxis), shared among up to workers goroutines for large tensors.
func (l Layout) rows(n, workers int, fn func(start, end int)) {
	count := n / l.dim
	piece := func(from, to int) {
		for r := from; r < to; r++ {
			fn(r*l.dim, (r+1)*l.dim)
		}
	}
	if workers <= 1 || n < parallelElements {
		piece(0, count)
		return
	}
	splitRange(count, workers, piece)
}

// parallelElements is the size from which EachParallel shares the work:
// below it, starting goroutines costs more than it saves.
const parallelElements = 1 << 18

// check fails when scales or the zero point do not have one value per
// group, or n elements do not fill whole rows of the axis.
func (l Layout) check(n int, scales []float32, zp *tensor.Tensor) error {
	if len(scales) != l.groups {
		return fmt.Errorf("%d scales for %d qparam groups", len(scales), l.groups)
	}
	if zp != nil && zp.Len() != l.groups {
		return fmt.Errorf("%d zero points for %d qparam groups", zp.Len(), l.groups)
	}
	if l.axis >= 0 && l.dim*l.inner != 0 && n%(l.dim*l.inner) != 0 {
		return fmt.Errorf("%d elements do not fill axis %d of %d×%d", n, l.axis, l.dim, l.inner)
	}
	return nil
}

package runtime

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func ceil64(x float64) float64 { return math.Ceil(x) }

// fixIndex maps a possibly negative index into [0, n) or fails.
func fixIndex(i int64, n int) (int, error) {
	if i < 0 {
		i += int64(n)
	}
	if i < 0 || i >= int64(n) {
		return 0, fmt.Errorf("index %d is out of range for dimension %d", i, n)
	}
	return int(i), nil
}

func buildGather(b *builder) (kernel, error) {
	axis := b.int("axis", 0)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, ind := in[0], in[1]
		ax, err := normAxis(axis, len(t.Shape))
		if err != nil {
			return nil, err
		}
		indices := asInt64(ind)
		os := slices.Concat(t.Shape[:ax], ind.Shape, t.Shape[ax+1:])
		outer := tensor.NumElements(t.Shape[:ax])
		inner := tensor.NumElements(t.Shape[ax+1:])
		dim := t.Shape[ax]
		// Float rows (embeddings) go into a buffer of the run's arena
		// with plain copies.
		xf, isFloat := t.Data.([]float32)
		var out *tensor.Tensor
		var of []float32
		if isFloat {
			out = rc.newFloatOut(os...)
			of = out.Float32s()
		} else {
			out = tensor.New(t.DType, os...)
		}
		for o := 0; o < outer; o++ {
			for j, i := range indices {
				k, err := fixIndex(i, dim)
				if err != nil {
					return nil, err
				}
				dst, src := (o*len(indices)+j)*inner, (o*dim+k)*inner
				if isFloat {
					copy(of[dst:dst+inner], xf[src:src+inner])
				} else {
					copyRange(out.Data, dst, t.Data, src, inner)
				}
			}
		}
		return one(out), nil
	}, nil
}

func buildGatherElements(b *builder) (kernel, error) {
	axis := b.int("axis", 0)
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, ind := in[0], in[1]
		r := len(t.Shape)
		ax, err := normAxis(axis, r)
		if err != nil {
			return nil, err
		}
		if len(ind.Shape) != r {
			return nil, fmt.Errorf("indices rank %d differs from data rank %d", len(ind.Shape), r)
		}
		idx, err := elementOffsets(t.Shape, ind, ax)
		if err != nil {
			return nil, err
		}
		out := tensor.New(t.DType, ind.Shape...)
		gatherFlat(t.Data, out.Data, idx)
		return one(out), nil
	}, nil
}

// elementOffsets returns, for each element of ind (same rank as shape),
// the flat offset in shape of the element at the same position with the
// axis ax coordinate replaced by the index's value (negative values count
// from the end): what GatherElements reads and ScatterElements writes.
func elementOffsets(shape []int, ind *tensor.Tensor, ax int) ([]int, error) {
	r := len(shape)
	indices := asInt64(ind)
	offs := make([]int, len(indices))
	pos := make([]int, r)
	for i, v := range indices {
		unravelIdx(i, ind.Shape, pos)
		k, err := fixIndex(v, shape[ax])
		if err != nil {
			return nil, err
		}
		pos[ax] = k
		off := 0
		for d := 0; d < r; d++ {
			off = off*shape[d] + pos[d]
		}
		offs[i] = off
	}
	return offs, nil
}

func buildScatterElements(b *builder) (kernel, error) {
	axis := b.int("axis", 0)
	red := b.str("reduction", "none")
	if red != "none" && red != "add" && red != "mul" && red != "max" && red != "min" {
		return nil, unsupportedf("reduction=%q is not supported", red)
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, ind, upd := in[0], in[1], in[2]
		r := len(t.Shape)
		ax, err := normAxis(axis, r)
		if err != nil {
			return nil, err
		}
		out := t.Clone()
		dst, err := elementOffsets(t.Shape, ind, ax)
		if err != nil {
			return nil, err
		}
		return one(out), scatter(out, upd, dst, 1, red)
	}, nil
}

// scatter writes (or reduces) block i of upd (block elements each) into
// out at element offset dst[i].
func scatter(out, upd *tensor.Tensor, dst []int, block int, red string) error {
	if red == "none" {
		for i, d := range dst {
			copyRange(out.Data, d, upd.Data, i*block, block)
		}
		return nil
	}
	var f func(a, b float64) float64
	switch red {
	case "add":
		f = func(a, b float64) float64 { return a + b }
	case "mul":
		f = func(a, b float64) float64 { return a * b }
	case "max":
		f = math.Max
	case "min":
		f = math.Min
	}
	switch o := out.Data.(type) {
	case []float32:
		u := upd.Data.([]float32)
		for i, d := range dst {
			for j := 0; j < block; j++ {
				o[d+j] = float32(f(float64(o[d+j]), float64(u[i*block+j])))
			}
		}
	case []int64:
		u := upd.Data.([]int64)
		for i, d := range dst {
			for j := 0; j < block; j++ {
				o[d+j] = int64(f(float64(o[d+j]), float64(u[i*block+j])))
			}
		}
	case []int32:
		u := upd.Data.([]int32)
		for i, d := range dst {
			for j := 0; j < block; j++ {
				o[d+j] = int32(f(float64(o[d+j]), float64(u[i*block+j])))
			}
		}
	default:
		return fmt.Errorf("reduction %s on %s is not supported", red, out.DType)
	}
	return nil
}

// ndOffsets resolves the index tuples of GatherND/ScatterND: the last
// dimension of indices addresses the leading dims of data (after batch
// dims); it returns one element offset per tuple and the slice size.
func ndOffsets(data []int, ind *tensor.Tensor, batch int) (offs []int, block int, err error) {
	ir := len(ind.Shape)
	k := ind.Shape[ir-1]
	if batch+k > len(data) {
		return nil, 0, fmt.Errorf("index tuples of length %d do not fit data shape %v", k, data)
	}
	block = tensor.NumElements(data[batch+k:])
	indices := asInt64(ind)
	n := len(indices) / max(k, 1)
	if k == 0 {
		n = tensor.NumElements(ind.Shape[:ir-1])
	}
	perBatch := n / max(1, tensor.NumElements(ind.Shape[:batch]))
	batchSize := tensor.NumElements(data[batch:])
	offs = make([]int, n)
	for i := 0; i < n; i++ {
		off := 0
		for j := 0; j < k; j++ {
			p, err := fixIndex(indices[i*k+j], data[batch+j])
			if err != nil {
				return nil, 0, err
			}
			off = off*data[batch+j] + p
		}
		offs[i] = (i/max(perBatch, 1))*batchSize + off*block
	}
	return offs, block, nil
}

func buildGatherND(b *builder) (kernel, error) {
	batch := int(b.int("batch_dims", 0))
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, ind := in[0], in[1]
		offs, block, err := ndOffsets(t.Shape, ind, batch)
		if err != nil {
			return nil, err
		}
		k := ind.Shape[len(ind.Shape)-1]
		os := slices.Concat(ind.Shape[:len(ind.Shape)-1], t.Shape[batch+k:])
		out := tensor.New(t.DType, os...)
		for i, o := range offs {
			copyRange(out.Data, i*block, t.Data, o, block)
		}
		return one(out), nil
	}, nil
}

// buildCompress builds Compress: the slices along axis (the elements of
// the flattened input without one) whose condition is true, in order. A
// condition shorter than the axis leaves the slices past its end out.
func buildCompress(b *builder) (kernel, error) {
	axis, hasAxis := b.int("axis", 0), b.has("axis")
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, cond := in[0], asInt64(in[1])
		shape := t.Shape
		if !hasAxis {
			shape = []int{t.Len()}
		}
		ax, err := normAxis(axis, len(shape))
		if err != nil {
			return nil, err
		}
		dim := shape[ax]
		if len(cond) > dim {
			return nil, fmt.Errorf("condition has %d elements, more than the %d of axis %d", len(cond), dim, ax)
		}
		var keep []int
		for j, c := range cond {
			if c != 0 {
				keep = append(keep, j)
			}
		}
		outer, inner := tensor.NumElements(shape[:ax]), tensor.NumElements(shape[ax+1:])
		os := slices.Clone(shape)
		os[ax] = len(keep)
		out := tensor.New(t.DType, os...)
		for o := 0; o < outer; o++ {
			for k, j := range keep {
				copyRange(out.Data, (o*len(keep)+k)*inner, t.Data, (o*dim+j)*inner, inner)
			}
		}
		return one(out), nil
	}, nil
}

// buildReverseSequence builds ReverseSequence: for each batch entry,
// the first sequence_lens of its steps along time_axis in reverse order,
// the rest as they are. The two axes are 0 and 1, so each (batch, time)
// pair owns a contiguous block of the input.
func buildReverseSequence(b *builder) (kernel, error) {
	batchAxis, timeAxis := b.int("batch_axis", 1), b.int("time_axis", 0)
	if batchAxis+timeAxis != 1 || batchAxis*timeAxis != 0 {
		return nil, fmt.Errorf("batch_axis %d and time_axis %d must be 0 and 1", batchAxis, timeAxis)
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, lens := in[0], asInt64(in[1])
		if len(t.Shape) < 2 {
			return nil, fmt.Errorf("input %v must have rank 2 or more", t.Shape)
		}
		batch, steps := t.Shape[batchAxis], t.Shape[timeAxis]
		if len(lens) != batch {
			return nil, fmt.Errorf("sequence_lens has %d elements for batch size %d", len(lens), batch)
		}
		inner := tensor.NumElements(t.Shape[2:])
		// offset is where the block of batch entry bi at time step ts starts.
		offset := func(bi, ts int) int {
			if timeAxis == 0 {
				return (ts*batch + bi) * inner
			}
			return (bi*steps + ts) * inner
		}
		out := tensor.New(t.DType, t.Shape...)
		for bi, n := range lens {
			if n < 0 || n > int64(steps) {
				return nil, fmt.Errorf("sequence_lens[%d] = %d is outside [0, %d]", bi, n, steps)
			}
			for ts := 0; ts < steps; ts++ {
				src := ts
				if ts < int(n) {
					src = int(n) - 1 - ts
				}
				copyRange(out.Data, offset(bi, ts), t.Data, offset(bi, src), inner)
			}
		}
		return one(out), nil
	}, nil
}

func buildScatterND(b *builder) (kernel, error) {
	red := b.str("reduction", "none")
	if red != "none" && red != "add" && red != "mul" && red != "max" && red != "min" {
		return nil, unsupportedf("reduction=%q is not supported", red)
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t, ind, upd := in[0], in[1], in[2]
		offs, block, err := ndOffsets(t.Shape, ind, 0)
		if err != nil {
			return nil, err
		}
		if upd.Len() != len(offs)*block {
			return nil, fmt.Errorf("updates shape %v does not fit %d slices of %d", upd.Shape, len(offs), block)
		}
		out := t.Clone()
		return one(out), scatter(out, upd, offs, block, red)
	}, nil
}

func buildTrilu(b *builder) (kernel, error) {
	upper := b.int("upper", 1) != 0
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		k := int64(0)
		if len(in) > 1 && in[1] != nil {
			k = asInt64(in[1])[0]
		}
		r := len(t.Shape)
		if r < 2 {
			return nil, fmt.Errorf("input must have rank 2 or more")
		}
		rows, cols := t.Shape[r-2], t.Shape[r-1]
		out := t.Clone()
		zero := tensor.New(t.DType, 1)
		for m := 0; m < t.Len()/max(rows*cols, 1); m++ {
			for i := 0; i < rows; i++ {
				for j := 0; j < cols; j++ {
					keep := int64(j-i) >= k
					if !upper {
						keep = int64(j-i) <= k
					}
					if !keep {
						copyRange(out.Data, m*rows*cols+i*cols+j, zero.Data, 0, 1)
					}
				}
			}
		}
		return one(out), nil
	}, nil
}

// buildEyeLike builds EyeLike: a matrix of the input's shape and of type
// dtype (the input's when absent) with ones on the k-th diagonal (above
// the main one for positive k) and zeros elsewhere.
func buildEyeLike(b *builder) (kernel, error) {
	k := b.int("k", 0)
	dt := tensor.DType(b.int("dtype", 0))
	if b.has("dtype") && (!dt.Valid() || dt == tensor.String || dt == tensor.Complex64 || dt == tensor.Complex128) {
		return nil, unsupportedf("dtype %s is not supported", dt)
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		if len(t.Shape) != 2 {
			return nil, fmt.Errorf("input %v must have rank 2", t.Shape)
		}
		to := t.DType
		if dt != tensor.Undefined {
			to = dt
		}
		unit, err := castTensor(tensor.FromFloat32([]float32{1}), to)
		if err != nil {
			return nil, err
		}
		if unit, err = toCompute(unit); err != nil {
			return nil, err
		}
		rows, cols := t.Shape[0], t.Shape[1]
		out := tensor.New(unit.DType, rows, cols)
		for i := 0; i < rows; i++ {
			if j := int64(i) + k; j >= 0 && j < int64(cols) {
				copyRange(out.Data, i*cols+int(j), unit.Data, 0, 1)
			}
		}
		return one(out), nil
	}, nil
}

func buildCumSum(b *builder) (kernel, error) {
	exclusive, reverse := b.int("exclusive", 0) != 0, b.int("reverse", 0) != 0
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		ax, err := normAxis(asInt64(in[1])[0], len(t.Shape))
		if err != nil {
			return nil, err
		}
		x, err := asFloat32Exact(t)
		if err != nil {
			return nil, err
		}
		res := make([]float64, len(x))
		outer := tensor.NumElements(t.Shape[:ax])
		inner := tensor.NumElements(t.Shape[ax+1:])
		dim := t.Shape[ax]
		for o := 0; o < outer; o++ {
			for i := 0; i < inner; i++ {
				var acc float64
				for j := 0; j < dim; j++ {
					jj := j
					if reverse {
						jj = dim - 1 - j
					}
					p := (o*dim+jj)*inner + i
					if exclusive {
						res[p] = acc
						acc += x[p]
					} else {
						acc += x[p]
						res[p] = acc
					}
				}
			}
		}
		out, err := castTensor(&tensor.Tensor{DType: tensor.Double, Shape: t.Shape, Data: res}, t.DType)
		return one(out), err
	}, nil
}

func buildDepthToSpace(b *builder) (kernel, error) {
	bs := int(b.int("blocksize", 0))
	crd := b.str("mode", "DCR") == "CRD"
	if bs <= 0 {
		return nil, fmt.Errorf("blocksize must be positive")
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		if len(t.Shape) != 4 || t.Shape[1]%(bs*bs) != 0 {
			return nil, fmt.Errorf("input %v does not fit blocksize %d", t.Shape, bs)
		}
		n, c, h, w := t.Shape[0], t.Shape[1], t.Shape[2], t.Shape[3]
		c2 := c / (bs * bs)
		var tmp *tensor.Tensor
		if crd {
			tmp = transpose(view(t, []int{n, c2, bs, bs, h, w}), []int{0, 1, 4, 2, 5, 3})
		} else {
			tmp = transpose(view(t, []int{n, bs, bs, c2, h, w}), []int{0, 3, 4, 1, 5, 2})
		}
		return one(view(tmp, []int{n, c2, h * bs, w * bs})), nil
	}, nil
}

func buildSpaceToDepth(b *builder) (kernel, error) {
	bs := int(b.int("blocksize", 0))
	if bs <= 0 {
		return nil, fmt.Errorf("blocksize must be positive")
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		if len(t.Shape) != 4 || t.Shape[2]%bs != 0 || t.Shape[3]%bs != 0 {
			return nil, fmt.Errorf("input %v does not fit blocksize %d", t.Shape, bs)
		}
		n, c, h, w := t.Shape[0], t.Shape[1], t.Shape[2], t.Shape[3]
		tmp := transpose(view(t, []int{n, c, h / bs, bs, w / bs, bs}), []int{0, 3, 5, 1, 2, 4})
		return one(view(tmp, []int{n, c * bs * bs, h / bs, w / bs})), nil
	}, nil
}

func buildPad(b *builder) (kernel, error) {
	mode := b.str("mode", "constant")
	if mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap" {
		return nil, unsupportedf("mode=%q is not supported", mode)
	}
	attrPads := b.ints("pads")
	if b.opset < 11 && attrPads == nil {
		attrPads = b.ints("paddings")
	}
	attrValue := b.float("value", 0)
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		r := len(t.Shape)
		pads := attrPads
		var cval *tensor.Tensor
		if b.opset >= 11 {
			pads = asInt64(in[1])
			if len(in) > 2 && in[2] != nil && in[2].Len() > 0 {
				cval = in[2]
			}
		}
		axes := make([]int, r)
		for i := range axes {
			axes[i] = i
		}
		if len(in) > 3 && in[3] != nil {
			axes = axes[:0]
			for _, a := range asInt64(in[3]) {
				ax, err := normAxis(a, r)
				if err != nil {
					return nil, err
				}
				axes = append(axes, ax)
			}
		}
		if len(pads) != 2*len(axes) {
			return nil, fmt.Errorf("pads %v do not fit %d axes", pads, len(axes))
		}
		begin, end := make([]int, r), make([]int, r)
		for i, ax := range axes {
			begin[ax], end[ax] = int(pads[i]), int(pads[len(axes)+i])
		}
		os := make([]int, r)
		for d := range r {
			os[d] = t.Shape[d] + begin[d] + end[d]
			if os[d] < 0 {
				return nil, fmt.Errorf("pads %v remove more than dimension %d holds", pads, d)
			}
		}
		out := tensor.New(t.DType, os...)
		n := out.Len()
		if cval == nil && t.DType == tensor.Float {
			cval = tensor.FromFloat32([]float32{attrValue})
		}
		// Source index per output element; -1 for the constant.
		idx := make([]int, n)
		pos := make([]int, r)
		constant := false
		for i := 0; i < n; i++ {
			unravelIdx(i, os, pos)
			off := 0
			inside := true
			for d := 0; d < r; d++ {
				p := pos[d] - begin[d]
				dim := t.Shape[d]
				if p < 0 || p >= dim {
					switch mode {
					case "constant":
						inside = false
					case "edge":
						p = min(max(p, 0), dim-1)
					case "reflect":
						if dim == 1 {
							p = 0
						} else {
							period := 2 * (dim - 1)
							p = ((p % period) + period) % period
							if p >= dim {
								p = period - p
							}
						}
					case "wrap":
						p = ((p % dim) + dim) % dim
					}
				}
				off = off*dim + p
			}
			if !inside {
				idx[i] = -1
				constant = true
			} else {
				idx[i] = off
			}
		}
		if !constant {
			gatherFlat(t.Data, out.Data, idx)
			return one(out), nil
		}
		for i, j := range idx {
			if j >= 0 {
				copyRange(out.Data, i, t.Data, j, 1)
			} else if cval != nil {
				copyRange(out.Data, i, cval.Data, 0, 1)
			}
		}
		return one(out), nil
	}, nil
}

func buildArg(isMax bool) func(b *builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		axis, keep, last := b.int("axis", 0), b.int("keepdims", 1) != 0, b.int("select_last_index", 0) != 0
		return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
			t := in[0]
			ax, err := normAxis(axis, len(t.Shape))
			if err != nil {
				return nil, err
			}
			x, err := asFloat32Exact(t)
			if err != nil {
				return nil, err
			}
			outer := tensor.NumElements(t.Shape[:ax])
			inner := tensor.NumElements(t.Shape[ax+1:])
			dim := t.Shape[ax]
			res := make([]int64, outer*inner)
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					best := 0
					bv := x[o*dim*inner+i]
					for j := 1; j < dim; j++ {
						v := x[(o*dim+j)*inner+i]
						better := v > bv || last && v == bv
						if !isMax {
							better = v < bv || last && v == bv
						}
						if better {
							best, bv = j, v
						}
					}
					res[o*inner+i] = int64(best)
				}
			}
			os := slices.Clone(t.Shape)
			if keep {
				os[ax] = 1
			} else {
				os = slices.Delete(os, ax, ax+1)
			}
			return one(tensor.FromInt64(res, os...)), nil
		}, nil
	}
}

func buildTopK(b *builder) (kernel, error) {
	axis := b.int("axis", -1)
	largest, sorted := b.int("largest", 1) != 0, b.int("sorted", 1) != 0
	attrK := b.int("k", -1)
	_ = sorted // results are always sorted, which satisfies sorted=0 too
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		k := attrK
		if len(in) > 1 && in[1] != nil {
			k = asInt64(in[1])[0]
		}
		ax, err := normAxis(axis, len(t.Shape))
		if err != nil {
			return nil, err
		}
		dim := t.Shape[ax]
		if k < 0 || int(k) > dim {
			return nil, fmt.Errorf("k=%d is out of range for dimension %d", k, dim)
		}
		x, err := asFloat32Exact(t)
		if err != nil {
			return nil, err
		}
		outer := tensor.NumElements(t.Shape[:ax])
		inner := tensor.NumElements(t.Shape[ax+1:])
		os := slices.Clone(t.Shape)
		os[ax] = int(k)
		vals := make([]float64, outer*int(k)*inner)
		inds := make([]int64, len(vals))
		order := make([]int, dim)
		for o := 0; o < outer; o++ {
			for i := 0; i < inner; i++ {
				for j := range order {
					order[j] = j
				}
				at := func(j int) float64 { return x[(o*dim+j)*inner+i] }
				sort.SliceStable(order, func(p, q int) bool {
					a, b := at(order[p]), at(order[q])
					if largest {
						return a > b
					}
					return a < b
				})
				for j := 0; j < int(k); j++ {
					p := (o*int(k)+j)*inner + i
					vals[p] = at(order[j])
					inds[p] = int64(order[j])
				}
			}
		}
		v, err := castTensor(&tensor.Tensor{DType: tensor.Double, Shape: os, Data: vals}, t.DType)
		if err != nil {
			return nil, err
		}
		return []*tensor.Tensor{v, tensor.FromInt64(inds, os...)}, nil
	}, nil
}

// buildOneHot builds OneHot: the output is indices with an axis of depth
// positions inserted at axis, each value values[1] where the position is
// the index (a negative index counts from depth) and values[0] elsewhere;
// an index outside [−depth, depth) gives values[0] everywhere.
func buildOneHot(b *builder) (kernel, error) {
	axis := b.int("axis", -1)
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		ind, depthT, values := in[0], in[1], in[2]
		if depthT.Len() != 1 {
			return nil, fmt.Errorf("depth must have one element, has shape %v", depthT.Shape)
		}
		if values.Len() != 2 {
			return nil, fmt.Errorf("values must be [off, on], has shape %v", values.Shape)
		}
		depth := int(asInt64(depthT)[0])
		if depth < 1 {
			return nil, fmt.Errorf("depth %d is not positive", depth)
		}
		ax, err := normAxis(axis, len(ind.Shape)+1)
		if err != nil {
			return nil, err
		}
		os := slices.Insert(slices.Clone(ind.Shape), ax, depth)
		inner := tensor.NumElements(ind.Shape[ax:])
		sel := make([]int, tensor.NumElements(os)) // 0: off, 1: on
		for i, k := range asInt64(ind) {
			if k < 0 {
				k += int64(depth)
			}
			if k < 0 || k >= int64(depth) {
				continue
			}
			outer, rest := i/inner, i%inner
			sel[(outer*depth+int(k))*inner+rest] = 1
		}
		out := tensor.New(values.DType, os...)
		gatherFlat(values.Data, out.Data, sel)
		return one(out), nil
	}, nil
}

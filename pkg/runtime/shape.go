package runtime

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func buildShape(b *builder) (kernel, error) {
	start, end := b.int("start", 0), b.int("end", 1<<62)
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		r := int64(len(in[0].Shape))
		s, e := clampIndex(start, r), clampIndex(end, r)
		dims := []int64{}
		for i := s; i < e; i++ {
			dims = append(dims, int64(in[0].Shape[i]))
		}
		return one(tensor.FromInt64(dims, len(dims))), nil
	}, nil
}

// clampIndex maps a possibly negative index into [0, n].
func clampIndex(i, n int64) int64 {
	if i < 0 {
		i += n
	}
	return min(max(i, 0), n)
}

func sizeKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return one(tensor.FromInt64([]int64{int64(in[0].Len())})), nil
}

// view returns t with another shape sharing its data.
func view(t *tensor.Tensor, shape []int) *tensor.Tensor {
	return &tensor.Tensor{DType: t.DType, Shape: shape, Data: t.Data}
}

func buildReshape(b *builder) (kernel, error) {
	allowZero := b.int("allowzero", 0) != 0
	if b.opset < 5 {
		return nil, unsupportedf("Reshape-1 (shape attribute) is not supported")
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		want := asInt64(in[1])
		shape, err := reshapeDims(in[0].Shape, want, allowZero)
		if err != nil {
			return nil, err
		}
		return one(view(in[0], shape)), nil
	}, nil
}

func reshapeDims(in []int, want []int64, allowZero bool) ([]int, error) {
	shape := make([]int, len(want))
	infer := -1
	known := 1
	for i, d := range want {
		switch {
		case d == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("shape %v has more than one -1", want)
			}
			infer = i
			continue
		case d == 0 && !allowZero:
			if i >= len(in) {
				return nil, fmt.Errorf("shape %v copies dimension %d of input shape %v, which has none", want, i, in)
			}
			shape[i] = in[i]
		case d < 0:
			return nil, fmt.Errorf("shape %v has a negative dimension", want)
		default:
			shape[i] = int(d)
		}
		known *= shape[i]
	}
	n := tensor.NumElements(in)
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			return nil, fmt.Errorf("cannot reshape %v to %v", in, want)
		}
		shape[infer] = n / known
	}
	if tensor.NumElements(shape) != n {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v", in, n, want)
	}
	return shape, nil
}

func buildFlatten(b *builder) (kernel, error) {
	axis := b.int("axis", 1)
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		r := len(in[0].Shape)
		a := int(axis)
		if a < 0 {
			a += r
		}
		if a < 0 || a > r {
			return nil, fmt.Errorf("axis %d is out of range for rank %d", axis, r)
		}
		outer := tensor.NumElements(in[0].Shape[:a])
		return one(view(in[0], []int{outer, tensor.NumElements(in[0].Shape[a:])})), nil
	}, nil
}

// axesInput returns the axes from the attribute (old opsets) or input 1.
func axesFrom(attr []int64, in []*tensor.Tensor, idx int) []int64 {
	if idx < len(in) && in[idx] != nil {
		return asInt64(in[idx])
	}
	return attr
}

func buildSqueeze(b *builder) (kernel, error) {
	attr := b.ints("axes")
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		axes := axesFrom(attr, in, 1)
		shape := in[0].Shape
		drop := make([]bool, len(shape))
		if len(axes) == 0 {
			for i, d := range shape {
				drop[i] = d == 1
			}
		}
		for _, a := range axes {
			ax, err := normAxis(a, len(shape))
			if err != nil {
				return nil, err
			}
			if shape[ax] != 1 {
				return nil, fmt.Errorf("cannot squeeze axis %d of shape %v", a, shape)
			}
			drop[ax] = true
		}
		out := []int{}
		for i, d := range shape {
			if !drop[i] {
				out = append(out, d)
			}
		}
		return one(view(in[0], out)), nil
	}, nil
}

func buildUnsqueeze(b *builder) (kernel, error) {
	attr := b.ints("axes")
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		axes := axesFrom(attr, in, 1)
		r := len(in[0].Shape) + len(axes)
		ins := make([]bool, r)
		for _, a := range axes {
			ax, err := normAxis(a, r)
			if err != nil {
				return nil, err
			}
			if ins[ax] {
				return nil, fmt.Errorf("axis %d is repeated", a)
			}
			ins[ax] = true
		}
		out := make([]int, r)
		j := 0
		for i := range out {
			if ins[i] {
				out[i] = 1
			} else {
				out[i] = in[0].Shape[j]
				j++
			}
		}
		return one(view(in[0], out)), nil
	}, nil
}

func buildTranspose(b *builder) (kernel, error) {
	perm := b.ints("perm")
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		r := len(t.Shape)
		p := make([]int, r)
		if perm == nil {
			for i := range p {
				p[i] = r - 1 - i
			}
		} else {
			if len(perm) != r {
				return nil, fmt.Errorf("perm %v does not fit rank %d", perm, r)
			}
			for i, v := range perm {
				ax, err := normAxis(v, r)
				if err != nil {
					return nil, err
				}
				p[i] = ax
			}
		}
		if _, ok := t.Data.([]float32); ok {
			return one(transposeF32(rc, t, p)), nil
		}
		return one(transpose(t, p)), nil
	}, nil
}

// transposeF32 is transpose for float32 data, into a buffer of the run's
// arena: an odometer over the output's outer dimensions and a strided
// copy along its last one, without transpose's index array (an int per
// element, allocated at every run).
// Swapping the last two axes (the others kept) goes by tiles instead, so
// that both the rows read and the rows written stay in cache, and so does
// any other permutation that moves the input's last axis (transposePlanes).
func transposeF32(rc *runCtx, t *tensor.Tensor, perm []int) *tensor.Tensor {
	os, st := permutedStrides(t.Shape, perm)
	out := rc.newFloatOut(os...)
	if r := len(perm); r >= 2 && perm[r-2] == r-1 && perm[r-1] == r-2 && slices.Equal(perm[:r-2], identityPerm(r-2)) {
		transposeTiles(out.Float32s(), t.Float32s(), t.Shape[r-2], t.Shape[r-1])
		return out
	}
	if r := len(perm); r >= 2 {
		if q := slices.Index(perm, r-1); q < r-1 && os[q] > 1 && os[r-1] > 1 {
			transposePlanes(out.Float32s(), t.Float32s(), os, st, q)
			return out
		}
	}
	stridedCopy(out.Float32s(), t.Float32s(), os, st, 0)
	return out
}

// transposePlanes is stridedCopy for a permutation whose last output axis
// is not the input's last: output axis q reads the input's contiguous
// last axis. For every position of the other axes, the plane spanned by
// q and the last axis is copied in tiles, so that the input rows read
// (contiguous along q) and the output rows written (contiguous along the
// last axis) both stay in cache; the strided copy read one element per
// cache line (the keys of attention, transposed per head).
func transposePlanes(y, x []float32, os, st []int, q int) {
	const tile = 16
	if len(y) == 0 {
		return
	}
	r := len(os)
	ys := rowMajorStrides(os)
	rows, cols := os[q], os[r-1]
	ysq, xsc := ys[q], st[r-1]
	var outer []int
	for d := 0; d < r-1; d++ {
		if d != q {
			outer = append(outer, d)
		}
	}
	pos := make([]int, len(outer))
	for xb, yb := 0, 0; ; {
		for i0 := 0; i0 < rows; i0 += tile {
			i1 := min(i0+tile, rows)
			for j0 := 0; j0 < cols; j0 += tile {
				j1 := min(j0+tile, cols)
				for i := i0; i < i1; i++ {
					yr := y[yb+i*ysq+j0 : yb+i*ysq+j1]
					src := xb + i + j0*xsc
					for j := range yr {
						yr[j] = x[src]
						src += xsc
					}
				}
			}
		}
		d := len(outer) - 1
		for ; d >= 0; d-- {
			a := outer[d]
			pos[d]++
			xb += st[a]
			yb += ys[a]
			if pos[d] < os[a] {
				break
			}
			xb -= st[a] * os[a]
			yb -= ys[a] * os[a]
			pos[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func identityPerm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// transposeTiles writes each rows×cols matrix of x transposed into y, in
// tiles of transposeTile×transposeTile.
func transposeTiles(y, x []float32, rows, cols int) {
	const tile = 16
	size := rows * cols
	if size == 0 {
		return
	}
	for m := 0; m < len(x); m += size {
		xm, ym := x[m:m+size], y[m:m+size]
		for i0 := 0; i0 < rows; i0 += tile {
			i1 := min(i0+tile, rows)
			for j0 := 0; j0 < cols; j0 += tile {
				j1 := min(j0+tile, cols)
				for j := j0; j < j1; j++ {
					yr := ym[j*rows : (j+1)*rows]
					for i := i0; i < i1; i++ {
						yr[i] = xm[i*cols+j]
					}
				}
			}
		}
	}
}

// permutedStrides returns the shape of t's shape permuted by perm (out
// dim i is input dim perm[i]) and, per out dim, its stride in the input.
func permutedStrides(shape, perm []int) (os, st []int) {
	r := len(shape)
	os, st = make([]int, r), make([]int, r)
	instr := rowMajorStrides(shape)
	for i, p := range perm {
		os[i], st[i] = shape[p], instr[p]
	}
	return os, st
}

// rowMajorStrides returns the element strides of a row-major shape.
func rowMajorStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// stridedCopy fills y, of shape os, with y[i₀,…] = x[base + Σ iₖ·st[k]]:
// an odometer over the outer dimensions and a copy along the last one,
// contiguous when its stride is 1 (Transpose of float32 data, Slice).
func stridedCopy[T any](y, x []T, os, st []int, base int) {
	r := len(os)
	if len(y) == 0 {
		return
	}
	if r == 0 {
		y[0] = x[base]
		return
	}
	inner, is := os[r-1], st[r-1]
	pos := make([]int, r-1)
	off := base
	for o := 0; o < len(y); o += inner {
		row := y[o : o+inner]
		if is == 1 {
			copy(row, x[off:off+inner])
		} else {
			src := off
			for j := range row {
				row[j] = x[src]
				src += is
			}
		}
		for d := r - 2; d >= 0; d-- {
			pos[d]++
			off += st[d]
			if pos[d] < os[d] {
				break
			}
			off -= st[d] * os[d]
			pos[d] = 0
		}
	}
}

// transpose permutes the axes of t: out dim i is input dim perm[i].
func transpose(t *tensor.Tensor, perm []int) *tensor.Tensor {
	os, st := permutedStrides(t.Shape, perm)
	out := tensor.New(t.DType, os...)
	stridedGather(out.Data, t.Data, os, st, 0)
	return out
}

func buildConcat(b *builder) (kernel, error) {
	if !b.has("axis") && b.opset >= 4 {
		return nil, fmt.Errorf("attribute axis is required")
	}
	axis := b.int("axis", 1)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		var parts []*tensor.Tensor
		for _, t := range in {
			if t != nil {
				parts = append(parts, t)
			}
		}
		if out := rc.concatInPlace(parts, axis); out != nil {
			return one(out), nil
		}
		out, err := concat(rc, parts, axis)
		return one(out), err
	}, nil
}

func concat(rc *runCtx, parts []*tensor.Tensor, axis int64) (*tensor.Tensor, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("no inputs")
	}
	first := parts[0]
	r := len(first.Shape)
	ax, err := normAxis(axis, r)
	if err != nil {
		return nil, err
	}
	os := slices.Clone(first.Shape)
	os[ax] = 0
	for _, p := range parts {
		if len(p.Shape) != r || p.DType != first.DType {
			return nil, fmt.Errorf("inputs %s and %s cannot be concatenated", first, p)
		}
		for d := range r {
			if d != ax && p.Shape[d] != first.Shape[d] {
				return nil, fmt.Errorf("inputs %s and %s differ outside axis %d", first, p, ax)
			}
		}
		os[ax] += p.Shape[ax]
	}
	var out *tensor.Tensor
	if first.DType == tensor.Float {
		out = rc.newFloatOut(os...) // every element is copied in below
	} else {
		out = tensor.New(first.DType, os...)
	}
	outer := tensor.NumElements(os[:ax])
	inner := tensor.NumElements(os[ax+1:])
	orow := os[ax] * inner
	if o, ok := out.Data.([]float32); ok {
		var pieces []floatPiece
		off := 0
		for _, p := range parts {
			prow := p.Shape[ax] * inner
			src := p.Data.([]float32)
			for i := 0; i < outer; i++ {
				pieces = append(pieces, floatPiece{o[i*orow+off : i*orow+off+prow], src[i*prow : (i+1)*prow]})
			}
			off += prow
		}
		copyPieces(rc, pieces, out.Len())
		return out, nil
	}
	off := 0
	for _, p := range parts {
		prow := p.Shape[ax] * inner
		for o := 0; o < outer; o++ {
			copyRange(out.Data, o*orow+off, p.Data, o*prow, prow)
		}
		off += prow
	}
	return out, nil
}

// floatPiece is one copy of src into dst (of the same length).
type floatPiece struct{ dst, src []float32 }

// copyPieces runs the copies, n elements in all, with the elements split
// evenly over the run's threads: a SqueezeNet Concat copies megabytes,
// single-threaded it left the other thread waiting.
func copyPieces(rc *runCtx, pieces []floatPiece, n int) {
	threads := 1
	if rc != nil {
		threads = rc.threads
	}
	kernels.Parallel(threads, n, parGrain, func(lo, hi int) {
		at := 0
		for _, p := range pieces {
			a, b := max(lo, at), min(hi, at+len(p.src))
			if a < b {
				copy(p.dst[a-at:b-at], p.src[a-at:b-at])
			}
			at += len(p.src)
		}
	})
}

func buildSplit(b *builder) (kernel, error) {
	axis := b.int("axis", 0)
	attrSplit := b.ints("split")
	nout := len(b.n.Outputs)
	numOutputs := b.int("num_outputs", 0)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		ax, err := normAxis(axis, len(t.Shape))
		if err != nil {
			return nil, err
		}
		dim := t.Shape[ax]
		sizes := make([]int, 0, nout)
		split := attrSplit
		if len(in) > 1 && in[1] != nil {
			split = asInt64(in[1])
		}
		if split != nil {
			if len(split) != nout {
				return nil, fmt.Errorf("split %v does not have %d entries", split, nout)
			}
			for _, s := range split {
				sizes = append(sizes, int(s))
			}
		} else {
			n := nout
			if numOutputs > 0 {
				n = int(numOutputs)
			}
			chunk := (dim + n - 1) / n
			for i := 0; i < n; i++ {
				sizes = append(sizes, max(0, min(chunk, dim-i*chunk)))
			}
		}
		total := 0
		for _, s := range sizes {
			total += s
		}
		if total != dim {
			return nil, fmt.Errorf("split sizes %v do not add up to dimension %d", sizes, dim)
		}
		outs := make([]*tensor.Tensor, len(sizes))
		start := 0
		for i, s := range sizes {
			outs[i] = sliceAxis(rc, t, ax, start, s)
			start += s
		}
		return outs, nil
	}, nil
}

// sliceAxis copies elements [start, start+n) along axis ax; float32
// data into the run's arena, split over its threads.
func sliceAxis(rc *runCtx, t *tensor.Tensor, ax, start, n int) *tensor.Tensor {
	os := slices.Clone(t.Shape)
	os[ax] = n
	outer := tensor.NumElements(t.Shape[:ax])
	inner := tensor.NumElements(t.Shape[ax+1:])
	if x, ok := t.Data.([]float32); ok {
		out := rc.newFloatOut(os...) // every element is copied in below
		y := out.Float32s()
		pieces := make([]floatPiece, outer)
		for o := range pieces {
			from := (o*t.Shape[ax] + start) * inner
			pieces[o] = floatPiece{y[o*n*inner : (o+1)*n*inner], x[from : from+n*inner]}
		}
		copyPieces(rc, pieces, len(y))
		return out
	}
	out := tensor.New(t.DType, os...)
	for o := 0; o < outer; o++ {
		copyRange(out.Data, o*n*inner, t.Data, (o*t.Shape[ax]+start)*inner, n*inner)
	}
	return out
}

// buildSlice reads starts, ends and axes from attributes before opset 10
// and from inputs after.
func buildSlice(b *builder) (kernel, error) {
	if b.opset >= 10 {
		return sliceKernel, nil
	}
	starts, ends, axes := b.ints("starts"), b.ints("ends"), b.ints("axes")
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		args := []*tensor.Tensor{in[0], tensor.FromInt64(starts, len(starts)), tensor.FromInt64(ends, len(ends))}
		if axes != nil {
			args = append(args, tensor.FromInt64(axes, len(axes)))
		}
		return sliceKernel(rc, args)
	}, nil
}

func sliceKernel(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	t := in[0]
	r := len(t.Shape)
	starts, ends := asInt64(in[1]), asInt64(in[2])
	if len(starts) != len(ends) {
		return nil, fmt.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	axes := make([]int64, len(starts))
	for i := range axes {
		axes[i] = int64(i)
	}
	if len(in) > 3 && in[3] != nil {
		axes = asInt64(in[3])
	}
	steps := make([]int64, len(starts))
	for i := range steps {
		steps[i] = 1
	}
	if len(in) > 4 && in[4] != nil {
		steps = asInt64(in[4])
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		return nil, fmt.Errorf("starts, ends, axes and steps differ in length")
	}
	st := make([]int, r)
	sp := make([]int, r)
	os := slices.Clone(t.Shape)
	for i := range sp {
		sp[i] = 1
	}
	for i, a := range axes {
		ax, err := normAxis(a, r)
		if err != nil {
			return nil, err
		}
		dim := int64(t.Shape[ax])
		step := steps[i]
		if step == 0 {
			return nil, fmt.Errorf("step 0 on axis %d", a)
		}
		s, e := starts[i], ends[i]
		if s < 0 {
			s += dim
		}
		if e < 0 {
			e += dim
		}
		var n int64
		if step > 0 {
			s, e = min(max(s, 0), dim), min(max(e, 0), dim)
			n = max(0, (e-s+step-1)/step)
		} else {
			s, e = min(max(s, -1), dim-1), min(max(e, -1), dim-1)
			n = max(0, (s-e+(-step)-1)/(-step))
		}
		st[ax], sp[ax], os[ax] = int(s), int(step), int(n)
	}
	instr := rowMajorStrides(t.Shape)
	base, strides := 0, make([]int, r)
	for d := range r {
		base += st[d] * instr[d]
		strides[d] = sp[d] * instr[d]
	}
	if x, ok := t.Data.([]float32); ok {
		out := rc.newFloatOut(os...)
		stridedCopy(out.Float32s(), x, os, strides, base)
		return one(out), nil
	}
	out := tensor.New(t.DType, os...)
	stridedGather(out.Data, t.Data, os, strides, base)
	return one(out), nil
}

func expandKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	want := asInt64(in[1])
	ws := make([]int, len(want))
	for i, d := range want {
		ws[i] = int(d)
	}
	os, err := broadcastShape(in[0].Shape, ws)
	if err != nil {
		return nil, err
	}
	return one(expandTo(in[0], os)), nil
}

func tileKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	t := in[0]
	reps := asInt64(in[1])
	r := len(t.Shape)
	if len(reps) != r {
		return nil, fmt.Errorf("repeats %v do not fit rank %d", reps, r)
	}
	os := make([]int, r)
	for i, d := range t.Shape {
		os[i] = d * int(reps[i])
	}
	out := tensor.New(t.DType, os...)
	n := out.Len()
	idx := make([]int, n)
	pos := make([]int, r)
	for i := 0; i < n; i++ {
		off := 0
		for d := 0; d < r; d++ {
			off = off*t.Shape[d] + pos[d]%t.Shape[d]
		}
		idx[i] = off
		for d := r - 1; d >= 0; d-- {
			pos[d]++
			if pos[d] < os[d] {
				break
			}
			pos[d] = 0
		}
	}
	gatherFlat(t.Data, out.Data, idx)
	return one(out), nil
}

func buildConstantOfShape(b *builder) (kernel, error) {
	val := tensor.FromFloat32([]float32{0}, 1)
	if a := b.attr("value"); a != nil && a.GetT() != nil {
		t, err := tensor.FromProto(a.GetT(), b.c.model)
		if err != nil {
			return nil, err
		}
		if val, err = toCompute(t); err != nil {
			return nil, err
		}
		if val.Len() != 1 {
			return nil, fmt.Errorf("value must have one element, has %d", val.Len())
		}
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		dims := asInt64(in[0])
		shape := make([]int, len(dims))
		for i, d := range dims {
			if d < 0 {
				return nil, fmt.Errorf("negative dimension in %v", dims)
			}
			shape[i] = int(d)
		}
		out := tensor.New(val.DType, shape...)
		idx := make([]int, out.Len())
		gatherFlat(val.Data, out.Data, idx)
		return one(out), nil
	}, nil
}

func rangeKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if in[0].DType == tensor.Float {
		s, l, d := in[0].Float32s()[0], in[1].Float32s()[0], in[2].Float32s()[0]
		n := max(0, int(ceil64((float64(l)-float64(s))/float64(d))))
		out := make([]float32, n)
		for i := range out {
			out[i] = s + float32(i)*d
		}
		return one(tensor.FromFloat32(out, n)), nil
	}
	s, l, d := asInt64(in[0])[0], asInt64(in[1])[0], asInt64(in[2])[0]
	if d == 0 {
		return nil, fmt.Errorf("delta is 0")
	}
	n := max(0, int(ceil64(float64(l-s)/float64(d))))
	res := make([]int64, n)
	for i := range res {
		res[i] = s + int64(i)*d
	}
	out, err := castTensor(tensor.FromInt64(res, n), in[0].DType)
	return one(out), err
}

func nonZeroKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	t := in[0]
	f, err := asFloat32Exact(t)
	if err != nil {
		return nil, err
	}
	r := len(t.Shape)
	var hits []int
	for i, v := range f {
		if v != 0 {
			hits = append(hits, i)
		}
	}
	out := make([]int64, r*len(hits))
	pos := make([]int, r)
	for j, h := range hits {
		unravelIdx(h, t.Shape, pos)
		for d := 0; d < r; d++ {
			out[d*len(hits)+j] = int64(pos[d])
		}
	}
	return one(tensor.FromInt64(out, r, len(hits))), nil
}

func unravelIdx(i int, dims, idx []int) {
	for d := len(dims) - 1; d >= 0; d-- {
		idx[d] = i % dims[d]
		i /= dims[d]
	}
}

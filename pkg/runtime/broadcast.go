package runtime

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// broadcastShape is the multidirectional (numpy) broadcast of shapes.
func broadcastShape(shapes ...[]int) ([]int, error) {
	r := 0
	for _, s := range shapes {
		r = max(r, len(s))
	}
	out := make([]int, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case o == d || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %v cannot be broadcast together", shapes)
			}
		}
	}
	return out, nil
}

// bcastStrides returns in's element strides aligned to out's rank, 0 on
// broadcast dimensions.
func bcastStrides(in, out []int) []int {
	st := make([]int, len(out))
	off := len(out) - len(in)
	s := 1
	for i := len(in) - 1; i >= 0; i-- {
		if in[i] != 1 {
			st[off+i] = s
		}
		s *= in[i]
	}
	return st
}

// binaryLoop computes o[i] = f(a[ia], b[ib]) over the broadcast shape os.
func binaryLoop[A, B, O any](a []A, as []int, b []B, bs []int, o []O, os []int, f func(A, B) O) {
	switch {
	case len(o) == 0:
		return
	case slices.Equal(as, bs):
		for i := range o {
			o[i] = f(a[i], b[i])
		}
		return
	case len(b) == 1 && len(a) == len(o):
		y := b[0]
		for i := range o {
			o[i] = f(a[i], y)
		}
		return
	case len(a) == 1 && len(b) == len(o):
		x := a[0]
		for i := range o {
			o[i] = f(x, b[i])
		}
		return
	}
	r := len(os)
	sa, sb := bcastStrides(as, os), bcastStrides(bs, os)
	inner := os[r-1]
	ia, ib := sa[r-1], sb[r-1]
	idx := make([]int, r)
	pa, pb := 0, 0
	for off := 0; off < len(o); off += inner {
		row := o[off : off+inner]
		x, y := pa, pb
		for j := range row {
			row[j] = f(a[x], b[y])
			x += ia
			y += ib
		}
		// Advance the odometer over the outer dimensions.
		for d := r - 2; d >= 0; d-- {
			idx[d]++
			pa += sa[d]
			pb += sb[d]
			if idx[d] < os[d] {
				break
			}
			pa -= sa[d] * os[d]
			pb -= sb[d] * os[d]
			idx[d] = 0
		}
	}
}

// expandTo copies x broadcast to shape out.
func expandTo(t *tensor.Tensor, shape []int) *tensor.Tensor {
	out := tensor.New(t.DType, shape...)
	stridedGather(out.Data, t.Data, shape, bcastStrides(t.Shape, shape), 0)
	return out
}

// bcastIndex returns, for each element of the broadcast shape out, the
// flat index of the element of shape in that it reads.
func bcastIndex(in, out []int) []int {
	return stridedIndex(out, bcastStrides(in, out), 0)
}

// stridedIndex returns, for each element of shape os in row-major order,
// base + Σ pos[k]·st[k].
func stridedIndex(os, st []int, base int) []int {
	n := tensor.NumElements(os)
	idx := make([]int, n)
	if n == 0 {
		return idx
	}
	r := len(os)
	pos := make([]int, r)
	p := base
	for i := 0; i < n; i++ {
		idx[i] = p
		for d := r - 1; d >= 0; d-- {
			pos[d]++
			p += st[d]
			if pos[d] < os[d] {
				break
			}
			p -= st[d] * os[d]
			pos[d] = 0
		}
	}
	return idx
}

// stridedGather fills dst, of shape os, with dst[pos] = src[base + Σ
// pos[k]·st[k]] for slices of the same element type: Transpose, Slice and
// broadcasts (stride 0). The common types copy rows (stridedCopy); the
// others go through an index per element.
func stridedGather(dst, src any, os, st []int, base int) {
	switch s := src.(type) {
	case []float32:
		stridedCopy(dst.([]float32), s, os, st, base)
	case []float64:
		stridedCopy(dst.([]float64), s, os, st, base)
	case []int64:
		stridedCopy(dst.([]int64), s, os, st, base)
	case []int32:
		stridedCopy(dst.([]int32), s, os, st, base)
	case []uint8:
		stridedCopy(dst.([]uint8), s, os, st, base)
	case []bool:
		stridedCopy(dst.([]bool), s, os, st, base)
	default:
		gatherFlat(src, dst, stridedIndex(os, st, base))
	}
}

// gatherFlat sets dst[i] = src[idx[i]] for slices of the same element type.
func gatherFlat(src, dst any, idx []int) {
	switch s := src.(type) {
	case []float32:
		gatherT(s, dst.([]float32), idx)
	case []float64:
		gatherT(s, dst.([]float64), idx)
	case []int8:
		gatherT(s, dst.([]int8), idx)
	case []uint8:
		gatherT(s, dst.([]uint8), idx)
	case []int16:
		gatherT(s, dst.([]int16), idx)
	case []uint16:
		gatherT(s, dst.([]uint16), idx)
	case []int32:
		gatherT(s, dst.([]int32), idx)
	case []uint32:
		gatherT(s, dst.([]uint32), idx)
	case []int64:
		gatherT(s, dst.([]int64), idx)
	case []uint64:
		gatherT(s, dst.([]uint64), idx)
	case []bool:
		gatherT(s, dst.([]bool), idx)
	case []string:
		gatherT(s, dst.([]string), idx)
	default:
		panic(fmt.Sprintf("gather of %T", src))
	}
}

func gatherT[T any](src, dst []T, idx []int) {
	for i, j := range idx {
		dst[i] = src[j]
	}
}

// copyRange copies src[so:so+n] into dst[do:do+n] for same-typed slices.
func copyRange(dst any, do int, src any, so, n int) {
	switch s := src.(type) {
	case []float32:
		copy(dst.([]float32)[do:do+n], s[so:so+n])
	case []float64:
		copy(dst.([]float64)[do:do+n], s[so:so+n])
	case []int8:
		copy(dst.([]int8)[do:do+n], s[so:so+n])
	case []uint8:
		copy(dst.([]uint8)[do:do+n], s[so:so+n])
	case []int16:
		copy(dst.([]int16)[do:do+n], s[so:so+n])
	case []uint16:
		copy(dst.([]uint16)[do:do+n], s[so:so+n])
	case []int32:
		copy(dst.([]int32)[do:do+n], s[so:so+n])
	case []uint32:
		copy(dst.([]uint32)[do:do+n], s[so:so+n])
	case []int64:
		copy(dst.([]int64)[do:do+n], s[so:so+n])
	case []uint64:
		copy(dst.([]uint64)[do:do+n], s[so:so+n])
	case []bool:
		copy(dst.([]bool)[do:do+n], s[so:so+n])
	case []string:
		copy(dst.([]string)[do:do+n], s[so:so+n])
	default:
		panic(fmt.Sprintf("copy of %T", src))
	}
}

// parGrain is the fewest elements an elementwise task gets: below it the
// hand-off to a worker costs more than the work.
const parGrain = 1 << 14

// binaryLoopPar is binaryLoop with the output split along its leading
// dimension over up to threads workers; each element is computed exactly
// as binaryLoop computes it.
func binaryLoopPar[A, B, O any](threads int, a []A, as []int, b []B, bs []int, o []O, os []int, f func(A, B) O) {
	if threads <= 1 || len(o) < 2*parGrain || len(os) == 0 || os[0] < 2 {
		binaryLoop(a, as, b, bs, o, os, f)
		return
	}
	inner := len(o) / os[0]
	// An operand of full rank whose leading dimension is not broadcast is
	// split with the output; any other operand is passed whole.
	split := func(s []int) bool { return len(s) == len(os) && s[0] == os[0] && s[0] > 1 }
	sa, sb := split(as), split(bs)
	kernels.Parallel(threads, os[0], max(1, parGrain/max(1, inner)), func(lo, hi int) {
		sub := append([]int{hi - lo}, os[1:]...)
		aa, ash := a, as
		if sa {
			per := len(a) / as[0]
			aa, ash = a[lo*per:hi*per], append([]int{hi - lo}, as[1:]...)
		}
		bb, bsh := b, bs
		if sb {
			per := len(b) / bs[0]
			bb, bsh = b[lo*per:hi*per], append([]int{hi - lo}, bs[1:]...)
		}
		binaryLoop(aa, ash, bb, bsh, o[lo*inner:hi*inner], sub, f)
	})
}

// binaryF32 is binaryLoop for float32 arithmetic: it computes the same
// values (one IEEE operation per element) but merges adjacent dimensions
// that broadcast alike and runs each innermost row through a kernel with
// the operation hoisted out of the loop.
func binaryF32(op kernels.BinOp, a []float32, as []int, b []float32, bs []int, o []float32, os []int) {
	if len(o) == 0 {
		return
	}
	if len(a) == len(o) && len(b) == len(o) {
		kernels.Binary(op, o, a, b)
		return
	}
	if len(b) == 1 && len(a) == len(o) {
		kernels.BinaryScalar(op, o, a, b[0], false)
		return
	}
	if len(a) == 1 && len(b) == len(o) {
		kernels.BinaryScalar(op, o, b, a[0], true)
		return
	}
	// Coalesce: dims of extent 1 vanish; a dim joins the previous one when
	// each operand either spans both or broadcasts over both.
	r := len(os)
	var shape, sa, sb [8]int
	n := 0
	ok := r <= len(shape)
	for d := 0; ok && d < r; d++ {
		if os[d] == 1 {
			continue
		}
		ad, bd := dimAt(as, d, r), dimAt(bs, d, r)
		if n > 0 && (ad == 1) == (sa[n-1] == 0) && (bd == 1) == (sb[n-1] == 0) {
			shape[n-1] *= os[d]
			continue
		}
		if n == len(shape) {
			ok = false
			break
		}
		shape[n] = os[d]
		sa[n], sb[n] = min(ad-1, 1), min(bd-1, 1) // 1 spans, 0 broadcasts
		n++
	}
	if !ok {
		binaryLoop(a, as, b, bs, o, os, op.Apply)
		return
	}
	if n == 0 {
		o[0] = op.Apply(a[0], b[0])
		return
	}
	// Element strides of each operand over the coalesced dims.
	var stA, stB [8]int
	ea, eb := 1, 1
	for d := n - 1; d >= 0; d-- {
		if sa[d] != 0 {
			stA[d] = ea
			ea *= shape[d]
		}
		if sb[d] != 0 {
			stB[d] = eb
			eb *= shape[d]
		}
	}
	inner := shape[n-1]
	var idx [8]int
	pa, pb := 0, 0
	for off := 0; off < len(o); off += inner {
		row := o[off : off+inner]
		switch {
		case sa[n-1] != 0 && sb[n-1] != 0:
			kernels.Binary(op, row, a[pa:], b[pb:])
		case sa[n-1] != 0:
			kernels.BinaryScalar(op, row, a[pa:], b[pb], false)
		case sb[n-1] != 0:
			kernels.BinaryScalar(op, row, b[pb:], a[pa], true)
		default:
			v := op.Apply(a[pa], b[pb])
			for j := range row {
				row[j] = v
			}
		}
		for d := n - 2; d >= 0; d-- {
			idx[d]++
			pa += stA[d]
			pb += stB[d]
			if idx[d] < shape[d] {
				break
			}
			pa -= stA[d] * shape[d]
			pb -= stB[d] * shape[d]
			idx[d] = 0
		}
	}
}

// dimAt is the extent of shape s on dimension d of a rank-r broadcast
// (1 for the dims s lacks).
func dimAt(s []int, d, r int) int {
	if i := d - (r - len(s)); i >= 0 {
		return s[i]
	}
	return 1
}

// binaryF32Par is binaryF32 split over threads workers like binaryLoopPar.
func binaryF32Par(threads int, op kernels.BinOp, a []float32, as []int, b []float32, bs []int, o []float32, os []int) {
	if threads <= 1 || len(o) < 2*parGrain || len(os) == 0 || os[0] < 2 {
		binaryF32(op, a, as, b, bs, o, os)
		return
	}
	inner := len(o) / os[0]
	split := func(s []int) bool { return len(s) == len(os) && s[0] == os[0] && s[0] > 1 }
	sa, sb := split(as), split(bs)
	kernels.Parallel(threads, os[0], max(1, parGrain/max(1, inner)), func(lo, hi int) {
		var subBuf, aBuf, bBuf [8]int
		sub := append(append(subBuf[:0], hi-lo), os[1:]...)
		aa, ash := a, as
		if sa {
			per := len(a) / as[0]
			aa, ash = a[lo*per:hi*per], append(append(aBuf[:0], hi-lo), as[1:]...)
		}
		bb, bsh := b, bs
		if sb {
			per := len(b) / bs[0]
			bb, bsh = b[lo*per:hi*per], append(append(bBuf[:0], hi-lo), bs[1:]...)
		}
		binaryF32(op, aa, ash, bb, bsh, o[lo*inner:hi*inner], sub)
	})
}

package runtime

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// arithFuncs holds one binary function per element type.
type arithFuncs struct {
	f32 func(a, b float32) float32
	f64 func(a, b float64) float64
	i64 func(a, b int64) int64
	u64 func(a, b uint64) uint64
	// op, when set, is f32 as a kernel operation: float32 tensors then run
	// through binaryF32 (the same values, without a call per element).
	op kernels.BinOp
}

func binNum[T number](a, b *tensor.Tensor, os []int, dt tensor.DType, f func(x, y T) T) *tensor.Tensor {
	out := tensor.New(dt, os...)
	binaryLoop(a.Data.([]T), a.Shape, b.Data.([]T), b.Shape, out.Data.([]T), os, f)
	return out
}

// intVia adapts an int64 function to a narrower integer type, wrapping.
func intVia[T number](f func(a, b int64) int64) func(x, y T) T {
	return func(x, y T) T { return T(f(int64(x), int64(y))) }
}

func uintVia[T number](f func(a, b uint64) uint64) func(x, y T) T {
	return func(x, y T) T { return T(f(uint64(x), uint64(y))) }
}

// arith applies a numeric binary op with broadcasting; a and b have the same type.
func arith(a, b *tensor.Tensor, fs arithFuncs) (*tensor.Tensor, error) {
	return arithPar(nil, a, b, fs)
}

// arithPar is arith with float32 outputs split over threads workers.
func arithPar(rc *runCtx, a, b *tensor.Tensor, fs arithFuncs) (*tensor.Tensor, error) {
	threads := 1
	if rc != nil {
		threads = rc.threads
	}
	if a.DType != b.DType {
		return nil, fmt.Errorf("operands have different types %s and %s", a.DType, b.DType)
	}
	os, err := broadcastShape(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	dt := a.DType
	switch a.Data.(type) {
	case []float32:
		if fs.op != 0 {
			out := rc.newFloatOut(os...)
			binaryF32Par(threads, fs.op, a.Float32s(), a.Shape, b.Float32s(), b.Shape, out.Float32s(), os)
			return out, nil
		}
		if fs.f32 != nil {
			out := tensor.New(dt, os...)
			binaryLoopPar(threads, a.Float32s(), a.Shape, b.Float32s(), b.Shape, out.Float32s(), os, fs.f32)
			return out, nil
		}
	case []float64:
		if fs.f64 != nil {
			return binNum(a, b, os, dt, fs.f64), nil
		}
	case []int64:
		if fs.i64 != nil {
			return binNum(a, b, os, dt, fs.i64), nil
		}
	case []int32:
		if fs.i64 != nil {
			return binNum(a, b, os, dt, intVia[int32](fs.i64)), nil
		}
	case []int16:
		if fs.i64 != nil {
			return binNum(a, b, os, dt, intVia[int16](fs.i64)), nil
		}
	case []int8:
		if fs.i64 != nil && dt == tensor.Int8 {
			return binNum(a, b, os, dt, intVia[int8](fs.i64)), nil
		}
	case []uint8:
		if fs.u64 != nil && dt == tensor.Uint8 {
			return binNum(a, b, os, dt, uintVia[uint8](fs.u64)), nil
		}
	case []uint16:
		if fs.u64 != nil && dt == tensor.Uint16 {
			return binNum(a, b, os, dt, uintVia[uint16](fs.u64)), nil
		}
	case []uint32:
		if fs.u64 != nil {
			return binNum(a, b, os, dt, uintVia[uint32](fs.u64)), nil
		}
	case []uint64:
		if fs.u64 != nil {
			return binNum(a, b, os, dt, fs.u64), nil
		}
	}
	return nil, fmt.Errorf("type %s is not supported", dt)
}

var (
	addFuncs = arithFuncs{
		op:  kernels.BinAdd,
		f32: func(a, b float32) float32 { return a + b },
		f64: func(a, b float64) float64 { return a + b },
		i64: func(a, b int64) int64 { return a + b },
		u64: func(a, b uint64) uint64 { return a + b },
	}
	subFuncs = arithFuncs{
		op:  kernels.BinSub,
		f32: func(a, b float32) float32 { return a - b },
		f64: func(a, b float64) float64 { return a - b },
		i64: func(a, b int64) int64 { return a - b },
		u64: func(a, b uint64) uint64 { return a - b },
	}
	mulFuncs = arithFuncs{
		op:  kernels.BinMul,
		f32: func(a, b float32) float32 { return a * b },
		f64: func(a, b float64) float64 { return a * b },
		i64: func(a, b int64) int64 { return a * b },
		u64: func(a, b uint64) uint64 { return a * b },
	}
	divFuncs = arithFuncs{
		op:  kernels.BinDiv,
		f32: func(a, b float32) float32 { return a / b },
		f64: func(a, b float64) float64 { return a / b },
		// Integer division by zero is undefined in ONNX; 0 keeps it from trapping.
		i64: func(a, b int64) int64 {
			if b == 0 {
				return 0
			}
			return a / b
		},
		u64: func(a, b uint64) uint64 {
			if b == 0 {
				return 0
			}
			return a / b
		},
	}
	maxFuncs = arithFuncs{
		f32: func(a, b float32) float32 { return max(a, b) }, // NaN if either is NaN
		f64: func(a, b float64) float64 { return math.Max(a, b) },
		i64: func(a, b int64) int64 { return max(a, b) },
		u64: func(a, b uint64) uint64 { return max(a, b) },
	}
	minFuncs = arithFuncs{
		f32: func(a, b float32) float32 { return min(a, b) }, // NaN if either is NaN
		f64: func(a, b float64) float64 { return math.Min(a, b) },
		i64: func(a, b int64) int64 { return min(a, b) },
		u64: func(a, b uint64) uint64 { return min(a, b) },
	}
)

// modFuncs returns Mod: fmod keeps the dividend's sign (C fmod); otherwise
// the result takes the divisor's sign (Python %).
func modFuncs(fmod bool) arithFuncs {
	fm := func(a, b float64) float64 {
		if fmod {
			return math.Mod(a, b)
		}
		r := math.Mod(a, b)
		if r != 0 && (r < 0) != (b < 0) {
			r += b
		}
		return r
	}
	return arithFuncs{
		f32: func(a, b float32) float32 { return float32(fm(float64(a), float64(b))) },
		f64: fm,
		i64: func(a, b int64) int64 {
			if b == 0 {
				return 0
			}
			r := a % b
			if !fmod && r != 0 && (r < 0) != (b < 0) {
				r += b
			}
			return r
		},
		u64: func(a, b uint64) uint64 {
			if b == 0 {
				return 0
			}
			return a % b
		},
	}
}

func binaryKernel(fs arithFuncs) kernel {
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		out, err := arithPar(rc, in[0], in[1], fs)
		if err != nil {
			return nil, err
		}
		return []*tensor.Tensor{out}, nil
	}
}

// variadicKernel folds Sum, Max, Min (and Mean, which divides at the end).
func variadicKernel(fs arithFuncs, mean bool) kernel {
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		if len(in) == 0 || in[0] == nil {
			return nil, fmt.Errorf("needs at least one input")
		}
		acc := in[0]
		for _, t := range in[1:] {
			var err error
			if acc, err = arith(acc, t, fs); err != nil {
				return nil, err
			}
		}
		if len(in) == 1 {
			acc = acc.Clone()
		}
		if mean {
			d, ok := acc.Data.([]float32)
			if !ok {
				return nil, fmt.Errorf("mean of %s is not supported", acc.DType)
			}
			inv := float32(len(in))
			for i := range d {
				d[i] /= inv
			}
		}
		return []*tensor.Tensor{acc}, nil
	}
}

// powFloat is Pow of a float32 base: x·x rounded once for the square.
func powFloat(x float32, y float64) float32 {
	if y == 2 {
		return x * x
	}
	return float32(math.Pow(float64(x), y))
}

// powKernel computes Pow; the exponent may have another type than the base.
func powKernel(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	a, b := in[0], in[1]
	os, err := broadcastShape(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	bf, err := asFloat32Exact(b)
	if err != nil {
		return nil, err
	}
	if fa, ok := a.Data.([]float32); ok {
		out := rc.newFloatOut(os...)
		o := out.Float32s()
		if len(bf) == 1 && len(fa) == len(o) {
			// One exponent (x², the variance of a decomposed layer
			// norm): powFloat's values without a call per element, the
			// square in the vector multiply kernel.
			if y := bf[0]; y == 2 {
				kernels.Binary(kernels.BinMul, o, fa, fa)
			} else {
				for i, x := range fa {
					o[i] = float32(math.Pow(float64(x), y))
				}
			}
			return []*tensor.Tensor{out}, nil
		}
		binaryLoop(fa, a.Shape, bf, b.Shape, o, os, powFloat)
		return []*tensor.Tensor{out}, nil
	}
	if !a.DType.IsInteger() {
		return nil, fmt.Errorf("power of %s is not supported", a.DType)
	}
	ai := asInt64(a)
	res := make([]int64, tensor.NumElements(os))
	binaryLoop(ai, a.Shape, bf, b.Shape, res, os, func(x int64, y float64) int64 { return int64(math.Pow(float64(x), y)) })
	out, err := castTensor(&tensor.Tensor{DType: tensor.Int64, Shape: os, Data: res}, a.DType)
	return []*tensor.Tensor{out}, err
}

// compareKernel computes a comparison into a bool tensor.
func compareKernel(holds func(c int) bool, eqOnly bool) kernel {
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		a, b := in[0], in[1]
		os, err := broadcastShape(a.Shape, b.Shape)
		if err != nil {
			return nil, err
		}
		out := tensor.New(tensor.Bool, os...)
		o := out.Data.([]bool)
		switch x := a.Data.(type) {
		case []float32:
			binaryLoop(x, a.Shape, b.Data.([]float32), b.Shape, o, os, func(p, q float32) bool {
				if p != p || q != q {
					return false
				}
				return holds(cmp.Compare(p, q))
			})
		case []string:
			binaryLoop(x, a.Shape, b.Data.([]string), b.Shape, o, os, func(p, q string) bool { return holds(cmp.Compare(p, q)) })
		case []bool:
			if !eqOnly {
				return nil, fmt.Errorf("ordering of bool is not supported")
			}
			binaryLoop(x, a.Shape, b.Data.([]bool), b.Shape, o, os, func(p, q bool) bool { return holds(boolCmp(p, q)) })
		default:
			if !a.DType.IsInteger() || a.DType != b.DType {
				return nil, fmt.Errorf("comparison of %s and %s is not supported", a.DType, b.DType)
			}
			if a.DType == tensor.Uint64 {
				binaryLoop(x.([]uint64), a.Shape, b.Data.([]uint64), b.Shape, o, os, func(p, q uint64) bool { return holds(cmp.Compare(p, q)) })
				break
			}
			binaryLoop(asInt64(a), a.Shape, asInt64(b), b.Shape, o, os, func(p, q int64) bool { return holds(cmp.Compare(p, q)) })
		}
		return []*tensor.Tensor{out}, nil
	}
}

func boolCmp(a, b bool) int {
	if a == b {
		return 0
	}
	return 1
}

func logicKernel(f func(a, b bool) bool) kernel {
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		a, b := in[0], in[1]
		x, ok1 := a.Data.([]bool)
		y, ok2 := b.Data.([]bool)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("logical op needs bool inputs, got %s and %s", a.DType, b.DType)
		}
		os, err := broadcastShape(a.Shape, b.Shape)
		if err != nil {
			return nil, err
		}
		out := tensor.New(tensor.Bool, os...)
		binaryLoop(x, a.Shape, y, b.Shape, out.Data.([]bool), os, f)
		return []*tensor.Tensor{out}, nil
	}
}

func notKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	x, ok := in[0].Data.([]bool)
	if !ok {
		return nil, fmt.Errorf("logical not needs a bool input, got %s", in[0].DType)
	}
	out := tensor.New(tensor.Bool, in[0].Shape...)
	o := out.Data.([]bool)
	// A bool is the byte 0 or 1: eight of them flip at a time with one
	// XOR (an attention mask is a large bool tensor).
	xb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
	ob := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(o))), len(o))
	n := len(xb) &^ 7
	for i := 0; i < n; i += 8 {
		binary.NativeEndian.PutUint64(ob[i:], binary.NativeEndian.Uint64(xb[i:])^0x0101010101010101)
	}
	for i := n; i < len(xb); i++ {
		ob[i] = xb[i] ^ 1
	}
	return []*tensor.Tensor{out}, nil
}

// whereKernel selects x where cond is true and y elsewhere, broadcasting all three.
func whereKernel(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	c, x, y := in[0], in[1], in[2]
	cond, ok := c.Data.([]bool)
	if !ok {
		return nil, fmt.Errorf("condition must be bool, got %s", c.DType)
	}
	if x.DType != y.DType {
		return nil, fmt.Errorf("inputs X and Y have different types %s and %s", x.DType, y.DType)
	}
	os, err := broadcastShape(c.Shape, x.Shape, y.Shape)
	if err != nil {
		return nil, err
	}
	if xf, ok := x.Data.([]float32); ok {
		out := rc.newFloatOut(os...)
		whereF32(rc.threads, cond, c.Shape, xf, x.Shape, y.Float32s(), y.Shape, out.Float32s(), os)
		return []*tensor.Tensor{out}, nil
	}
	ci, xi, yi := bcastIndex(c.Shape, os), bcastIndex(x.Shape, os), bcastIndex(y.Shape, os)
	idx := make([]int, len(ci))
	// Select over a concatenation-free scheme: gather from x, then from y.
	out := tensor.New(x.DType, os...)
	for i := range idx {
		idx[i] = xi[i]
	}
	gatherFlat(x.Data, out.Data, idx)
	tmp := tensor.New(y.DType, os...)
	gatherFlat(y.Data, tmp.Data, yi)
	for i, ic := range ci {
		if !cond[ic] {
			copyRange(out.Data, i, tmp.Data, i, 1)
		}
	}
	return []*tensor.Tensor{out}, nil
}

// whereF32 is Where on float32 operands: o[i] = cond ? x : y over the
// broadcast shape os, walking the three operands with an odometer instead
// of materialising index arrays. The rows along the last axis are split
// over up to threads workers (an attention mask is a large tensor).
func whereF32(threads int, cond []bool, cs []int, x []float32, xs []int, y []float32, ys []int, o []float32, os []int) {
	if len(o) == 0 {
		return
	}
	r := len(os)
	if r == 0 {
		o[0] = y[0]
		if cond[0] {
			o[0] = x[0]
		}
		return
	}
	sc, sx, sy := bcastStrides(cs, os), bcastStrides(xs, os), bcastStrides(ys, os)
	inner := os[r-1]
	rows := len(o) / inner
	if threads <= 1 || len(o) < 2*parGrain {
		whereRows(cond, sc, x, sx, y, sy, o, os, 0, rows)
		return
	}
	kernels.Parallel(threads, rows, max(1, parGrain/inner), func(lo, hi int) {
		whereRows(cond, sc, x, sx, y, sy, o, os, lo, hi)
	})
}

// whereRows computes rows [row0, row1) of whereF32 (row i is o[i·inner:]
// with inner the last extent), given the operands' broadcast strides.
func whereRows(cond []bool, sc []int, x []float32, sx []int, y []float32, sy []int, o []float32, os []int, row0, row1 int) {
	r := len(os)
	inner := os[r-1]
	ic, ix, iy := sc[r-1], sx[r-1], sy[r-1]
	// The odometer starts at row0's multi-index over the outer axes.
	idx := make([]int, r)
	pc, px, py := 0, 0, 0
	for d, rem := r-2, row0; d >= 0; d-- {
		idx[d] = rem % os[d]
		rem /= os[d]
		pc += idx[d] * sc[d]
		px += idx[d] * sx[d]
		py += idx[d] * sy[d]
	}
	// A value repeated along the row (an attention mask's −Inf) is
	// copied from a row filled with it, as a row operand is.
	var xFill, yFill filledRow
	for off := row0 * inner; off < row1*inner; off += inner {
		row := o[off : off+inner]
		c, a, b := pc, px, py
		if ic <= 1 && ix <= 1 && iy <= 1 {
			whereRow(row, cond[c:c+1+ic*(inner-1)], xFill.of(x[a:a+1+ix*(inner-1)], inner), yFill.of(y[b:b+1+iy*(inner-1)], inner))
		} else {
			for j := range row {
				if cond[c] {
					row[j] = x[a]
				} else {
					row[j] = y[b]
				}
				c += ic
				a += ix
				b += iy
			}
		}
		for d := r - 2; d >= 0; d-- {
			idx[d]++
			pc += sc[d]
			px += sx[d]
			py += sy[d]
			if idx[d] < os[d] {
				break
			}
			pc -= sc[d] * os[d]
			px -= sx[d] * os[d]
			py -= sy[d] * os[d]
			idx[d] = 0
		}
	}
}

// filledRow is a row filled with one value, refilled when the value
// changes.
type filledRow struct {
	row []float32
	v   uint32
}

// of returns src when it is a whole row (n long), else a row of n copies
// of its one element.
func (f *filledRow) of(src []float32, n int) []float32 {
	if len(src) == n {
		return src
	}
	if v := math.Float32bits(src[0]); len(f.row) != n || f.v != v {
		if len(f.row) != n {
			f.row = make([]float32, n)
		}
		fillFloat(f.row, src[0])
		f.v = v
	}
	return f.row
}

// whereRow is one row of whereF32 whose x and y run along the row (as
// long as row) and whose cond does too or stays on one element (length
// 1): each run of equal conditions, which bytes.IndexByte finds many at a
// time, is copied from x or from y. An attention mask's row is a few such
// runs.
func whereRow(row []float32, cond []bool, x, y []float32) {
	if len(cond) < len(row) {
		if cond[0] {
			copy(row, x)
		} else {
			copy(row, y)
		}
		return
	}
	cb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(cond))), len(row))
	for lo := 0; lo < len(row); {
		t := cb[lo]
		hi := len(row)
		if j := bytes.IndexByte(cb[lo+1:], t^1); j >= 0 {
			hi = lo + 1 + j
		}
		if t != 0 {
			copy(row[lo:hi], x[lo:hi])
		} else {
			copy(row[lo:hi], y[lo:hi])
		}
		lo = hi
	}
}

func fillFloat(row []float32, v float32) {
	for j := range row {
		row[j] = v
	}
}

// unaryFloat maps a float32 function over a float tensor.
func unaryFloat(f func(x float32) float32) kernel {
	return unaryFloatRows(func(dst, src []float32) {
		for i, v := range src {
			dst[i] = f(v)
		}
	})
}

// unaryFloatRows is unaryFloat with a row kernel f(dst, src) applied to
// chunks of the input.
func unaryFloatRows(f func(dst, src []float32)) kernel {
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, ok := in[0].Data.([]float32)
		if !ok {
			return nil, fmt.Errorf("type %s is not supported (float only)", in[0].DType)
		}
		out := rc.newFloatOut(in[0].Shape...)
		o := out.Float32s()
		threads := 1
		if rc != nil {
			threads = rc.threads
		}
		kernels.Parallel(threads, len(x), parGrain, func(lo, hi int) { f(o[lo:hi], x[lo:hi]) })
		return []*tensor.Tensor{out}, nil
	}
}

// via64 lifts a float64 math function to float32.
func via64(f func(float64) float64) func(float32) float32 {
	return func(x float32) float32 { return float32(f(float64(x))) }
}

// unarySigned maps over float and signed integer tensors (Abs, Neg, Sign).
func unarySigned(ff func(float32) float32, fi func(int64) int64) kernel {
	return signedKernel(unaryFloat(ff), fi)
}

// signedKernel runs fk on float tensors and maps fi over integer ones
// (read as int64, written back to their type).
func signedKernel(fk kernel, fi func(int64) int64) kernel {
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		if t.DType == tensor.Float {
			return fk(rc, in)
		}
		if !t.DType.IsInteger() {
			return nil, fmt.Errorf("type %s is not supported", t.DType)
		}
		src := asInt64(t)
		res := make([]int64, len(src))
		for i, v := range src {
			res[i] = fi(v)
		}
		out, err := castTensor(&tensor.Tensor{DType: tensor.Int64, Shape: t.Shape, Data: res}, t.DType)
		return []*tensor.Tensor{out}, err
	}
}

// reluRow is Relu's max(x, 0) on a row: Clip to [0, +Inf], which gives the
// builtin's bits (−0 becomes +0, NaN stays NaN) in vector kernels, where a
// branch per element mispredicts on activations of mixed sign.
func reluRow(dst, src []float32) {
	kernels.Clip(dst, src, 0, float32(math.Inf(1)))
}

func sign[T float32 | int64](x T) T {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return x
}

// clipKernel clamps to [min, max]; before opset 11 the bounds are attributes.
func clipKernel(lo, hi float32, fromInputs bool) kernel {
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		lo, hi := lo, hi // per run: the bounds may come from the inputs
		if fromInputs {
			if len(in) > 1 && in[1] != nil {
				v, err := scalarFloat(in[1])
				if err != nil {
					return nil, fmt.Errorf("min: %w", err)
				}
				lo = float32(v)
			} else {
				lo = float32(math.Inf(-1))
			}
			if len(in) > 2 && in[2] != nil {
				v, err := scalarFloat(in[2])
				if err != nil {
					return nil, fmt.Errorf("max: %w", err)
				}
				hi = float32(v)
			} else {
				hi = float32(math.Inf(1))
			}
		}
		if x, ok := t.Data.([]float32); ok {
			out := rc.newFloatOut(t.Shape...)
			o := out.Float32s()
			kernels.Parallel(rc.threads, len(x), parGrain, func(a, b int) { kernels.Clip(o[a:b], x[a:b], lo, hi) })
			return []*tensor.Tensor{out}, nil
		}
		if !t.DType.IsInteger() {
			return nil, fmt.Errorf("type %s is not supported", t.DType)
		}
		src := asInt64(t)
		res := make([]int64, len(src))
		l, h := int64(math.MinInt64), int64(math.MaxInt64)
		if fromInputs && len(in) > 1 && in[1] != nil {
			l = asInt64(in[1])[0]
		}
		if fromInputs && len(in) > 2 && in[2] != nil {
			h = asInt64(in[2])[0]
		}
		for i, v := range src {
			res[i] = min(max(v, l), h)
		}
		out, err := castTensor(&tensor.Tensor{DType: tensor.Int64, Shape: t.Shape, Data: res}, t.DType)
		return []*tensor.Tensor{out}, err
	}
}

// scalarFloat reads a one-element tensor as float64.
func scalarFloat(t *tensor.Tensor) (float64, error) {
	if t.Len() != 1 {
		return 0, fmt.Errorf("expected one element, got shape %v", t.Shape)
	}
	f, err := asFloat32Exact(t)
	if err != nil {
		return 0, err
	}
	return f[0], nil
}

// erf32 is the error function as kernels.Erf computes it: a rational fit
// in float32 within 1e-6 relative error of math.Erf (one subnormal unit
// for subnormal results).
func erf32(x float32) float32 { return kernels.Erf32(x) }

package runtime

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

type resizeSpec struct {
	mode, coordMode, nearestMode string
	cubicA                       float32
	exclude                      bool
	extrapolation                float32
	keepAspect                   string
	axes                         []int64
	opset                        int64
	// separable makes run take the general separable sum even when only
	// the last two axes are resized (tests compare both).
	separable bool
}

func buildResize(b *builder) (kernel, error) {
	s := &resizeSpec{
		mode: b.str("mode", "nearest"), coordMode: b.str("coordinate_transformation_mode", "half_pixel"),
		nearestMode: b.str("nearest_mode", "round_prefer_floor"), cubicA: b.float("cubic_coeff_a", -0.75),
		exclude: b.int("exclude_outside", 0) != 0, extrapolation: b.float("extrapolation_value", 0),
		keepAspect: b.str("keep_aspect_ratio_policy", "stretch"), axes: b.ints("axes"), opset: b.opset,
	}
	if b.opset < 11 {
		s.coordMode = "asymmetric"
		s.nearestMode = "floor"
	}
	switch s.mode {
	case "nearest", "linear", "cubic":
	default:
		return nil, unsupportedf("mode=%q is not supported", s.mode)
	}
	switch s.coordMode {
	case "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn":
	default:
		return nil, unsupportedf("coordinate_transformation_mode=%q is not supported", s.coordMode)
	}
	switch s.nearestMode {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil":
	default:
		return nil, unsupportedf("nearest_mode=%q is not supported", s.nearestMode)
	}
	if s.keepAspect != "stretch" && s.keepAspect != "not_larger" && s.keepAspect != "not_smaller" {
		return nil, unsupportedf("keep_aspect_ratio_policy=%q is not supported", s.keepAspect)
	}
	return s.run, nil
}

func (s *resizeSpec) run(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := floats(in[0], "X")
	if err != nil {
		return nil, err
	}
	xs := in[0].Shape
	r := len(xs)
	opt := func(i int) *tensor.Tensor {
		if i < len(in) && in[i] != nil && in[i].Len() > 0 {
			return in[i]
		}
		return nil
	}
	var roiT, scalesT, sizesT *tensor.Tensor
	if s.opset < 11 {
		scalesT = opt(1)
	} else {
		roiT, scalesT, sizesT = opt(1), opt(2), opt(3)
	}
	axes := make([]int, 0, r)
	if s.axes != nil {
		for _, a := range s.axes {
			ax, err := normAxis(a, r)
			if err != nil {
				return nil, err
			}
			axes = append(axes, ax)
		}
	} else {
		for i := 0; i < r; i++ {
			axes = append(axes, i)
		}
	}
	scales := make([]float64, r)
	os := make([]int, r)
	for i := range scales {
		scales[i], os[i] = 1, xs[i]
	}
	switch {
	case sizesT != nil:
		sz := asInt64(sizesT)
		if len(sz) != len(axes) {
			return nil, fmt.Errorf("sizes %v do not fit %d axes", sz, len(axes))
		}
		if s.keepAspect != "stretch" {
			best := math.Inf(1)
			if s.keepAspect == "not_smaller" {
				best = math.Inf(-1)
			}
			for i, ax := range axes {
				v := float64(sz[i]) / float64(xs[ax])
				if s.keepAspect == "not_larger" {
					best = math.Min(best, v)
				} else {
					best = math.Max(best, v)
				}
			}
			for _, ax := range axes {
				scales[ax] = best
				os[ax] = int(math.Floor(float64(xs[ax])*best + 0.5))
			}
		} else {
			for i, ax := range axes {
				os[ax] = int(sz[i])
				scales[ax] = float64(sz[i]) / float64(xs[ax])
			}
		}
	case scalesT != nil:
		sc, err := asFloat32(scalesT)
		if err != nil {
			return nil, err
		}
		if len(sc) != len(axes) {
			return nil, fmt.Errorf("scales %v do not fit %d axes", sc, len(axes))
		}
		for i, ax := range axes {
			scales[ax] = float64(sc[i])
			os[ax] = int(math.Floor(float64(xs[ax]) * float64(sc[i])))
		}
	default:
		return nil, fmt.Errorf("neither scales nor sizes is given")
	}
	roi := make([]float64, 2*r)
	for i := 0; i < r; i++ {
		roi[i], roi[r+i] = 0, 1
	}
	if roiT != nil && s.coordMode == "tf_crop_and_resize" {
		rv, err := asFloat32(roiT)
		if err != nil {
			return nil, err
		}
		if len(rv) != 2*len(axes) {
			return nil, fmt.Errorf("roi %v does not fit %d axes", rv, len(axes))
		}
		for i, ax := range axes {
			roi[ax], roi[r+ax] = float64(rv[i]), float64(rv[len(axes)+i])
		}
	}
	// Per axis: for each output index, the source taps and their weights.
	type tap struct {
		idx []int
		w   []float64
		out bool // outside the input (tf_crop_and_resize extrapolation)
	}
	taps := make([][]tap, r)
	for d := 0; d < r; d++ {
		taps[d] = make([]tap, os[d])
		for o := 0; o < os[d]; o++ {
			if os[d] == xs[d] && scales[d] == 1 && s.coordMode != "tf_crop_and_resize" {
				taps[d][o] = tap{idx: []int{o}, w: []float64{1}}
				continue
			}
			c := s.sourceCoord(float64(o), scales[d], xs[d], os[d], roi[d], roi[r+d])
			taps[d][o] = func() tap {
				if s.coordMode == "tf_crop_and_resize" && (c < 0 || c > float64(xs[d]-1)) {
					return tap{out: true}
				}
				idx, w := s.weights(c, xs[d], scales[d])
				return tap{idx: idx, w: w}
			}()
		}
	}
	// When only the last two axes are resized, each plane is computed with
	// their taps, as the separable sum below does.
	planar := r >= 2 && s.coordMode != "tf_crop_and_resize" && !s.separable
	for d := 0; d < r-2 && planar; d++ {
		planar = os[d] == xs[d] && scales[d] == 1
	}
	if planar {
		rows, cols := taps[r-2], taps[r-1]
		ry, rx := make([]resizeTaps, len(rows)), make([]resizeTaps, len(cols))
		for i, t := range rows {
			ry[i] = resizeTaps{t.idx, t.w}
		}
		for i, t := range cols {
			rx[i] = resizeTaps{t.idx, t.w}
		}
		if rc.profiling() && len(ry) > 0 && len(rx) > 0 {
			rc.chose(fmt.Sprintf("2-D %s, %d×%d taps", s.mode, len(ry[0].idx), len(rx[0].idx)))
		}
		out := rc.newFloatOut(os...)
		resizePlanes(rc.threads, x, xs[r-2], xs[r-1], ry, rx, out.Float32s())
		return one(out), nil
	}
	out := tensor.New(tensor.Float, os...)
	y := out.Float32s()
	instr := make([]int, r)
	st := 1
	for i := r - 1; i >= 0; i-- {
		instr[i] = st
		st *= xs[i]
	}
	pos := make([]int, r)
	// Separable interpolation: the weighted sum over the product of taps.
	var rec func(d, off int, w float64) float64
	rec = func(d, off int, w float64) float64 {
		if d == r {
			return w * float64(x[off])
		}
		t := taps[d][pos[d]]
		var acc float64
		for k, i := range t.idx {
			acc += rec(d+1, off+i*instr[d], w*t.w[k])
		}
		return acc
	}
	for i := range y {
		unravelIdx(i, os, pos)
		outside := false
		for d := 0; d < r; d++ {
			if taps[d][pos[d]].out {
				outside = true
			}
		}
		if outside {
			y[i] = s.extrapolation
			continue
		}
		y[i] = float32(rec(0, 0, 1))
	}
	return one(out), nil
}

// sourceCoord maps output coordinate o to the input axis. As in the ONNX
// reference, the output length in the formulas is in·scale, unrounded.
func (s *resizeSpec) sourceCoord(o, scale float64, in, _ int, r0, r1 float64) float64 {
	outLen := float64(in) * scale
	switch s.coordMode {
	case "tf_half_pixel_for_nn":
		return (o + 0.5) / scale
	case "half_pixel":
		return (o+0.5)/scale - 0.5
	case "half_pixel_symmetric":
		adj := outLen / (scale * float64(in))
		center := float64(in) / 2
		off := center * (1 - adj)
		return off + (o+0.5)/scale - 0.5
	case "pytorch_half_pixel":
		if outLen > 1 {
			return (o+0.5)/scale - 0.5
		}
		return 0
	case "align_corners":
		if outLen == 1 {
			return 0
		}
		return o * float64(in-1) / (outLen - 1)
	case "tf_crop_and_resize":
		if outLen > 1 {
			return r0*float64(in-1) + o*(r1-r0)*float64(in-1)/(outLen-1)
		}
		return 0.5 * (r0 + r1) * float64(in-1)
	}
	return o / scale
}

// weights returns the input indices and weights for source coordinate c.
func (s *resizeSpec) weights(c float64, in int, scale float64) ([]int, []float64) {
	clampI := func(i int) int { return min(max(i, 0), in-1) }
	switch s.mode {
	case "nearest":
		var i int
		switch s.nearestMode {
		case "round_prefer_floor":
			if c == math.Floor(c)+0.5 {
				i = int(math.Floor(c))
			} else {
				i = int(math.Round(c))
			}
		case "round_prefer_ceil":
			i = int(math.Round(c))
		case "floor":
			i = int(math.Floor(c))
		case "ceil":
			i = int(math.Ceil(c))
		}
		return []int{clampI(i)}, []float64{1}
	case "linear":
		c = math.Min(math.Max(c, 0), float64(in-1))
		i0 := int(math.Floor(c))
		f := c - float64(i0)
		i1 := clampI(i0 + 1)
		return []int{i0, i1}, []float64{1 - f, f}
	}
	// cubic
	i0 := int(math.Floor(c))
	f := c - float64(i0)
	a := float64(s.cubicA)
	coef := func(t float64) float64 {
		t = math.Abs(t)
		switch {
		case t <= 1:
			return ((a+2)*t-(a+3))*t*t + 1
		case t < 2:
			return ((a*t-5*a)*t+8*a)*t - 4*a
		}
		return 0
	}
	idx := make([]int, 4)
	w := make([]float64, 4)
	var sum float64
	for k := 0; k < 4; k++ {
		p := i0 - 1 + k
		wk := coef(f + 1 - float64(k))
		if s.exclude && (p < 0 || p >= in) {
			wk = 0
		}
		idx[k], w[k] = clampI(p), wk
		sum += wk
	}
	if s.exclude && sum != 0 {
		for k := range w {
			w[k] /= sum
		}
	}
	return idx, w
}

// resizeTaps are the input indices along one axis that an output index
// reads, with their weights.
type resizeTaps struct {
	idx []int
	w   []float64
}

// resizePlanes resizes the planes of x (ih×iw each) into y through the
// taps of each output row (ry) and column (rx):
//
//	y[oy, ox] = float32(Σ_ky (0 + Σ_kx (ry.w[ky]·rx.w[kx])·x[ry.idx[ky], rx.idx[kx]]))
//
// each sum in float64 from 0 in tap order, which is what the separable
// recursion of resizeSpec.run computes when every other axis is kept
// (its identity taps multiply by 1 and add to +0 a sum that cannot be
// −0), so both give the same bits. Planes are split over the threads.
func resizePlanes(threads int, x []float32, ih, iw int, ry, rx []resizeTaps, y []float32) {
	oh, ow := len(ry), len(rx)
	planes := len(y) / max(1, oh*ow)
	// With one tap of weight 1 per row and column (nearest), the sums
	// are x + 0 in float64: x + 0 in float32 has the same bits.
	nearest := true
	cols := make([]int, ow)
	for _, t := range [][]resizeTaps{ry, rx} {
		for _, tp := range t {
			nearest = nearest && len(tp.idx) == 1 && tp.w[0] == 1
		}
	}
	if nearest {
		for ox, tx := range rx {
			cols[ox] = tx.idx[0]
		}
	}
	kernels.Parallel(threads, planes, max(1, parGrain/max(1, oh*ow)), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			xp, yp := x[p*ih*iw:(p+1)*ih*iw], y[p*oh*ow:(p+1)*oh*ow]
			if nearest {
				for oy, ty := range ry {
					row, xr := yp[oy*ow:(oy+1)*ow], xp[ty.idx[0]*iw:(ty.idx[0]+1)*iw]
					if oy > 0 && ty.idx[0] == ry[oy-1].idx[0] {
						copy(row, yp[(oy-1)*ow:oy*ow])
						continue
					}
					for ox, ix := range cols {
						row[ox] = xr[ix] + 0
					}
				}
				continue
			}
			for oy, ty := range ry {
				row := yp[oy*ow : (oy+1)*ow]
				for ox, tx := range rx {
					var acc float64
					for ky, iy := range ty.idx {
						xr := xp[iy*iw : (iy+1)*iw]
						var a float64
						for kx, ix := range tx.idx {
							a += float64((ty.w[ky] * tx.w[kx]) * float64(xr[ix]))
						}
						acc += a
					}
					row[ox] = float32(acc)
				}
			}
		}
	})
}

package runtime

import (
	"fmt"
	"math"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// buildNMS builds NonMaxSuppression: per batch and class, the boxes whose
// score passes score_threshold, best score first (the lower box index
// first among equal scores), each kept unless its IoU with a box kept
// before it exceeds iou_threshold, at most max_output_boxes_per_class of
// them; the output lists (batch, class, box) of the kept boxes in that
// order. A box of zero or negative area suppresses nothing and is
// suppressed by nothing, as in ONNX Runtime.
func buildNMS(b *builder) (kernel, error) {
	center := b.int("center_point_box", 0) != 0
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		boxesT, scoresT := in[0], in[1]
		boxes, err := floats(boxesT, "boxes")
		if err != nil {
			return nil, err
		}
		scores, err := floats(scoresT, "scores")
		if err != nil {
			return nil, err
		}
		bs, ss := boxesT.Shape, scoresT.Shape
		if len(bs) != 3 || bs[2] != 4 || len(ss) != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
			return nil, fmt.Errorf("boxes %v and scores %v do not fit [batches, boxes, 4] and [batches, classes, boxes]", bs, ss)
		}
		limit := int64(0)
		if len(in) > 2 && in[2] != nil && in[2].Len() > 0 {
			limit = asInt64(in[2])[0]
		}
		iouMax := float32(0)
		if len(in) > 3 && in[3] != nil && in[3].Len() > 0 {
			v, err := scalarFloat(in[3])
			if err != nil {
				return nil, fmt.Errorf("iou_threshold: %w", err)
			}
			iouMax = float32(v)
		}
		scoreMin, filter := float32(0), false
		if len(in) > 4 && in[4] != nil && in[4].Len() > 0 {
			v, err := scalarFloat(in[4])
			if err != nil {
				return nil, fmt.Errorf("score_threshold: %w", err)
			}
			scoreMin, filter = float32(v), true
		}
		batches, classes, n := ss[0], ss[1], ss[2]
		var sel []int64
		order := make([]int, 0, n)
		var kept []int
		for bi := range batches {
			bx := boxes[bi*n*4 : (bi+1)*n*4]
			for ci := range classes {
				sc := scores[(bi*classes+ci)*n : (bi*classes+ci+1)*n]
				order = order[:0]
				for i, s := range sc {
					if !filter || s > scoreMin {
						order = append(order, i)
					}
				}
				slices.SortStableFunc(order, func(a, b int) int {
					switch {
					case sc[a] > sc[b]:
						return -1
					case sc[a] < sc[b]:
						return 1
					}
					return 0
				})
				kept = kept[:0]
				for _, i := range order {
					if int64(len(kept)) >= limit {
						break
					}
					if !slices.ContainsFunc(kept, func(j int) bool { return suppresses(bx, i, j, center, iouMax) }) {
						kept = append(kept, i)
						sel = append(sel, int64(bi), int64(ci), int64(i))
					}
				}
			}
		}
		return one(tensor.FromInt64(sel, len(sel)/3, 3)), nil
	}, nil
}

// suppresses reports whether boxes i and j overlap by more than iouMax
// (intersection over union); boxes are [y1, x1, y2, x2] in either corner
// order, or [x_center, y_center, width, height] with center.
func suppresses(boxes []float32, i, j int, center bool, iouMax float32) bool {
	corners := func(k int) (y1, x1, y2, x2 float32) {
		b := boxes[k*4 : k*4+4]
		if center {
			return b[1] - b[3]/2, b[0] - b[2]/2, b[1] + b[3]/2, b[0] + b[2]/2
		}
		return min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
	}
	ay1, ax1, ay2, ax2 := corners(i)
	by1, bx1, by2, bx2 := corners(j)
	areaA, areaB := (ay2-ay1)*(ax2-ax1), (by2-by1)*(bx2-bx1)
	if areaA <= 0 || areaB <= 0 {
		return false
	}
	ih, iw := min(ay2, by2)-max(ay1, by1), min(ax2, bx2)-max(ax1, bx1)
	if ih <= 0 || iw <= 0 {
		return false
	}
	inter := ih * iw
	return inter/(areaA+areaB-inter) > iouMax
}

// buildGridSample builds GridSample of 2-D images (opset 16 on): output
// (n, c, oy, ox) samples image (n, c) at grid[n, oy, ox] = (x, y) in
// [−1, 1], unnormalised to pixel coordinates (align_corners: −1 and 1 are
// the centres of the corner pixels, else their outer edges). The
// coordinate is bounded as padding_mode says (border: clamped to the
// image, reflection: reflected at its bounds) before nearest (rounded
// half to even) or bilinear sampling read it; bicubic sampling bounds
// each of its 4×4 taps instead, with A = −0.75. Taps outside the image
// read 0 (zeros). This is PyTorch's grid_sample, which the op follows.
func buildGridSample(b *builder) (kernel, error) {
	mode := b.str("mode", "bilinear")
	switch mode {
	case "linear":
		mode = "bilinear"
	case "cubic":
		mode = "bicubic"
	case "bilinear", "bicubic", "nearest":
	default:
		return nil, unsupportedf("mode=%q is not supported", mode)
	}
	padding := b.str("padding_mode", "zeros")
	if padding != "zeros" && padding != "border" && padding != "reflection" {
		return nil, unsupportedf("padding_mode=%q is not supported", padding)
	}
	align := b.int("align_corners", 0) != 0
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		grid, err := floats(in[1], "grid")
		if err != nil {
			return nil, err
		}
		xs, gs := in[0].Shape, in[1].Shape
		if len(xs) != 4 || len(gs) != 4 || gs[0] != xs[0] || gs[3] != 2 {
			return nil, unsupportedf("input X %v and grid %v: only 2-D images (X [N, C, H, W], grid [N, H_out, W_out, 2]) are supported", xs, gs)
		}
		n, c, h, w := xs[0], xs[1], xs[2], xs[3]
		oh, ow := gs[1], gs[2]
		out := rc.newFloatOut(n, c, oh, ow)
		y := out.Float32s()
		gsp := gridSampler{h: h, w: w, align: align, padding: padding}
		kernels.Parallel(rc.threads, n*c, 1, func(lo, hi int) {
			for p := lo; p < hi; p++ {
				img := x[p*h*w : (p+1)*h*w]
				g := grid[p/c*oh*ow*2:]
				yp := y[p*oh*ow : (p+1)*oh*ow]
				for o := range yp {
					px, py := gsp.unnormalize(float64(g[2*o]), w), gsp.unnormalize(float64(g[2*o+1]), h)
					var v float64
					switch mode {
					case "nearest":
						px, py = gsp.bound(px, w), gsp.bound(py, h)
						v = gsp.at(img, int(math.RoundToEven(py)), int(math.RoundToEven(px)))
					case "bilinear":
						px, py = gsp.bound(px, w), gsp.bound(py, h)
						x0, y0 := math.Floor(px), math.Floor(py)
						fx, fy := px-x0, py-y0
						ix, iy := int(x0), int(y0)
						v = (1-fy)*((1-fx)*gsp.at(img, iy, ix)+fx*gsp.at(img, iy, ix+1)) +
							fy*((1-fx)*gsp.at(img, iy+1, ix)+fx*gsp.at(img, iy+1, ix+1))
					default:
						x0, y0 := math.Floor(px), math.Floor(py)
						cx, cy := cubicCoeffs(px-x0), cubicCoeffs(py-y0)
						for i := range 4 {
							ty := gsp.tap(int(y0)-1+i, h)
							var row float64
							for j := range 4 {
								tx := gsp.tap(int(x0)-1+j, w)
								row += cx[j] * gsp.at(img, ty, tx)
							}
							v += cy[i] * row
						}
					}
					yp[o] = float32(v)
				}
			}
		})
		return one(out), nil
	}, nil
}

// gridSampler holds one GridSample's image size and modes.
type gridSampler struct {
	h, w    int
	align   bool
	padding string
}

// unnormalize maps a grid coordinate in [−1, 1] to pixels on an axis of
// size pixels.
func (g *gridSampler) unnormalize(v float64, size int) float64 {
	if g.align {
		return (v + 1) / 2 * float64(size-1)
	}
	return ((v+1)*float64(size) - 1) / 2
}

// bound applies the padding mode to a coordinate: clamped to the image
// for border, reflected at the bounds (and then clamped) for reflection.
func (g *gridSampler) bound(v float64, size int) float64 {
	switch g.padding {
	case "border":
		return min(max(v, 0), float64(size-1))
	case "reflection":
		if g.align {
			v = reflect(v, 0, float64(2*(size-1)))
		} else {
			v = reflect(v, -1, float64(2*size-1))
		}
		return min(max(v, 0), float64(size-1))
	}
	return v
}

// tap is bound for the integer index of a bicubic tap.
func (g *gridSampler) tap(i, size int) int {
	if g.padding == "zeros" {
		return i
	}
	return int(g.bound(float64(i), size))
}

// at reads pixel (r, c) of img, 0 outside it.
func (g *gridSampler) at(img []float32, r, c int) float64 {
	if r < 0 || r >= g.h || c < 0 || c >= g.w {
		return 0
	}
	return float64(img[r*g.w+c])
}

// reflect reflects v into [low/2, high/2] (bounds given doubled).
func reflect(v, twiceLow, twiceHigh float64) float64 {
	if twiceLow == twiceHigh {
		return 0
	}
	lo, span := twiceLow/2, (twiceHigh-twiceLow)/2
	v = math.Abs(v - lo)
	extra := math.Mod(v, span)
	if int(math.Floor(v/span))%2 == 0 {
		return extra + lo
	}
	return span - extra + lo
}

// cubicCoeffs are the weights of the taps at −1, 0, 1 and 2 of a point t
// in [0, 1) past tap 0, with A = −0.75.
func cubicCoeffs(t float64) [4]float64 {
	const a = -0.75
	near := func(x float64) float64 { return ((a+2)*x-(a+3))*x*x + 1 }
	far := func(x float64) float64 { return ((a*x-5*a)*x+8*a)*x - 4*a }
	return [4]float64{far(t + 1), near(t), near(1 - t), far(2 - t)}
}

// buildRoiAlign builds RoiAlign as ONNX Runtime computes it, which the
// op's reference follows: each region of interest (x1, y1, x2, y2, scaled
// by spatial_scale, shifted by half a pixel with half_pixel) is split
// into output_height×output_width bins, each sampled on a grid of
// sampling_ratio² points (ceil(bin size) per axis when 0) read
// bilinearly; a bin is the mean of its samples (avg) or the largest of
// their four weighted corner values (max). Points more than a pixel
// outside the image read 0.
func buildRoiAlign(b *builder) (kernel, error) {
	mode := b.str("mode", "avg")
	if mode != "avg" && mode != "max" {
		return nil, unsupportedf("mode=%q is not supported", mode)
	}
	ph, pw := int(b.int("output_height", 1)), int(b.int("output_width", 1))
	ratio := int(b.int("sampling_ratio", 0))
	scale := b.float("spatial_scale", 1)
	coord := "output_half_pixel"
	if b.opset >= 16 {
		coord = b.str("coordinate_transformation_mode", "half_pixel")
	}
	if coord != "half_pixel" && coord != "output_half_pixel" {
		return nil, unsupportedf("coordinate_transformation_mode=%q is not supported", coord)
	}
	if ph < 1 || pw < 1 || ratio < 0 {
		return nil, fmt.Errorf("output %d×%d and sampling_ratio %d must be positive", ph, pw, ratio)
	}
	halfPixel := coord == "half_pixel"
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		rois, err := floats(in[1], "rois")
		if err != nil {
			return nil, err
		}
		xs, rs := in[0].Shape, in[1].Shape
		batch := asInt64(in[2])
		if len(xs) != 4 || len(rs) != 2 || rs[1] != 4 || len(batch) != rs[0] {
			return nil, fmt.Errorf("input X %v, rois %v and batch_indices %v do not fit [N, C, H, W], [R, 4] and [R]", xs, rs, in[2].Shape)
		}
		c, h, w := xs[1], xs[2], xs[3]
		out := rc.newFloatOut(rs[0], c, ph, pw)
		y := out.Float32s()
		for r, bi := range batch {
			if bi < 0 || int(bi) >= xs[0] {
				return nil, fmt.Errorf("roi %d: batch index %d is outside [0, %d)", r, bi, xs[0])
			}
		}
		kernels.Parallel(rc.threads, rs[0], 1, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				samples, count := roiSamples(rois[4*r:4*r+4], scale, halfPixel, h, w, ph, pw, ratio)
				img := x[int(batch[r])*c*h*w:]
				for ch := range c {
					plane := img[ch*h*w : (ch+1)*h*w]
					yc := y[(r*c+ch)*ph*pw : (r*c+ch+1)*ph*pw]
					per := len(samples) / (ph * pw)
					for bin := range yc {
						var v float32
						for i, s := range samples[bin*per : (bin+1)*per] {
							a, b2, c2, d := s.w[0]*plane[s.pos[0]], s.w[1]*plane[s.pos[1]], s.w[2]*plane[s.pos[2]], s.w[3]*plane[s.pos[3]]
							if mode == "avg" {
								v += a + b2 + c2 + d
							} else if m := max(a, b2, c2, d); i == 0 || m > v {
								v = m
							}
						}
						if mode == "avg" {
							v /= float32(count)
						}
						yc[bin] = v
					}
				}
			}
		})
		return one(out), nil
	}, nil
}

// roiSample is one bilinear sample: four pixel offsets and weights.
type roiSample struct {
	pos [4]int
	w   [4]float32
}

// roiSamples returns the samples of every bin of one region, bin by bin,
// and the count a bin's mean divides by.
func roiSamples(roi []float32, scale float32, halfPixel bool, h, w, ph, pw, ratio int) ([]roiSample, int) {
	var off float32
	if halfPixel {
		off = 0.5
	}
	x0, y0 := roi[0]*scale-off, roi[1]*scale-off
	rw, rh := roi[2]*scale-off-x0, roi[3]*scale-off-y0
	if !halfPixel {
		rw, rh = max(rw, 1), max(rh, 1)
	}
	bh, bw := rh/float32(ph), rw/float32(pw)
	gh, gw := ratio, ratio
	if ratio == 0 {
		gh, gw = int(math.Ceil(float64(rh/float32(ph)))), int(math.Ceil(float64(rw/float32(pw))))
	}
	out := make([]roiSample, 0, ph*pw*gh*gw)
	for py := range ph {
		for px := range pw {
			for iy := range gh {
				yy := y0 + float32(py)*bh + (float32(iy)+0.5)*bh/float32(gh)
				for ix := range gw {
					xx := x0 + float32(px)*bw + (float32(ix)+0.5)*bw/float32(gw)
					out = append(out, bilinearSample(yy, xx, h, w))
				}
			}
		}
	}
	return out, max(gh*gw, 1)
}

// bilinearSample is the sample at (y, x): none (zero weights) more than
// a pixel outside the image, the edge pixels' values past the edges.
func bilinearSample(y, x float32, h, w int) roiSample {
	if y < -1 || y > float32(h) || x < -1 || x > float32(w) {
		return roiSample{}
	}
	y, x = max(y, 0), max(x, 0)
	yl, xl := int(y), int(x)
	yh, xh := yl+1, xl+1
	if yl >= h-1 {
		yl, yh, y = h-1, h-1, float32(h-1)
	}
	if xl >= w-1 {
		xl, xh, x = w-1, w-1, float32(w-1)
	}
	ly, lx := y-float32(yl), x-float32(xl)
	hy, hx := 1-ly, 1-lx
	return roiSample{pos: [4]int{yl*w + xl, yl*w + xh, yh*w + xl, yh*w + xh}, w: [4]float32{hy * hx, hy * lx, ly * hx, ly * lx}}
}

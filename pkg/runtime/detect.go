package runtime

import (
	"fmt"
	"slices"

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

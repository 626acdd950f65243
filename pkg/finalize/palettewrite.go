package finalize

import (
	"encoding/json"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// clustered is one palettized weight's data and clustering.
type clustered struct {
	data, importance []float32
	q                *Palettized
}

// clusterPalettes clusters every palettized weight of the plan, the
// weights spread over the threads (each with its share for its groups).
func (w *writer) clusterPalettes() ([]*clustered, error) {
	ps := w.plan.Palettes
	out := make([]*clustered, len(ps))
	errs := make([]error, len(ps))
	threads := max(w.opts.Threads, 1)
	inner := max(threads/max(len(ps), 1), 1)
	kernels.Parallel(threads, len(ps), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i], errs[i] = w.cluster(ps[i], inner)
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// cluster reads a weight, weighs it by its input's second moments when
// the plan has them (data-aware mode), and palettizes it.
func (w *writer) cluster(p *plan.PalettePlan, threads int) (*clustered, error) {
	data, err := w.constData(p.Value)
	if err != nil {
		return nil, err
	}
	c := &clustered{data: data}
	if p.Input != "" && p.InputMoments != nil {
		if c.importance, err = importance(p, p.InputMoments); err != nil {
			return nil, err
		}
	}
	if c.q, err = Palettize(data, p.Shape, p.Axis, p.ScaleAxis, p.Palette, c.importance, threads); err != nil {
		return nil, fmt.Errorf("weight %q: %w", p.Value, err)
	}
	return c, nil
}

// paletteOpset is the default-domain opset a palettized weight needs:
// uint4 indices (≤ 4 bits) need opset 21; otherwise per-axis
// DequantizeLinear of an int8 LUT needs 13 and the rest (Cast, Add,
// Gather, Transpose, Reshape, Mul) any opset coreaiq writes.
func paletteOpset(p *plan.PalettePlan) int64 {
	if p.Palette.NBits <= 4 {
		return 21
	}
	if p.Palette.LUTDType != config.LUTFloat {
		return 13
	}
	return 0
}

// writePalette replaces a weight by its palettized form: packed indices
// (uint4 up to 4 bits, uint8 above) and the LUTs as initializers, and the
// constant subgraph that rebuilds the weight under its own name:
//
//	Cast(indices → int32) [+ group offsets] → Gather(LUT, axis 0)
//	[→ Transpose → Reshape for vectors] [× per-channel scales]
//
// with an int8/uint8 LUT first dequantized (DequantizeLinear per LUT,
// then Reshape to rows of cluster_dim).
func (w *writer) writePalette(p *plan.PalettePlan, c *clustered) error {
	data, importance, q := c.data, c.importance, c.q
	ft := tensor.DType(p.FloatType)
	if ft == tensor.Undefined {
		ft = tensor.Float
	}
	tp := &plan.TensorPlan{Value: p.Value, Nodes: p.Nodes, Rule: p.Rule}
	add := func(op, out string, in []string, attrs ...*onnxpb.AttributeProto) string {
		name := w.name(out)
		w.prologue = append(w.prologue, w.node(op, p.Value+"_palette_"+op, in, []string{name}, tp, attrs...))
		return name
	}
	init := func(t *tensor.Tensor, base string) (string, error) {
		name := w.name(p.Value + "_palette_" + base)
		return name, w.addInit(t, name)
	}
	cd := q.ClusterDim
	// Indices.
	idxType := tensor.Uint8
	if p.Palette.NBits <= 4 {
		idxType = tensor.Uint4
	}
	ishape := q.IndexShape()
	it := tensor.New(idxType, ishape...)
	copy(it.Data.([]uint8), q.Index)
	idx, err := init(it, "indices")
	if err != nil {
		return err
	}
	cur := add("Cast", p.Value+"_palette_index", []string{idx}, attrInt("to", int64(tensor.Int32)))
	if q.LUTs > 1 {
		oshape := make([]int, len(ishape))
		for i := range oshape {
			oshape[i] = 1
		}
		oshape[q.Axis] = ishape[q.Axis]
		ot := tensor.New(tensor.Int32, oshape...)
		for b := range ot.Data.([]int32) {
			ot.Data.([]int32)[b] = int32(b * cd / q.GroupChannels * q.Entries)
		}
		off, err := init(ot, "group_offsets")
		if err != nil {
			return err
		}
		cur = add("Add", p.Value+"_palette_lut_index", []string{cur, off})
	}
	// LUT.
	rows := []int{q.LUTs * q.Entries}
	if cd > 1 {
		rows = append(rows, cd)
	}
	var lut string
	if q.LUTDType == config.LUTFloat {
		lt, err := scaleTensor(ft, rows, q.LUT)
		if err != nil {
			return err
		}
		if lut, err = init(lt, "lut"); err != nil {
			return err
		}
	} else {
		codeType := tensor.Int8
		if q.LUTDType == config.LUTUInt8 {
			codeType = tensor.Uint8
		}
		ct := tensor.New(codeType, q.LUTs, q.Entries*cd)
		for i, c := range q.LUTCodes {
			switch d := ct.Data.(type) {
			case []int8:
				d[i] = int8(c)
			case []uint8:
				d[i] = uint8(c)
			}
		}
		codes, err := init(ct, "lut_codes")
		if err != nil {
			return err
		}
		st, err := scaleTensor(ft, []int{q.LUTs}, q.LUTScales)
		if err != nil {
			return err
		}
		scale, err := init(st, "lut_scales")
		if err != nil {
			return err
		}
		zt := tensor.New(codeType, q.LUTs)
		for i, z := range q.LUTZeroPoints {
			switch d := zt.Data.(type) {
			case []int8:
				d[i] = int8(z)
			case []uint8:
				d[i] = uint8(z)
			}
		}
		zp, err := init(zt, "lut_zero_points")
		if err != nil {
			return err
		}
		deq := add("DequantizeLinear", p.Value+"_palette_lut_dequantized", []string{codes, scale, zp}, attrInt("axis", 0))
		shape, err := init(int64Tensor(rows), "lut_shape")
		if err != nil {
			return err
		}
		lut = add("Reshape", p.Value+"_palette_lut", []string{deq, shape})
	}
	out := p.Value
	last := q.Scales == nil && cd == 1
	target := func(base string) string {
		if last {
			return out
		}
		return w.name(p.Value + "_palette_" + base)
	}
	gathered := target("gathered")
	w.prologue = append(w.prologue, w.node("Gather", p.Value+"_palette_Gather", []string{lut, cur}, []string{gathered}, tp, attrInt("axis", 0)))
	cur = gathered
	if cd > 1 {
		// [.., C/cd, .., cd] → [.., C/cd, cd, ..] → the weight's shape.
		r := len(ishape)
		perm := make([]int64, 0, r+1)
		for i := 0; i <= q.Axis; i++ {
			perm = append(perm, int64(i))
		}
		perm = append(perm, int64(r))
		for i := q.Axis + 1; i < r; i++ {
			perm = append(perm, int64(i))
		}
		tr := add("Transpose", p.Value+"_palette_vectors", []string{cur},
			&onnxpb.AttributeProto{Name: proto.String("perm"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: perm})
		shape, err := init(int64Tensor(p.Shape), "shape")
		if err != nil {
			return err
		}
		last = q.Scales == nil
		res := target("unscaled")
		w.prologue = append(w.prologue, w.node("Reshape", p.Value+"_palette_Reshape", []string{tr, shape}, []string{res}, tp))
		cur = res
	}
	if q.Scales != nil {
		sshape := make([]int, len(p.Shape))
		for i := range sshape {
			sshape[i] = 1
		}
		sshape[q.ScaleAxis] = p.Shape[q.ScaleAxis]
		st, err := scaleTensor(ft, sshape, q.Scales)
		if err != nil {
			return err
		}
		scales, err := init(st, "channel_scales")
		if err != nil {
			return err
		}
		w.prologue = append(w.prologue, w.node("Mul", p.Value+"_palette_Mul", []string{cur, scales}, []string{out}, tp))
	}
	w.removed[p.Value] = true
	rep := &plan.PaletteReport{LUTs: q.LUTs, Entries: q.Entries, ClusterDim: cd, BitsPerWeight: q.BitsPerWeight(),
		SQNR: SQNR(data, q.Dequantize()), DataAware: importance != nil}
	if err := w.stampPalette(p.Value, rep); err != nil {
		return err
	}
	done := *p
	done.Report = rep
	w.palettes = append(w.palettes, &done)
	return nil
}

// PaletteMetadataKey is the node metadata_props key under which the node
// that rebuilds a palettized weight records its PaletteReport as JSON, so
// that `compare --per-layer` can list palettized weights from the model
// alone.
const PaletteMetadataKey = "coreaiq.palette"

// stampPalette records rep on the prologue node that writes value.
func (w *writer) stampPalette(value string, rep *plan.PaletteReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	for i := len(w.prologue) - 1; i >= 0; i-- {
		n := w.prologue[i]
		if len(n.Output) == 1 && n.Output[0] == value {
			n.MetadataProps = append(n.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(PaletteMetadataKey), Value: proto.String(string(b))})
			return nil
		}
	}
	return fmt.Errorf("weight %q: no node writes it", value)
}

func int64Tensor(v []int) *tensor.Tensor {
	t := tensor.New(tensor.Int64, len(v))
	for i, x := range v {
		t.Data.([]int64)[i] = int64(x)
	}
	return t
}

// SQNR is 10·log10(Σx² / Σ(x−y)²) in dB, +Inf when y equals x.
func SQNR(x, y []float32) float64 {
	var s, e float64
	for i, v := range x {
		d := float64(v) - float64(y[i])
		s += float64(v) * float64(v)
		e += d * d
	}
	if e == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(s/e)
}

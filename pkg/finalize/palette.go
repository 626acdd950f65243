package finalize

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/plan"
	"github.com/coreaiq/coreaiq/pkg/quant"
)

// Palettized is a weight as indices into lookup tables, with what the ONNX
// subgraph needs to rebuild it.
type Palettized struct {
	Shape []int
	// Axis is the channel axis groups and vectors run along.
	Axis       int
	ClusterDim int
	// Entries is 2^n_bits; LUTs is the number of tables; GroupChannels the
	// channels along Axis that share one (the last group may be shorter).
	Entries, LUTs, GroupChannels int
	// LUT is [LUTs][Entries][ClusterDim], as the model computes it (an int8
	// LUT dequantized).
	LUT []float32
	// LUTCodes, LUTScales and LUTZeroPoints are the stored form of an
	// int8/uint8 LUT: codes [LUTs][Entries·ClusterDim], one scale and zero
	// point per LUT.
	LUTDType      config.LUTDType
	LUTCodes      []int32
	LUTScales     []float32
	LUTZeroPoints []int32
	// Index is the entry of each element (ClusterDim 1) or each vector of
	// ClusterDim channels along Axis: shape IndexShape.
	Index []uint8
	// Scales are the per-channel scales along ScaleAxis, nil without.
	Scales    []float32
	ScaleAxis int
}

// IndexShape is the shape of the indices: the weight's, with the channel
// axis divided by ClusterDim.
func (q *Palettized) IndexShape() []int {
	s := append([]int(nil), q.Shape...)
	s[q.Axis] /= q.ClusterDim
	return s
}

// along splits shape around axis: the product of the dimensions before,
// the dimension, and the product after.
func along(shape []int, axis int) (outer, dim, inner int) {
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	return outer, shape[axis], inner
}

// Palettize clusters a weight into 2^n_bits-entry LUTs as p says:
// per-channel scaling first, then per group of channels either exact 1-D
// k-means (kernels.KMeans1D) or vector k-means on runs of ClusterDim
// channels; an int8/uint8 LUT is quantized and the indices re-chosen
// against it. importance, when not nil, weighs each element's squared
// error (data-aware mode). Groups are clustered on threads.
func Palettize(data []float32, shape []int, axis, scaleAxis int, p *config.Palettization, importance []float32, threads int) (*Palettized, error) {
	if axis < 0 || axis >= len(shape) || scaleAxis < 0 || scaleAxis >= len(shape) {
		return nil, fmt.Errorf("axis %d or scale axis %d out of range for shape %v", axis, scaleAxis, shape)
	}
	outer, chans, inner := along(shape, axis)
	cd := p.ClusterDim
	if chans%cd != 0 {
		return nil, fmt.Errorf("%d channels along axis %d are not a multiple of cluster_dim %d", chans, axis, cd)
	}
	q := &Palettized{Shape: append([]int(nil), shape...), Axis: axis, ClusterDim: cd, Entries: 1 << p.NBits,
		LUTs: 1, GroupChannels: chans, LUTDType: p.LUTDType, ScaleAxis: scaleAxis}
	if p.Granularity == config.PalettePerGroupedChannel {
		q.GroupChannels = min(p.GroupSize, chans)
		q.LUTs = (chans + q.GroupChannels - 1) / q.GroupChannels
	}
	x := data
	if p.PerChannelScale {
		x, q.Scales = channelScaled(data, shape, scaleAxis)
		if importance != nil {
			// The error is scaled back with the channel: weigh it so.
			_, sc, si := along(shape, scaleAxis)
			weighted := make([]float32, len(importance))
			for i := range weighted {
				s := q.Scales[i/si%sc]
				weighted[i] = importance[i] * s * s
			}
			importance = weighted
		}
	}
	vecs := chans / cd
	q.Index = make([]uint8, outer*vecs*inner)
	q.LUT = make([]float32, q.LUTs*q.Entries*cd)
	if q.LUTDType != config.LUTFloat {
		q.LUTCodes = make([]int32, len(q.LUT))
		q.LUTScales = make([]float32, q.LUTs)
		q.LUTZeroPoints = make([]int32, q.LUTs)
	}
	errs := make([]error, q.LUTs)
	kernels.Parallel(threads, q.LUTs, 1, func(lo, hi int) {
		for g := lo; g < hi; g++ {
			errs[g] = q.cluster(g, x, importance, outer, inner, threads/max(q.LUTs, 1))
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return q, nil
}

// cluster fills LUT g and the indices of its channels.
func (q *Palettized) cluster(g int, x, importance []float32, outer, inner, threads int) error {
	cd, chans := q.ClusterDim, q.Shape[q.Axis]
	vecs := chans / cd
	b0, b1 := g*q.GroupChannels/cd, min((g+1)*q.GroupChannels, chans)/cd // vector rows of the group
	n := outer * (b1 - b0) * inner
	vals := make([]float32, 0, n*cd)
	var w []float32
	if importance != nil {
		w = make([]float32, 0, n)
	}
	// pos lists the index slot of each gathered vector.
	pos := make([]int, 0, n)
	for o := range outer {
		for b := b0; b < b1; b++ {
			for i := range inner {
				var wi float32
				for t := range cd {
					e := (o*chans+b*cd+t)*inner + i
					vals = append(vals, x[e])
					if importance != nil {
						wi += importance[e]
					}
				}
				if importance != nil {
					w = append(w, wi)
				}
				pos = append(pos, (o*vecs+b)*inner+i)
			}
		}
	}
	lut := q.LUT[g*q.Entries*cd : (g+1)*q.Entries*cd]
	var centroids []float32
	if cd == 1 {
		centroids = kernels.KMeans1D(vals, w, q.Entries)
	} else {
		centroids, _ = kernels.KMeansVectors(vals, cd, w, q.Entries, max(threads, 1))
	}
	if len(centroids) == 0 {
		centroids = make([]float32, cd) // a group of non-finite values only
	}
	copy(lut, centroids)
	for e := len(centroids) / cd; e < q.Entries; e++ { // unused entries repeat the last
		copy(lut[e*cd:(e+1)*cd], centroids[len(centroids)-cd:])
	}
	if q.LUTDType != config.LUTFloat {
		q.quantizeLUT(g)
	}
	// Indices against the LUT as stored: the nearest entry.
	for v, slot := range pos {
		if cd == 1 { // a scalar LUT is ascending (quantizing it keeps the order)
			q.Index[slot] = uint8(kernels.NearestSorted(lut, vals[v]))
		} else {
			q.Index[slot] = uint8(nearestEntry(lut, cd, vals[v*cd:(v+1)*cd]))
		}
	}
	return nil
}

// nearestEntry is the entry of lut (rows of cd) nearest to vec, the first
// on a tie.
func nearestEntry(lut []float32, cd int, vec []float32) int {
	best, arg := math.Inf(1), 0
	for e := 0; e*cd < len(lut); e++ {
		var d float64
		for t, v := range vec {
			diff := float64(v) - float64(lut[e*cd+t])
			d += diff * diff
		}
		if d < best || (math.IsNaN(best) && !math.IsNaN(d)) {
			best, arg = d, e
		}
	}
	return arg
}

// quantizeLUT stores LUT g as int8 (symmetric) or uint8 (asymmetric)
// codes (into slices Palettize allocates before the groups run) and
// replaces its values with the dequantized ones, computed as
// DequantizeLinear does.
func (q *Palettized) quantizeLUT(g int) {
	size := q.Entries * q.ClusterDim
	lut := q.LUT[g*size : (g+1)*size]
	lo, hi := float32(0), float32(0)
	for _, v := range lut {
		lo, hi = min(lo, v), max(hi, v)
	}
	var scale float32
	var zp int32
	qmin, qmax := int64(-127), int64(127)
	if q.LUTDType == config.LUTUInt8 {
		qmin, qmax = 0, 255
		scale = (hi - lo) / 255
		if scale > 0 {
			zp = int32(quant.Int(-lo, scale, 0, 0, 255))
		}
	} else {
		scale = max(-lo, hi) / 127
	}
	if scale == 0 || math.IsNaN(float64(scale)) || math.IsInf(float64(scale), 0) {
		scale = 1
	}
	q.LUTScales[g], q.LUTZeroPoints[g] = scale, zp
	codes := q.LUTCodes[g*size : (g+1)*size]
	for i, v := range lut {
		codes[i] = int32(quant.Int(v, scale, int64(zp), qmin, qmax))
		lut[i] = quant.Dequantize(int64(codes[i]), int64(zp), scale)
	}
}

// channelScaled divides each channel along axis by its largest magnitude
// (1 for an all-zero channel) and returns the scaled data and the scales.
func channelScaled(data []float32, shape []int, axis int) ([]float32, []float32) {
	_, chans, inner := along(shape, axis)
	scales := make([]float32, chans)
	for i, v := range data {
		c := i / inner % chans
		scales[c] = max(scales[c], float32(math.Abs(float64(v))))
	}
	for c, s := range scales {
		if s == 0 || math.IsInf(float64(s), 0) || math.IsNaN(float64(s)) {
			scales[c] = 1
		}
	}
	out := make([]float32, len(data))
	for i, v := range data {
		out[i] = v / scales[i/inner%chans]
	}
	return out, scales
}

// Dequantize rebuilds the weight as the ONNX subgraph computes it: the LUT
// entry of each index (the group's table), times the channel's scale.
func (q *Palettized) Dequantize() []float32 {
	outer, chans, inner := along(q.Shape, q.Axis)
	cd := q.ClusterDim
	vecs := chans / cd
	out := make([]float32, outer*chans*inner)
	for o := range outer {
		for b := range vecs {
			g := b * cd / q.GroupChannels
			for i := range inner {
				e := int(q.Index[(o*vecs+b)*inner+i])
				row := q.LUT[(g*q.Entries+e)*cd:]
				for t := range cd {
					out[(o*chans+b*cd+t)*inner+i] = row[t]
				}
			}
		}
	}
	if q.Scales != nil {
		_, sc, si := along(q.Shape, q.ScaleAxis)
		for i := range out {
			out[i] *= q.Scales[i/si%sc]
		}
	}
	return out
}

// BitsPerWeight is the stored size over the weight's elements: indices as
// stored (uint4 up to 16 entries, else uint8: a 2-bit index takes 4 bits,
// a 5-bit one 8), the LUTs in their type (32-bit floats, or 8-bit codes
// with a 32-bit scale per LUT), and 32-bit per-channel scales.
func (q *Palettized) BitsPerWeight() float64 {
	n := 1
	for _, d := range q.Shape {
		n *= d
	}
	bits := 8.0
	if q.Entries <= 16 {
		bits = 4
	}
	total := bits * float64(len(q.Index))
	if q.LUTDType == config.LUTFloat {
		total += 32 * float64(len(q.LUT))
	} else {
		total += 8*float64(len(q.LUT)) + 32*float64(q.LUTs)
		if q.LUTDType == config.LUTUInt8 {
			total += 8 * float64(q.LUTs)
		}
	}
	total += 32 * float64(len(q.Scales))
	return total / float64(n)
}

// importanceFloor is the least importance of an input channel, as a
// fraction of the mean second moment.
const importanceFloor = 1e-3

// importance spreads the per-channel second moments of a weight's input
// activation over the weight's elements: element e multiplies input
// channel c(e), so its squared error weighs E[x_c²] in the layer's output
// error (the diagonal of the layer Hessian). A Conv with groups covers
// Cin/groups channels per group of output channels. It returns an error
// when the moments do not fit the weight.
func importance(p *plan.PalettePlan, moments []float32) ([]float32, error) {
	if p.InputAxis < 0 || p.InputAxis >= len(p.Shape) {
		return nil, fmt.Errorf("weight %q has no input axis", p.Value)
	}
	groups := max(p.Groups, 1)
	outer, per, inner := along(p.Shape, p.InputAxis)
	if per*groups != len(moments) {
		return nil, fmt.Errorf("weight %q: %d input channels (×%d groups) for %d moments of %q", p.Value, per, groups, len(moments), p.Input)
	}
	// A channel the calibration data never excites still carries some
	// weight: the data may be short of what the model meets.
	var mean float64
	for _, m := range moments {
		mean += float64(m)
	}
	floor := float32(mean / float64(len(moments)) * importanceFloor)
	// Output channels are axis 0 of a grouped Conv's weight.
	perGroupOut := max(p.Shape[0]/groups, 1)
	out := make([]float32, outer*per*inner)
	for o := range outer {
		g := 0
		if groups > 1 {
			g = o / perGroupOut
		}
		for c := range per {
			m := max(moments[g*per+c], floor)
			row := out[(o*per+c)*inner : (o*per+c+1)*inner]
			for i := range row {
				row[i] = m
			}
		}
	}
	return out, nil
}

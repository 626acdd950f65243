package spec

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/coreaiq/coreaiq/pkg/quant"
)

// ScaleFloor is the smallest scale computed: float32 machine epsilon, as in
// torch (torch.finfo(torch.float32).eps) and coreai-opt.
const ScaleFloor = float32(1.1920928955078125e-07)

// QuantRange is the integer range the quantized values use under s:
// the full range for Symmetric and Asymmetric, and one code less at the
// bottom for SymmetricWithClipping ([-127, 127] for int8, [1, 255] for
// uint8). Float types have no integer range (ok is false).
func (s *QuantizationSpec) QuantRange() (qmin, qmax int64, ok bool) {
	if !s.DType.IsInteger() {
		return 0, 0, false
	}
	qmin, qmax = s.DType.Range()
	if s.QScheme == SymmetricWithClipping {
		qmin++
	}
	return qmin, qmax, true
}

// QParams computes one scale and zero point per (min, max) pair: per tensor
// the arrays have one element, per channel one per channel, per block one per
// block — the granularity decides the layout, this function is elementwise.
//
// Integer types (computed in float32 like torch, rounding half to even):
//   - symmetric: scale = absmax / ((qmax − qmin) / 2) (absmax/127.5 for
//     int8), zero point 0 for signed types and (qmax+1)/2 for unsigned
//     (128 for uint8);
//   - symmetric_with_clipping: as symmetric on [qmin+1, qmax] (absmax/127
//     for int8);
//   - asymmetric: scale = (max(max,0) − min(min,0)) / (qmax − qmin),
//     zero point = qmin − round(min(min,0)/scale) clamped to [qmin, qmax].
//
// Float types: scale = absmax / largest finite value (448, 57344, 6), zero
// point 0. Scales are floored at ScaleFloor, then rounded to the scale
// dtype; float8_e8m0fnu scales are powers of two: for float data
// 2^(floor(log2 absmax) − emax) with emax 8, 15 and 2 (the OCP MX rule;
// values above the largest element saturate), for integer data the power of
// two at or above the float scale.
func (s *QuantizationSpec) QParams(mins, maxs []float32) (scales []float32, zeroPoints []int32, err error) {
	if len(mins) != len(maxs) {
		return nil, nil, fmt.Errorf("qparams: %d minimums but %d maximums", len(mins), len(maxs))
	}
	if !s.DType.IsData() {
		return nil, nil, fmt.Errorf("qparams: dtype %s cannot hold quantized data", s.DType)
	}
	for i := range mins {
		lo, hi := mins[i], maxs[i]
		if isNaNOrInf(lo) || isNaNOrInf(hi) {
			return nil, nil, fmt.Errorf("qparams: range %d is [%g, %g], not finite", i, lo, hi)
		}
		if lo > hi {
			return nil, nil, fmt.Errorf("qparams: range %d has min %g > max %g", i, lo, hi)
		}
	}
	scales = make([]float32, len(mins))
	zeroPoints = make([]int32, len(mins))
	fill := func(from, to int) {
		for i := from; i < to; i++ {
			scales[i], zeroPoints[i] = s.qparam(mins[i], maxs[i])
		}
	}
	// A 4-bit weight of a large decoder has millions of blocks: their
	// qparams are independent, so they are shared among the cores.
	const parallelRanges = 1 << 16
	workers := runtime.GOMAXPROCS(0)
	if len(mins) < parallelRanges || workers == 1 {
		fill(0, len(mins))
		return scales, zeroPoints, nil
	}
	per := (len(mins) + workers - 1) / workers
	var wg sync.WaitGroup
	for from := 0; from < len(mins); from += per {
		wg.Add(1)
		go func(from, to int) {
			defer wg.Done()
			fill(from, to)
		}(from, min(from+per, len(mins)))
	}
	wg.Wait()
	return scales, zeroPoints, nil
}

// QParam is QParams for one finite range lo ≤ hi, without allocating (the
// weight range search evaluates it for every candidate of every block).
// The caller checks the range; s must hold data (DType.IsData).
func (s *QuantizationSpec) QParam(lo, hi float32) (scale float32, zeroPoint int32) {
	return s.qparam(lo, hi)
}

func (s *QuantizationSpec) qparam(lo, hi float32) (float32, int32) {
	minNeg, maxPos := min(lo, 0), max(hi, 0)
	absmax := max(-minNeg, maxPos)
	scaleDType := s.ScaleDType
	if s.DType.IsFloat() {
		if scaleDType == Float8E8M0FNU {
			return e8m0Scale(absmax, s.DType.info().emax), 0
		}
		scale := max(absmax/float32(s.DType.MaxFinite()), ScaleFloor)
		return roundScale(scaleDType, scale), 0
	}
	g, _ := s.IntGrid()
	return g.QParam(lo, hi)
}

// IntGrid is an integer spec's qparam formula with the spec's constants
// resolved once, for callers that evaluate it for many ranges.
type IntGrid struct {
	QMin, QMax int64
	scheme     QScheme
	scaleDType DType
	// symZP is the zero point of symmetric schemes: 0 for signed types,
	// (full qmax+1)/2 for unsigned.
	symZP int64
}

// IntGrid resolves s's integer formula; ok is false for float types.
func (s *QuantizationSpec) IntGrid() (g IntGrid, ok bool) {
	qmin, qmax, ok := s.QuantRange()
	if !ok {
		return IntGrid{}, false
	}
	g = IntGrid{QMin: qmin, QMax: qmax, scheme: s.QScheme, scaleDType: s.ScaleDType}
	if !s.DType.IsSigned() {
		g.symZP = (s.fullMax() + 1) / 2
	}
	return g, true
}

// QParam is the scale and zero point of the range [lo, hi] (see QParams).
func (g IntGrid) QParam(lo, hi float32) (float32, int32) {
	minNeg, maxPos := min(lo, 0), max(hi, 0)
	var scale float32
	var zp int64
	switch g.scheme {
	case Asymmetric:
		scale = max((maxPos-minNeg)/float32(g.QMax-g.QMin), ScaleFloor)
		scale = roundScale(g.scaleDType, scale)
		zp = g.QMin - int64(roundHalfEven(minNeg/scale))
		zp = min(max(zp, g.QMin), g.QMax)
	default: // Symmetric, SymmetricWithClipping (QSchemeAuto is symmetric)
		absmax := max(-minNeg, maxPos)
		scale = max(absmax/(float32(g.QMax-g.QMin)/2), ScaleFloor)
		scale = roundScale(g.scaleDType, scale)
		zp = g.symZP
	}
	return scale, int32(zp)
}

func (s *QuantizationSpec) fullMax() int64 {
	_, qmax := s.DType.Range()
	return qmax
}

// e8m0Scale is 2^(floor(log2 absmax) − emax), with the exponent kept in the
// e8m0 range [-127, 127]; an all-zero range gets 2^-127.
func e8m0Scale(absmax float32, emax int) float32 {
	if absmax == 0 {
		return float32(math.Ldexp(1, -127))
	}
	_, e := math.Frexp(float64(absmax)) // absmax = f·2^e, f in [0.5, 1)
	return float32(math.Ldexp(1, clampInt(e-1-emax, -127, 127)))
}

// roundHalfEven is the quantizer's rounding (pkg/quant) in float32.
func roundHalfEven(x float32) float32 { return float32(quant.RoundHalfEven(float64(x))) }

func isNaNOrInf(x float32) bool { return math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) }

package kernels

import "math"

// Activation is an elementwise function fused into a GEMM or convolution
// epilogue.
type Activation int

// The fused activations. Each computes exactly what the standalone op of
// the engine computes, so fusing never changes a bit of the result.
const (
	ActNone Activation = iota
	// ActRelu is max(x, 0).
	ActRelu
	// ActClip is min(max(x, Min), Max).
	ActClip
)

// Epilogue is applied to each element of a product's result while the tile
// is still in cache:
//
//	c[i,j] = c[i,j] + RowBias[i] + ColBias[j]
//	c[i,j] = float32(c[i,j]·RowScale[i]) + RowShift[i]
//	c[i,j] = c[i,j] + Residual[i·ldc+j]
//	c[i,j] = act(c[i,j])
//
// with each bias, the scale step and the residual omitted when nil
// (RowScale and RowShift come together: an inference BatchNormalization;
// Residual is a tensor laid out as C, with C's row stride ldc and the
// product's global row and column indices, such as the skip connection
// that a ResNet block adds before its Relu). The product is rounded
// before the shift is added, as the standalone kernels do, so a fused
// epilogue computes exactly what the separate ops compute.
type Epilogue struct {
	RowBias, ColBias   []float32
	RowScale, RowShift []float32
	Residual           []float32
	// ResidualFirst makes the residual the left operand of its addition,
	// as in the graph's Add, so that even NaN payloads match.
	ResidualFirst bool
	Act           Activation
	Min, Max      float32
}

// rowOnly reports whether the epilogue is per row: ((v + b)·s) + t and
// an optional Relu, what epilogueRow and the micro-kernels' tileEp do.
func (e *Epilogue) rowOnly() bool {
	return e.ColBias == nil && e.Residual == nil && (e.Act == ActNone || e.Act == ActRelu)
}

// rowParam returns row i's (b, s, t), with b = −0, s = 1 and t = −0
// standing for an omitted bias or scale (x + (−0) and x·1 are x for every
// x, signed zeros included).
func (e *Epilogue) rowParam(i int) (b, s, t float32) {
	negZero := float32(math.Copysign(0, -1))
	b, s, t = negZero, 1, negZero
	if e.RowBias != nil {
		b = e.RowBias[i]
	}
	if e.RowScale != nil {
		s, t = e.RowScale[i], e.RowShift[i]
	}
	return b, s, t
}

// rowParams returns the (b, s, t) triples of rows [row, row+n) in dst's
// storage, for the micro-kernels' tileEp.
func (e *Epilogue) rowParams(dst []float32, row, n int) []float32 {
	dst = grow(dst, 3*n)
	for i := range n {
		dst[3*i], dst[3*i+1], dst[3*i+2] = e.rowParam(row + i)
	}
	return dst
}

// apply runs the epilogue on the rows×cols block of c at global position
// (row, col).
func (e *Epilogue) apply(c []float32, ldc, row, col, rows, cols int) {
	if e.rowOnly() {
		// Per row: (x + b)·s + t then the activation.
		for i := 0; i < rows; i++ {
			b, s, t := e.rowParam(row + i)
			epilogueRow(c[i*ldc:i*ldc+cols], b, s, t, e.Act == ActRelu)
		}
		return
	}
	if e.ColBias == nil && (e.Act == ActNone || e.Act == ActRelu) {
		// A row epilogue and a residual: the three steps in vector passes
		// over the row while it is in cache.
		for i := 0; i < rows; i++ {
			r := c[i*ldc : i*ldc+cols]
			b, s, t := e.rowParam(row + i)
			epilogueRow(r, b, s, t, false)
			e.addResidual(r, row+i, col, ldc)
			e.activate(r)
		}
		return
	}
	for i := 0; i < rows; i++ {
		r := c[i*ldc : i*ldc+cols]
		if e.RowBias != nil {
			b := e.RowBias[row+i]
			for j := range r {
				r[j] += b
			}
		}
		if e.ColBias != nil {
			cb := e.ColBias[col : col+cols]
			for j := range r {
				r[j] += cb[j]
			}
		}
		if e.RowScale != nil {
			s, t := e.RowScale[row+i], e.RowShift[row+i]
			for j, v := range r {
				r[j] = float32(v*s) + t
			}
		}
		if e.Residual != nil {
			e.addResidual(r, row+i, col, ldc)
		}
		e.activate(r)
	}
}

// addResidual adds the residual's part of row (global index) from column
// col to r.
func (e *Epilogue) addResidual(r []float32, row, col, ldc int) {
	o := row*ldc + col
	res := e.Residual[o : o+len(r)]
	if e.ResidualFirst {
		Binary(BinAdd, r, res, r)
		return
	}
	Binary(BinAdd, r, r, res)
}

// epilogueRowGo is the reference of the row epilogue, in place:
//
//	for j < len(r): y = float32(float32(r[j]+b)·s) + t; r[j] = relu && y <= 0 ? 0 : y
func epilogueRowGo(r []float32, b, s, t float32, relu bool) {
	if relu {
		for j, v := range r {
			y := float32(float32(v+b)*s) + t
			if y <= 0 {
				y = 0
			}
			r[j] = y
		}
		return
	}
	for j, v := range r {
		r[j] = float32(float32(v+b)*s) + t
	}
}

// Apply runs the epilogue on a rows×cols matrix c with leading dimension ldc.
func (e *Epilogue) Apply(c []float32, ldc, rows, cols int) { e.apply(c, ldc, 0, 0, rows, cols) }

func (e *Epilogue) activate(r []float32) {
	switch e.Act {
	case ActRelu:
		// Equal to max(v, 0) for every input (−0 → +0, NaN stays NaN):
		// the row epilogue's ≤ 0 mask after (v + (−0))·1 + (−0) = v.
		negZero := float32(math.Copysign(0, -1))
		epilogueRow(r, negZero, 1, negZero, true)
	case ActClip:
		lo, hi := e.Min, e.Max
		for j, v := range r {
			r[j] = min(max(v, lo), hi)
		}
	}
}

// axpyGo is the reference of axpy: for j < len(dst): dst[j] += w·src[j],
// the product rounded before the add.
func axpyGo(dst, src []float32, w float32) {
	src = src[:len(dst)]
	for j, v := range src {
		dst[j] += float32(w * v)
	}
}

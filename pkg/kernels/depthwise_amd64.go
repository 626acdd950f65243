//go:build !noasm && amd64

package kernels

import (
	"math"
	"unsafe"
)

// depthwiseAVX512 runs Depthwise2D's size×size kernels (size 3 or 5) in
// dw{size}x{size}s{1,2}x{16,8}AVX512, which read the input rows in place
// (no padded copy), apply a per-row epilogue in registers and go from
// channel to channel themselves, up to dwChunk channels a call. It reports
// false, having done nothing, without AVX-512 or when the row and column
// strides differ (the kernels share input rows between output rows of the
// same stride).
func depthwiseAVX512(size int, g *ConvGeom, x, w, y []float32, c0, c1 int, ep *Epilogue) bool {
	ih, iw := g.In[0], g.In[1]
	oh, ow := g.Out[0], g.Out[1]
	stride := g.Strides[1]
	ph, pw := g.PadBegin[0], g.PadBegin[1]
	if !hasAVX512 || g.Strides[0] != stride || ih < 1 || iw < 1 || oh < 1 || ow < 1 {
		return false
	}
	// Narrow images in YMM: a ZMM would leave half its lanes idle, and
	// its loads' disabled lanes would reach further into other pages.
	lanes := 16
	if ow <= 8 {
		lanes = 8
	}
	var buf [8 * 8]uint16
	var masks []uint16
	if n := 8 * ((ow + lanes - 1) / lanes); n <= len(buf) {
		masks = buf[:n]
	} else {
		masks = make([]uint16, n)
	}
	dwMasks(masks, size, stride, lanes, iw, ow, pw)
	nv := len(masks) / 8
	zero := dwZeroRow(iw, pw)
	kernel := dwPlaneKernels[dwPlaneKey{size, stride, lanes}]
	// Without a per-row epilogue the kernel applies the identity: x + (−0)
	// and x·1 are x for every x, and no value is <= NaN.
	negZero, thr := float32(math.Copysign(0, -1)), float32(math.NaN())
	inRegs := ep != nil && ep.rowOnly()
	if inRegs && ep.Act == ActRelu {
		thr = 0
	}
	is, os, ks := g.InSize(), g.OutSize(), size*size
	var bst [3 * dwChunk]float32
	depthwiseFiniteRuns(size, g, x, w, y, c0, c1, ep, func(a, b int) {
		for ; a < b; a += dwChunk {
			n := min(b-a, dwChunk)
			for i := range n {
				bst[3*i], bst[3*i+1], bst[3*i+2] = negZero, 1, negZero
				if inRegs {
					bst[3*i], bst[3*i+1], bst[3*i+2] = ep.rowParam(a + i)
				}
			}
			kernel(&y[a*os], &x[a*is], &zero[0], &w[a*ks], &masks[0], nv, oh, ow, ih, iw, ph, pw, &bst[0], thr, n)
			if ep != nil && !inRegs {
				ep.apply(y[a*os:(a+n)*os], os, a, 0, n, os)
			}
		}
	})
	return true
}

// dwChunk is the number of channels of one plane-kernel call.
const dwChunk = 64

// dwPlaneKey selects a plane kernel: kernel size, stride, lanes.
type dwPlaneKey struct{ size, stride, lanes int }

var dwPlaneKernels = map[dwPlaneKey]func(y, x, zero, w *float32, masks *uint16, nv, oh, ldy, ih, ldx, ph, pw int, bst *float32, thr float32, channels int){
	{3, 1, 16}: dw3x3s1x16AVX512, {3, 1, 8}: dw3x3s1x8AVX512,
	{3, 2, 16}: dw3x3s2x16AVX512, {3, 2, 8}: dw3x3s2x8AVX512,
	{5, 1, 16}: dw5x5s1x16AVX512, {5, 1, 8}: dw5x5s1x8AVX512,
	{5, 2, 16}: dw5x5s2x16AVX512, {5, 2, 8}: dw5x5s2x8AVX512,
}

// dwZeros holds the zero rows that stand for the input rows above and
// below the image; the kernels only read it.
var dwZeros [2048]float32

// dwZeroRow returns a row of iw zeros for images with pw columns of
// padding before each row. The kernels' loads reach from pw columns
// before the row to less than 64 columns after it (with fewer than 30
// columns of padding after the image); the row is placed so that they
// stay in one page when they fit in one, because a masked load whose
// disabled lanes cross into another page takes a microcode assist on
// some cores, and every channel reads the zero row.
func dwZeroRow(iw, pw int) []float32 {
	const page, after = 4096, 64
	if 4*(pw+iw+after) > page {
		return make([]float32, iw)
	}
	// The first page boundary in dwZeros, at most a page minus 4 bytes
	// in, leaves a page of the array's 8 KiB after it.
	start := int((page-uintptr(unsafe.Pointer(&dwZeros[0]))%page)%page)/4 + pw
	return dwZeros[start : start+iw]
}

// dwMasks fills masks, eight uint16 per vector of lanes outputs, with the
// lane masks of dw{size}x{size}s{stride}x{lanes}AVX512 for rows of ow
// outputs over iw input columns after pw columns of padding: the masks of
// the vector's loads from index 0 (lane j of the load at virtual column c
// is set when pw ≤ c+j < pw+iw, inside the input row) and at index 7 of its
// store (the lanes below ow). Stride 1 loads at the columns c+kx for
// kx < size, stride 2 at c+o and c+lanes+o for o = 0, 2, …, size−1, c being
// the vector's first tap column.
func dwMasks(masks []uint16, size, stride, lanes, iw, ow, pw int) {
	inside := func(c int) uint16 {
		var m uint16
		for j := range lanes {
			if c+j >= pw && c+j < pw+iw {
				m |= 1 << j
			}
		}
		return m
	}
	for v := range len(masks) / 8 {
		e := masks[8*v : 8*v+8]
		c := lanes * stride * v
		i := 0
		for o := 0; o < size; o += stride {
			e[i] = inside(c + o)
			i++
			if stride == 2 {
				e[i] = inside(c + lanes + o)
				i++
			}
		}
		e[7] = uint16(1<<min(lanes, ow-lanes*v) - 1)
	}
}

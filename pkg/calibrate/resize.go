package calibrate

import "math"

// Image resizing that reproduces Pillow's Image.resize(size, BILINEAR), the
// resize torchvision's Resize applies to PIL images, so that calibration
// inputs made from image files match what a Python pipeline feeds the model.
//
// Pillow (libImaging/Resample.c) resamples with a separable convolution,
// horizontal pass first, then vertical. For output pixel xx of a pass
// mapping inSize pixels to outSize:
//
//	scale       = inSize / outSize
//	filterscale = max(scale, 1)           // the filter widens when reducing
//	support     = 1 · filterscale         // the triangle filter's support is 1
//	center      = (xx + 0.5) · scale
//	xmin        = max(int(center − support + 0.5), 0)      // C truncation
//	xmax        = min(int(center + support + 0.5), inSize)
//	w[x]        = triangle((x − center + 0.5) / filterscale),  x in [xmin, xmax)
//	              triangle(t) = max(1 − |t|, 0)
//	w          /= Σ w
//
// For 8-bit images the weights become fixed point with 22 fractional bits,
// kk = int(w·2^22 ± 0.5) (rounded away from zero), each output is
// clip8((2^21 + Σ pixel·kk) >> 22), and the horizontal pass stores 8-bit
// pixels that the vertical pass reads. An axis whose size does not change
// is not resampled. Reducing therefore averages over every input pixel
// under the widened filter (antialiasing), unlike a plain bilinear lookup.

// pilPrecisionBits is Pillow's PRECISION_BITS for 8-bit images (32 − 8 − 2).
const pilPrecisionBits = 32 - 8 - 2

// pilCoeffs returns, per output pixel, the first input pixel and the fixed
// point weights of the pixels from there on.
func pilCoeffs(inSize, outSize int) (first []int, weights [][]int32) {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1)
	support := filterscale
	first = make([]int, outSize)
	weights = make([][]int32, outSize)
	for xx := range outSize {
		center := (float64(xx) + 0.5) * scale
		ss := 1 / filterscale
		xmin := max(int(center-support+0.5), 0) // int() truncates like C's (int)
		xmax := min(int(center+support+0.5), inSize)
		w := make([]float64, max(xmax-xmin, 0))
		ww := 0.0
		for x := range w {
			t := math.Abs((float64(x+xmin) - center + 0.5) * ss)
			if t < 1 {
				w[x] = 1 - t
			}
			ww += w[x]
		}
		k := make([]int32, len(w))
		for x := range w {
			if ww != 0 {
				w[x] /= ww
			}
			if w[x] < 0 {
				k[x] = int32(-0.5 + w[x]*(1<<pilPrecisionBits))
			} else {
				k[x] = int32(0.5 + w[x]*(1<<pilPrecisionBits))
			}
		}
		first[xx], weights[xx] = xmin, k
	}
	return first, weights
}

func clip8(v int32) uint8 {
	switch {
	case v >= 1<<pilPrecisionBits<<8:
		return 255
	case v <= 0:
		return 0
	}
	return uint8(v >> pilPrecisionBits)
}

// resizePIL resizes an 8-bit image of w×h pixels with c interleaved
// channels to ow×oh as Pillow's BILINEAR resize does (see above).
func resizePIL(src []uint8, w, h, c, ow, oh int) []uint8 {
	if ow != w {
		first, k := pilCoeffs(w, ow)
		dst := make([]uint8, ow*h*c)
		for y := range h {
			row := src[y*w*c : (y+1)*w*c]
			for xx := range ow {
				for ch := range c {
					ss := int32(1) << (pilPrecisionBits - 1)
					for x, kk := range k[xx] {
						ss += int32(row[(first[xx]+x)*c+ch]) * kk
					}
					dst[(y*ow+xx)*c+ch] = clip8(ss)
				}
			}
		}
		src, w = dst, ow
	}
	if oh != h {
		first, k := pilCoeffs(h, oh)
		dst := make([]uint8, w*oh*c)
		for yy := range oh {
			for x := range w * c {
				ss := int32(1) << (pilPrecisionBits - 1)
				for y, kk := range k[yy] {
					ss += int32(src[(first[yy]+y)*w*c+x]) * kk
				}
				dst[yy*w*c+x] = clip8(ss)
			}
		}
		src = dst
	}
	return src
}

// shorterSide is torchvision's Resize(n) size for a w×h image: the shorter
// side becomes n and the longer int(n·long/short) (truncated).
func shorterSide(w, h, n int) (ow, oh int) {
	if w <= h {
		return n, int(float64(n) * float64(h) / float64(w))
	}
	return int(float64(n) * float64(w) / float64(h)), n
}

// centerCropOrigin is torchvision's CenterCrop offset: round((size −
// crop)/2) with Python's round half to even.
func centerCropOrigin(size, crop int) int {
	return int(math.RoundToEven(float64(size-crop) / 2))
}

//go:build !noasm && arm64

package kernels

import "unsafe"

// gatheredTileI makes the tileI of a family whose tile has nr = 8 and kc
// at most 256: it gathers step p's B row at b + offs[p] into a panel and
// runs tile on it.
func gatheredTileI(tile func(rows, kc int, a, b, c *float32, ldc int, accumulate bool)) func(rows, kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool) {
	return func(rows, kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool) {
		const nr = 8
		var panel [256 * nr]float32
		os := unsafe.Slice(offs, kc)
		for p, o := range os {
			*(*[nr]float32)(panel[p*nr:]) = *(*[nr]float32)(unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(b), 4*o)), nr))
		}
		tile(rows, kc, a, &panel[0], c, ldc, accumulate)
	}
}

package kernels

import "unsafe"

// dwRowPortable is dwRowGo computed six outputs at a time: each tap's
// weight is loaded once for the six, whose sums are six independent
// chains of additions held in registers, and the loop reads x through a
// pointer whose reach is checked once. Every output takes the same
// products and sums in the same order as in dwRowGo (each product rounded
// to float32 before it is added, so never fused), so the results are the
// same bit for bit.
func dwRowPortable(out, x []float32, ldx, nr, size, stride int, w []float32) {
	const block = 6
	n := len(out) / block * block
	if n > 0 {
		_ = x[(nr-1)*ldx+stride*(n-1)+size-1]
		_ = w[size*nr-1]
	}
	step := uintptr(4 * stride)
	for j := 0; j < n; j += block {
		var a0, a1, a2, a3, a4, a5 float32
		pw := unsafe.Pointer(unsafe.SliceData(w))
		for r := 0; r < nr; r++ {
			px := unsafe.Pointer(&x[r*ldx+stride*j])
			for range size {
				wv := *(*float32)(pw)
				a0 += float32(wv * *(*float32)(px))
				a1 += float32(wv * *(*float32)(unsafe.Add(px, step)))
				a2 += float32(wv * *(*float32)(unsafe.Add(px, 2*step)))
				a3 += float32(wv * *(*float32)(unsafe.Add(px, 3*step)))
				a4 += float32(wv * *(*float32)(unsafe.Add(px, 4*step)))
				a5 += float32(wv * *(*float32)(unsafe.Add(px, 5*step)))
				pw = unsafe.Add(pw, 4)
				px = unsafe.Add(px, 4)
			}
		}
		o := (*[block]float32)(out[j:])
		o[0], o[1], o[2], o[3], o[4], o[5] = a0, a1, a2, a3, a4, a5
	}
	if n < len(out) {
		dwRowGo(out[n:], x[stride*n:], ldx, nr, size, stride, w)
	}
}

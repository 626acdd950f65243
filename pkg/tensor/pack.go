package tensor

// The ONNX packing of sub-byte integers: 4-bit elements two per byte, the
// first element in the low nibble; 2-bit elements four per byte, the first
// in the lowest two bits. Packing is contiguous over the flattened tensor
// (no per-row padding); the last byte is zero-padded.

// Pack4 packs the low nibbles of src (int4 or uint4 codes, one per element)
// into ceil(len(src)/2) bytes.
func Pack4[T ~int8 | ~uint8](src []T) []byte {
	dst := make([]byte, (len(src)+1)/2)
	pack4(dst, src)
	return dst
}

func pack4[T ~int8 | ~uint8](dst []byte, src []T) {
	n := len(src) / 2
	for i := range n {
		dst[i] = byte(src[2*i])&0xF | byte(src[2*i+1])<<4
	}
	if len(src)%2 == 1 {
		dst[n] = byte(src[2*n]) & 0xF
	}
}

// Unpack4 unpacks n unsigned 4-bit elements (uint4, or float4 e2m1 codes)
// from packed; packed must hold at least ceil(n/2) bytes.
func Unpack4(packed []byte, n int) []uint8 {
	dst := make([]uint8, n)
	for i := range n {
		dst[i] = packed[i/2] >> (4 * (i % 2)) & 0xF
	}
	return dst
}

// Unpack4Signed unpacks n int4 elements from packed, sign-extending each
// nibble; packed must hold at least ceil(n/2) bytes.
func Unpack4Signed(packed []byte, n int) []int8 {
	dst := make([]int8, n)
	for i := range n {
		dst[i] = int8(packed[i/2]>>(4*(i%2))<<4) >> 4
	}
	return dst
}

// Pack2 packs the low two bits of src (int2 or uint2 codes) into
// ceil(len(src)/4) bytes, x0 | x1<<2 | x2<<4 | x3<<6.
func Pack2[T ~int8 | ~uint8](src []T) []byte {
	dst := make([]byte, (len(src)+3)/4)
	for i, v := range src {
		dst[i/4] |= byte(v) & 3 << (2 * (i % 4))
	}
	return dst
}

// Unpack2 unpacks n uint2 elements from packed (at least ceil(n/4) bytes).
func Unpack2(packed []byte, n int) []uint8 {
	dst := make([]uint8, n)
	for i := range n {
		dst[i] = packed[i/4] >> (2 * (i % 4)) & 3
	}
	return dst
}

// Unpack2Signed unpacks n int2 elements from packed, sign-extending each
// pair of bits to [-2, 1].
func Unpack2Signed(packed []byte, n int) []int8 {
	dst := make([]int8, n)
	for i := range n {
		dst[i] = int8(packed[i/4]>>(2*(i%4))<<6) >> 6
	}
	return dst
}

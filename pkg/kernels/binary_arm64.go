//go:build !noasm && arm64

package kernels

// The element-wise binary kernels of internal/asm/neon/binary.go, over n
// values, a multiple of 8.

//go:noescape
func binAddNEON(o, a, b *float32, n int)

//go:noescape
func binSubNEON(o, a, b *float32, n int)

//go:noescape
func binMulNEON(o, a, b *float32, n int)

//go:noescape
func binDivNEON(o, a, b *float32, n int)

//go:noescape
func binAddScalarNEON(o, a *float32, s float32, n int, rev bool)

//go:noescape
func binSubScalarNEON(o, a *float32, s float32, n int, rev bool)

//go:noescape
func binMulScalarNEON(o, a *float32, s float32, n int, rev bool)

//go:noescape
func binDivScalarNEON(o, a *float32, s float32, n int, rev bool)

// binaryVec computes the first len(o) &^ 7 elements of Binary in NEON
// (bit-identical but for NaN payloads: one IEEE operation each) and
// returns how many.
func binaryVec(op BinOp, o, a, b []float32) int {
	n := len(o) &^ 7
	if !hasNEON || n == 0 {
		return 0
	}
	switch op {
	case BinAdd:
		binAddNEON(&o[0], &a[0], &b[0], n)
	case BinSub:
		binSubNEON(&o[0], &a[0], &b[0], n)
	case BinMul:
		binMulNEON(&o[0], &a[0], &b[0], n)
	default:
		binDivNEON(&o[0], &a[0], &b[0], n)
	}
	return n
}

// binaryScalarVec is binaryVec for BinaryScalar.
func binaryScalarVec(op BinOp, o, a []float32, s float32, rev bool) int {
	n := len(o) &^ 7
	if !hasNEON || n == 0 {
		return 0
	}
	switch op {
	case BinAdd:
		binAddScalarNEON(&o[0], &a[0], s, n, rev)
	case BinSub:
		binSubScalarNEON(&o[0], &a[0], s, n, rev)
	case BinMul:
		binMulScalarNEON(&o[0], &a[0], s, n, rev)
	default:
		binDivScalarNEON(&o[0], &a[0], s, n, rev)
	}
	return n
}

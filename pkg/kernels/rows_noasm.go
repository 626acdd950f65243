//go:build noasm || !(amd64 || arm64)

package kernels

// The row kernels both amd64 and arm64 have in assembly run their Go
// references here, or the portable loops that give the same bits.

func epilogueRow(r []float32, b, s, t float32, relu bool) { epilogueRowPortable(r, b, s, t, relu) }

func axpy(dst, src []float32, w float32) { axpyGo(dst, src, w) }

func maxRow(dst, src []float32, first bool) { maxRowGo(dst, src, first) }

func dwRow(out, x []float32, ldx, nr, size, stride int, w []float32) {
	dwRowPortable(out, x, ldx, nr, size, stride, w)
}

func clipVec(dst, src []float32, lo, hi float32) int { return 0 }

func binaryVec(op BinOp, o, a, b []float32) int { return 0 }

func binaryScalarVec(op BinOp, o, a []float32, s float32, rev bool) int { return 0 }

package kernels

// SgemmRef is the reference of Sgemm: C = alpha·op(A)·op(B) + beta·C on
// row-major matrices, where op(A) is m×k and op(B) is k×n:
//
//	for i < m, j < n:
//	    C[i*ldc+j] = alpha · Σ_{p<k} opA(i,p)·opB(p,j) + beta·C[i*ldc+j]
//
// opA(i,p) is A[i*lda+p], or A[p*lda+i] when transA; opB(p,j) is
// B[p*ldb+j], or B[j*ldb+p] when transB. When beta is 0, C is overwritten
// (NaN in C does not propagate), as in BLAS.
func SgemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		crow := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(crow)
		} else if beta != 1 {
			for j := range crow {
				crow[j] *= beta
			}
		}
		if transB {
			for j := 0; j < n; j++ {
				brow := b[j*ldb : j*ldb+k]
				var s float32
				if transA {
					for p, bv := range brow {
						s += a[p*lda+i] * bv
					}
				} else {
					arow := a[i*lda : i*lda+k]
					for p, bv := range brow {
						s += arow[p] * bv
					}
				}
				crow[j] += alpha * s
			}
			continue
		}
		for p := 0; p < k; p++ {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			if av == 0 {
				continue
			}
			av *= alpha
			brow := b[p*ldb : p*ldb+n]
			for j, bv := range brow {
				crow[j] += av * bv
			}
		}
	}
}

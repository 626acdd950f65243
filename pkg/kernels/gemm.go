package kernels

import "sync"

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices, where
// op(A) is m×k and op(B) is k×n:
//
//	for i < m, j < n:
//	    C[i*ldc+j] = alpha · Σ_{p<k} opA(i,p)·opB(p,j) + beta·C[i*ldc+j]
//
// opA(i,p) is A[i*lda+p], or A[p*lda+i] when transA; opB(p,j) is
// B[p*ldb+j], or B[j*ldb+p] when transB. When beta is 0, C is overwritten
// (NaN in C does not propagate), as in BLAS.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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

// SgemmParallel is Sgemm with the rows of C split over up to threads
// goroutines. Each row is computed exactly as Sgemm computes it, so the
// result is bit-identical to Sgemm for any thread count.
func SgemmParallel(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	const minWork = 1 << 16
	if threads <= 1 || m < 2 || m*n*k < minWork {
		Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if threads > m {
		threads = m
	}
	var wg sync.WaitGroup
	rows := (m + threads - 1) / threads
	for i0 := 0; i0 < m; i0 += rows {
		i1 := min(i0+rows, m)
		wg.Add(1)
		go func(i0, i1 int) {
			defer wg.Done()
			// Row i of op(A) starts at A[i*lda], or at column i when transposed.
			aa := a[i0:]
			if !transA {
				aa = a[i0*lda:]
			}
			Sgemm(transA, transB, i1-i0, n, k, alpha, aa, lda, b, ldb, beta, c[i0*ldc:], ldc)
		}(i0, i1)
	}
	wg.Wait()
}

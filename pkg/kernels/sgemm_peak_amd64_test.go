//go:build !noasm && amd64

package kernels

import (
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/cpu"
)

// BenchmarkFMAPeak measures the FMA throughput of one core with chains of
// independent FMAs: the ceiling the GEMM benchmarks are compared with.
func BenchmarkFMAPeak(b *testing.B) {
	const iters = 1 << 20
	var out float32
	if cpu.X86.HasAVX512F {
		b.Run("avx512", func(b *testing.B) {
			for b.Loop() {
				fmaPeakAVX512(iters, &out)
			}
			b.ReportMetric(float64(iters)*24*32*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		b.Run("avx2", func(b *testing.B) {
			for b.Loop() {
				fmaPeakAVX2(iters, &out)
			}
			b.ReportMetric(float64(iters)*12*16*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}

// BenchmarkSgemmPeakRatio interleaves the FMA peak loop with a
// single-threaded 1024³ SGEMM of the active kernel and reports the best
// of each (the run least disturbed by other work on a shared machine)
// and their ratio.
func BenchmarkSgemmPeakRatio(b *testing.B) {
	const n, iters = 1024, 1 << 22
	var out float32
	peakOnce := func() float64 {
		start := time.Now()
		if activeGemm == avx512Gemm {
			fmaPeakAVX512(iters, &out)
			return float64(iters) * 24 * 32 / time.Since(start).Seconds() / 1e9
		}
		fmaPeakAVX2(iters, &out)
		return float64(iters) * 12 * 16 / time.Since(start).Seconds() / 1e9
	}
	r := rand.New(rand.NewPCG(1, 1))
	x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
	var bestPeak, bestGemm float64
	for b.Loop() {
		bestPeak = max(bestPeak, peakOnce())
		start := time.Now()
		Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
		bestGemm = max(bestGemm, 2*n*n*n/time.Since(start).Seconds()/1e9)
	}
	b.ReportMetric(bestPeak, "peak-GFLOPS")
	b.ReportMetric(bestGemm, "sgemm-GFLOPS")
	b.ReportMetric(bestGemm/bestPeak, "of-peak")
}

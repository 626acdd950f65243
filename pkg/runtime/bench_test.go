package runtime

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// BenchmarkModels runs every shared model on its reference inputs, at the
// thread count in COREAIQ_BENCH_THREADS (default 1), for profiling:
//
//	go test -run - -bench Models/resnet18 -cpuprofile cpu.out ./pkg/runtime
func BenchmarkModels(b *testing.B) {
	threads := 1
	if v := os.Getenv("COREAIQ_BENCH_THREADS"); v != "" {
		if _, err := fmt.Sscan(v, &threads); err != nil {
			b.Fatalf("COREAIQ_BENCH_THREADS=%q: %v", v, err)
		}
	}
	for _, c := range detCasesB(b) {
		b.Run(c.name, func(b *testing.B) {
			s, err := NewGoSession(c.model, Options{Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Run(context.Background(), c.inputs, RunOptions{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Run(context.Background(), c.inputs, RunOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

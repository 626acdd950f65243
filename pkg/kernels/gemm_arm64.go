//go:build !noasm && arm64

package kernels

//go:generate sh -c "cd ../../internal/asm/neon && go run . -dir ../../../pkg/kernels"

// gemm8x8NEON computes an 8×8 tile of C from kc steps of packed panels a
// (8 floats a step) and b (8 floats a step); see internal/asm/neon.
//
//go:noescape
func gemm8x8NEON(kc int, a, b, c *float32, ldc int, accumulate int)

// neonGemm is the arm64 micro-kernel family. Its one kernel computes
// eight rows; the blocked product and the wide convolution send tiles of
// fewer rows through their scratch tiles, so rows lists 8 alone.
var neonGemm = &gemmArch{name: "neon", mr: 8, nr: 8, kc: 256, mc: 128, nc: 1024, rows: []int{8},
	tile: neonTile, tileI: gatheredTileI(neonTile)}

func neonTile(rows, kc int, a, b, c *float32, ldc int, accumulate bool) {
	gemm8x8NEON(kc, a, b, c, ldc, flag(accumulate))
}

// gemmArches lists the micro-kernel families this build runs, widest
// first: NEON is part of every arm64 CPU (ARMv8-A's Advanced SIMD).
func gemmArches() []*gemmArch {
	if hasNEON {
		return []*gemmArch{neonGemm, goArch}
	}
	return []*gemmArch{goArch}
}

var activeGemm = gemmArches()[0]
